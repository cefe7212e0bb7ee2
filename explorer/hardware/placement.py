"""How a mesh lies on a target's devices: the compile's placement, and before any compile the links each axis rides.

This module's one job is placing a logical mesh on a target. The compile lays the mesh over the
target's devices with ``place_mesh`` (over ``target_topology``'s devices: libtpu's for a TPU slice, the
CUDA plugin's for a GPU cluster) and describes it per axis with ``placement`` (``torus_placement``: the
torus axes a TPU mesh axis moves along; ``gpu_placement``: the hosts and GPUs a GPU mesh axis spans).

The advisor's stage 1 costs each mesh axis' collectives with ``roofline.collective_seconds``; what it
needs from the target is how the axis lies on it, read here the way the compile will lay it:

- **A TPU slice.** The compile's own placement (``place_mesh`` over libtpu's devices,
  then ``torus_placement``), computed in a child process (the parent never loads
  libtpu; ``devices.child_environment``), once per slice and mesh shape in this process
  (``prefetch`` asks for every shape of a search at once: one child, about a second). One group of
  the axis (the devices that differ only along it) runs along some torus axes: along a whole axis
  that has wraparound links (``Target.wraparound``) it is a *ring* and moves data both ways (the book's
  bidirectional W_ici); along part of an axis, or one without wraparound, it is a *line* and uses
  one direction ("How to Scale Your Model", part 2: "it typically doubles the time of most
  communication"). An axis over several torus axes gets each one's bandwidth (the book's n_axes):
  ``ring_axes`` counts 1 per ring and 0.5 per line (the two devices of a TPU7x chip: 1), and is
  the ``ici_axes`` the roofline reads.
- **A GPU cluster.** JAX numbers the GPUs host-major and lays the mesh over them in that order
  (``targets.hosts_per_axis``): an axis whose groups stay inside one host rides NVLink, one that
  spans hosts the network; described as the compile describes it (``gpu_placement``).

Example: ``mesh_links(parse_target("h100:2x8"), (4, 4), ("fsdp", "tensor"))`` says fsdp spans 2
hosts (the network) and tensor stays in one (NVLink).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import math
import sys
import threading
from typing import Any, Iterable, Sequence

from explorer import forkserver
from explorer.errors import ExplorerError, first_line
from explorer.hardware.devices import PROJECT_ROOT
from explorer.hardware.targets import Target, hosts_per_axis, parse_target, slice_split, tpu_topology
from explorer.formats import counted, plural

LINE = 0.5  # a torus axis run along as a line (no wraparound, or part of the axis): one direction of its links


@dataclasses.dataclass(frozen=True)
class AxisPlacement:
    """How one logical mesh axis lies on the devices: the torus axes (or host and GPU levels) its groups move along.

    A GPU cluster's axis also says how many hosts and GPUs per host one group spans, what its
    collectives ride (``nvlink`` or ``network``) and a sentence; a TPU slice's leaves them None.
    On several TPU slices, ``slices`` is how many one group spans (``link`` ``dcn`` when more than one, else ``ici``).
    """

    axis: str
    size: int
    torus_axes: tuple[str, ...]
    hosts: int | None = None
    gpus_per_host: int | None = None
    link: str | None = None
    text: str | None = None
    slices: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"axis": self.axis, "size": self.size, "torus_axes": list(self.torus_axes)}
        if self.hosts is not None:
            data |= {"hosts": self.hosts, "gpus_per_host": self.gpus_per_host, "link": self.link, "text": self.text}
        if self.slices is not None:
            data |= {"slices": self.slices, "link": self.link, "text": self.text}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AxisPlacement:
        return cls(
            data["axis"],
            data["size"],
            tuple(data["torus_axes"]),
            data.get("hosts"),
            data.get("gpus_per_host"),
            data.get("link"),
            data.get("text"),
            data.get("slices"),
        )


@dataclasses.dataclass(frozen=True)
class AxisLink:
    """How one mesh axis lies on the target and what its collectives ride."""

    axis: str
    size: int
    torus_axes: tuple[str, ...]  # TPU: x, y, z, core; GPU: host, gpu (as ``placement`` names them)
    rings: tuple[bool, ...]  # TPU: per torus axis, whether a group runs around it as a ring (else a line)
    ring_axes: float  # TPU: torus axes' worth of bidirectional bandwidth (roofline's ``ici_axes``); 1 on a GPU
    hosts: int  # GPU: hosts one group spans (1: NVLink only); 1 on a TPU slice
    link: str  # "ici", "nvlink", "network" or "dcn" (several TPU slices: a group spans more than one)
    text: str
    slices: int = 1  # several TPU slices: the slices one group spans (its collectives cross the DCN when more than 1)

    @property
    def short(self) -> str:
        """One table cell: ``fsdp: x ring, y line``, ``tensor: NVLink``, ``fsdp: 8 hosts``."""
        if self.size <= 1:
            return f"{self.axis}: -"
        if self.link == "dcn":
            return f"{self.axis}: {self.slices} slices (DCN)"
        if self.link == "ici":
            return f"{self.axis}: " + ", ".join(f"{t} {'ring' if r else 'line'}" for t, r in zip(self.torus_axes, self.rings))
        return f"{self.axis}: NVLink" if self.hosts == 1 else f"{self.axis}: {self.hosts} hosts"

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "size": self.size,
            "torus_axes": list(self.torus_axes),
            "rings": list(self.rings),
            "ring_axes": self.ring_axes,
            "hosts": self.hosts,
            "link": self.link,
            "text": self.text,
            "slices": self.slices,
        }


_torus: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}  # (topology, mesh shape) -> the child's placement
_lock = threading.Lock()


def mesh_links(target: Target, shape: Sequence[int], axes: Sequence[str], dcn: Sequence[int] | None = None) -> tuple[AxisLink, ...]:
    """Each mesh axis' placement on ``target`` and the links it rides (see the module docstring).

    Several slices: ``dcn`` (the layout's ``mesh.dcn``; by default the outermost axis spans them, ``targets.slice_split``)
    says how many slices each axis spans; each axis' part inside a slice is placed on one slice as above, and an axis
    over more than one slice rides the DCN.
    """
    shape = tuple(int(s) for s in shape)
    if target.multislice:
        split = slice_split(target, shape, tuple(axes), tuple(dcn) if dcn is not None else None)
        inside = mesh_links(parse_target(target.slice_topology), tuple(s // d for s, d in zip(shape, split)), axes)
        return tuple(
            dataclasses.replace(
                link,
                size=size,
                slices=count,
                link="dcn" if count > 1 else link.link,
                text=f"{link.axis} ({size}): across {count} slices over the DCN; inside each, {link.text}" if count > 1 else link.text,
            )
            for link, size, count in zip(inside, shape, split)
        )
    if target.is_gpu:
        return _gpu_links(target, shape, tuple(axes))
    prefetch(target, [shape])
    placed = _torus[(target.topology, shape)]
    wraps = target.wraparound
    links = []
    for name, entry in zip(axes, placed["axes"]):
        rings = tuple(
            t == "core" or (whole and _dim(t) < len(wraps) and wraps[_dim(t)]) for t, whole in zip(entry["torus_axes"], entry["whole"])
        )
        ring_axes = sum(1.0 if ring else LINE for ring in rings)
        parts = ", ".join(
            f"{t} ({'on chip' if t == 'core' else 'a ring, both ways' if r else 'a line, one way'})"
            for t, r in zip(entry["torus_axes"], rings)
        )
        text = f"{name} ({entry['size']}): " + (f"along {plural('torus axis', len(rings))} {parts}" if parts else "one device")
        links.append(AxisLink(name, entry["size"], tuple(entry["torus_axes"]), rings, ring_axes, 1, "ici", text))
    return tuple(links)


def prefetch(target: Target, shapes: Iterable[Sequence[int]], dcns: Iterable[Sequence[int] | None] | None = None) -> None:
    """Place every shape not yet placed for this TPU slice, in one child process (nothing for a GPU cluster). Several
    slices: each shape's part inside one slice (``dcns``: each mesh's ``mesh.dcn``), on one slice; a split the slices
    cannot hold is left for ``mesh_links`` to refuse."""
    if target.is_gpu:
        return
    if target.multislice:
        inside = []
        for shape, dcn in zip(shapes, dcns or itertools.repeat(None)):
            with contextlib.suppress(ExplorerError):
                split = slice_split(target, tuple(shape), tuple(f"axis{i}" for i in range(len(shape))), dcn)
                inside.append(tuple(s // d for s, d in zip(shape, split)))
        prefetch(parse_target(target.slice_topology), inside)
        return
    with _lock:
        missing = sorted(
            {tuple(int(s) for s in shape) for shape in shapes} - {shape for topology, shape in _torus if topology == target.topology}
        )
        if not missing:
            return
        from explorer.hardware.devices import child_environment
        from explorer.hardware.libtpu_log import drop_noise

        try:
            done = forkserver.run(
                [target.topology, json.dumps(missing)],
                module="explorer.hardware.placement",
                env=child_environment(target),
                cwd=PROJECT_ROOT,
                timeout=600,
            )
        except ChildProcessError as error:
            raise ExplorerError("target", target.name, f"cannot place meshes on its torus: {error}") from None
        if done.returncode != 0:
            lines = drop_noise(line for line in done.stderr.splitlines() if line.strip())
            raise ExplorerError("target", target.name, f"cannot place meshes on its torus: {lines[-1] if lines else done.returncode}")
        for shape, placed in zip(missing, json.loads(done.stdout.strip().splitlines()[-1])):
            _torus[(target.topology, shape)] = placed


def _dim(name: str) -> int:
    return "xyz".index(name) if name in ("x", "y", "z") else 99


@dataclasses.dataclass(frozen=True)
class _DeviceId:
    """A GPU as the cluster numbers it (host-major): all ``gpu_placement`` reads of a device without coordinates."""

    id: int


_Mesh = collections.namedtuple("_Mesh", "devices axis_names")  # what ``gpu_placement`` reads of a mesh


def _gpu_links(target: Target, shape: tuple[int, ...], axes: tuple[str, ...]) -> tuple[AxisLink, ...]:
    """The compile's description of a GPU mesh (``gpu_placement``), over the device ids in JAX's host-major order."""
    import numpy as np

    devices = np.empty(target.devices, dtype=object)
    devices[:] = [_DeviceId(i) for i in range(target.devices)]
    mesh = _Mesh(devices.reshape(shape), axes)
    spans = hosts_per_axis(target, shape)
    out = []
    for entry, hosts in zip(gpu_placement(mesh, target), spans):
        if entry.hosts != hosts:  # the two descriptions of JAX's host-major order disagree: a bug here, not the user's
            raise ExplorerError("mesh.shape", list(shape), f"placed on {entry.hosts} and {hosts} hosts at once")
        out.append(AxisLink(entry.axis, entry.size, tuple(entry.torus_axes), (), 1.0, hosts, entry.link, entry.text))
    return tuple(out)


# --- the compile's placement: the target's devices, the mesh laid over them, and how each axis lies -------------


def target_topology(target: Target):
    """The target's devices: libtpu's topology for a TPU slice, the CUDA plugin's from XLA's target config for GPUs."""
    from jax.experimental import topologies

    if target.is_gpu:
        try:
            return topologies.get_topology_desc(platform="cuda", target_config=target.chip.target_config, topology=target.gpu_topology)
        except Exception as error:  # the plugin refusing the config or the topology
            raise ExplorerError(
                "target", target.name, f"the CUDA plugin cannot describe {target.gpu_topology}: {first_line(error)}"
            ) from None
    return tpu_topology(target)


PLACEMENTS = ("mesh_utils", "split_physical_axes", "device_order", "hybrid_mesh", "hybrid_split_physical_axes")


def place_mesh(
    devices: list,
    shape: tuple[int, ...],
    axes: tuple[str, ...],
    types: tuple[str, ...] | None = None,
    dcn: tuple[int, ...] | None = None,
):
    """The slice's devices laid out as the logical mesh, and how: the first of ``PLACEMENTS`` that works.

    ``mesh_utils``: ``topologies.make_mesh``'s own placement (each logical axis a product of
    whole physical axes); ``split_physical_axes``: ``mesh_utils.create_device_mesh(...,
    allow_split_physical_axes=True)``, which lets a logical axis take part of a physical one
    (8x8 on a 4x4x4 torus); ``device_order``: the devices in libtpu's order, reshaped. The
    result's ``mesh.placement`` says which torus axes each logical axis moves along. ``types`` are the
    layout's axis types (``topologies.make_mesh`` and ``Mesh`` default to Auto).

    Several slices (``dcn``: per axis, the slices it spans, ``targets.slice_split``): MaxText's
    ``mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, devices)``, each axis ``dcn`` slices of
    ``shape // dcn`` devices (``hybrid_mesh``; ``hybrid_split_physical_axes`` where a slice's part needs
    ``allow_split_physical_axes``).
    """
    from explorer.meshes import axis_types_of

    import numpy as np
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh

    if dcn is not None and math.prod(dcn) > 1:
        ici = tuple(size // count for size, count in zip(shape, dcn))
        for method, split in zip(PLACEMENTS[3:], (False, True)):
            try:
                grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices, allow_split_physical_axes=split)
                return Mesh(grid, axes, axis_types=axis_types_of(types or ("auto",) * len(axes))), method
            except Exception:  # mesh_utils refuses the slice's part: split its physical axes
                continue
        raise ExplorerError("mesh.dcn", list(dcn), f"cannot lay {list(shape)} over {len(devices)} devices of {math.prod(dcn)} slices")
    attempts = (
        lambda: mesh_utils.create_device_mesh(shape, devices),
        lambda: mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True),
        lambda: np.array(devices, dtype=object).reshape(shape),
    )
    for method, attempt in zip(PLACEMENTS, attempts):
        try:
            return Mesh(attempt(), axes, axis_types=axis_types_of(types or ("auto",) * len(axes))), method
        except Exception:  # mesh_utils refuses the shape: try the next placement
            continue
    raise ExplorerError("mesh.shape", list(shape), f"cannot be laid over {len(devices)} devices")


def device_coords(device) -> tuple[int, ...]:
    """A device's chip coordinates on the torus (its id where it has none)."""
    return tuple(getattr(device, "coords", None) or (device.id,))


def _torus_coords(device) -> tuple[int, ...]:
    """A device's chip coordinates and its core on the chip (0 but on a TPU7x chip's second TensorCore)."""
    return device_coords(device) + (getattr(device, "core_on_chip", 0) or 0,)


def device_host(device, target: Target) -> int:
    """The host of a GPU device: the CUDA plugin's coordinates are (partition, host, GPU); else host-major ids."""
    coords = getattr(device, "coords", None)
    return int(coords[1]) if coords is not None and len(coords) == 3 else device.id // target.gpus_per_host


def placement(mesh, target: Target | None = None) -> tuple[AxisPlacement, ...]:
    """How each logical mesh axis lies on the torus, on a GPU cluster's hosts (``gpu_placement``) or across slices."""
    if target is not None and target.is_gpu:
        return gpu_placement(mesh, target)
    if target is not None and target.multislice:
        return slice_placement(mesh)
    return torus_placement(mesh)


def device_slice(device) -> int:
    """The slice a device lies in (a multi-slice target's MegaScale device says it; 0 on one slice)."""
    return int(getattr(device, "slice_index", 0) or 0)


def slice_placement(mesh) -> tuple[AxisPlacement, ...]:
    """How each mesh axis lies on several slices: the slices one group spans (``slices``; link ``dcn`` when more than
    one: its collectives cross the data-center network), and the torus axes it moves along inside each slice."""
    import numpy as np

    indices = np.array([device_slice(d) for d in mesh.devices.flat]).reshape(mesh.devices.shape)
    out = []
    for torus, name in zip(torus_placement(mesh), mesh.axis_names):
        axis = mesh.axis_names.index(name)
        groups = np.moveaxis(indices, axis, -1).reshape(-1, torus.size)
        spanned = max(len(set(g.tolist())) for g in groups)
        inside = torus.size // spanned
        where = counted(inside, "device") + (f" along {', '.join(torus.torus_axes)}" if torus.torus_axes else "")
        text = (
            f"{name} ({torus.size}): across {spanned} slices over the DCN, {where} in each"
            if spanned > 1
            else f"{name} ({torus.size}): inside each slice, {where} over ICI"
        )
        out.append(dataclasses.replace(torus, slices=spanned, link="dcn" if spanned > 1 else "ici", text=text))
    return tuple(out)


def gpu_placement(mesh, target: Target) -> tuple[AxisPlacement, ...]:
    """How each mesh axis falls on the hosts and GPUs (devices are host-major): per axis, one group's spread.

    ``hosts``: the hosts one group of the axis (the devices that differ only along it) spans;
    ``gpus_per_host``: its GPUs in each of them; ``link``: ``nvlink`` when a group stays in one
    host, ``network`` when it spans hosts; ``torus_axes`` names the levels it moves along (``host``,
    ``gpu``), as a TPU axis names its torus axes.
    """
    import numpy as np

    hosts = np.array([device_host(d, target) for d in mesh.devices.flat]).reshape(mesh.devices.shape)
    out = []
    for axis, name in enumerate(mesh.axis_names):
        size = int(mesh.devices.shape[axis])
        groups = np.moveaxis(hosts, axis, -1).reshape(-1, size)
        spanned = max(len(set(g.tolist())) for g in groups)
        per_host = size // spanned
        levels = (["host"] if spanned > 1 else []) + (["gpu"] if per_host > 1 else [])
        where = (
            f"{counted(per_host, 'GPU')} of one host, over NVLink"
            if spanned == 1
            else f"{counted(per_host, 'GPU')} in each of {spanned} hosts, over the network"
        )
        out.append(
            AxisPlacement(
                name, size, tuple(levels), spanned, per_host, "nvlink" if spanned == 1 else "network", f"{name} ({size}): {where}"
            )
        )
    return tuple(out)


def torus_placement(mesh) -> tuple[AxisPlacement, ...]:
    """How each logical mesh axis lies on the torus: for each, the torus axes its steps move along.

    ``torus_axes`` lists the physical axes (x, y, z, or ``core`` for the two devices of a TPU7x
    chip) along which the devices of one logical axis' groups differ: a logical axis of size 8
    on a 4x4x4 torus spans two physical axes (it was split), and its collectives' rings cross both.
    """
    import numpy as np

    devices = mesh.devices
    coords = np.array([_torus_coords(d) for d in devices.flat]).reshape(devices.shape + (-1,))
    names = ["x", "y", "z"][: coords.shape[-1] - 1] + ["core"]
    out = []
    for axis, name in enumerate(mesh.axis_names):
        size = devices.shape[axis]
        moved = coords.take(range(size), axis=axis)
        spans = np.nonzero((moved.max(axis=axis) != moved.min(axis=axis)).reshape(-1, coords.shape[-1]).any(0))[0]
        out.append(AxisPlacement(name, int(size), tuple(names[int(a)] for a in spans)))
    return tuple(out)


def child_main() -> None:
    """In the child (``python -m explorer.hardware.placement TOPOLOGY SHAPES``, started by ``prefetch``): each shape laid
    over the slice's devices as the compile lays it; per mesh axis the torus axes a group runs along and whether it
    covers each whole. Prints one JSON line."""
    import numpy as np

    from explorer.hardware.targets import parse_target

    target = parse_target(sys.argv[1])
    devices = list(target_topology(target).devices)
    out = []
    for shape in json.loads(sys.argv[2]):
        axes = tuple(f"axis{i}" for i in range(len(shape)))
        mesh, method = place_mesh(devices, tuple(shape), axes)
        coords = np.array([_torus_coords(d) for d in mesh.devices.flat])
        names = ["x", "y", "z"][: coords.shape[-1] - 1] + ["core"]
        extent = [len(set(coords[:, d].tolist())) for d in range(coords.shape[-1])]
        grid = coords.reshape(tuple(shape) + (-1,))
        entries = []
        for axis, placed in enumerate(torus_placement(mesh)):
            groups = np.moveaxis(grid, axis, -2).reshape(-1, shape[axis], coords.shape[-1])
            whole = [all(len(set(g[:, names.index(t)].tolist())) == extent[names.index(t)] for g in groups) for t in placed.torus_axes]
            entries.append({"size": placed.size, "torus_axes": list(placed.torus_axes), "whole": whole})
        out.append({"method": method, "axes": entries})
    print(json.dumps(out))


if __name__ == "__main__":
    child_main()
