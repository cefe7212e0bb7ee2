"""Targets to plan for: slices of a TPU generation and clusters of NVIDIA GPUs, their names and shapes.

This module's one job is naming targets and the arithmetic on them (slice shapes, devices, hosts per mesh axis,
whether a mesh fits); the accelerators' figures and sources are ``accelerators``'.

A *target* is a slice of one chip generation. It is named either as Cloud TPU
names it (``v5litepod-16``, ``v6e-64``: chips; ``v5p-128``, ``v4-32``: TensorCores,
two per chip) or as libtpu names a topology (``v5e:4x4``, ``v5p:4x4x4``,
``v4:4x4x4``). Compiling for it needs only the topology string (and, for v4,
``chip_config_name='megacore'`` so that one device is one chip), which
``jax.experimental.topologies.get_topology_desc`` turns into a slice's devices.

The registry is keyed by generation (``CHIPS``); NVIDIA GPUs are ``Gpu`` entries in ``GPUS``,
named ``h100:2x8`` (hosts x GPUs per host) and compiled from XLA's GPU target config (``accelerators``).

Single-chip and two-chip slices (``v5e:1x1``, ``v6e:1x1``, ``v5p:1x1x1``, ``v4:1x1x1``,
``tpu7x:1x1x1``, ``v5e:1x2``) are accepted as topologies: libtpu 0.0.50 describes them. TPU7x (Ironwood) slices are
named as MaxText and GKE name them, ``tpu7x-N`` with N TensorCores (two per chip: ``tpu7x-128`` is ``tpu7x:4x4x4``),
or as xpk's device types, ``tpu7x-4x4x4``.

NVIDIA GPU clusters: ``a100:HxG``, ``h100:HxG``, ``h200:HxG``, ``b200:HxG`` are H hosts of G GPUs
each (G 1 to 8, H 1 to 128; ``h100:8x8`` is 64 H100s, eight DGX/HGX hosts). JAX's CUDA plugin
(``jax-cuda13-plugin``, a compile-only install: no GPU, no CUDA libraries) describes such a cluster
from XLA's GPU target config, a text proto per GPU that XLA itself ships (vendored unchanged in
``explorer/hardware/gpu_targets/``, see its SOURCE.md), and the topology ``1xHxG`` (partitions x hosts x GPUs
per host). JAX numbers the devices host-major: host 0's GPUs are devices 0..G-1, host 1's the next G.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from explorer.hardware.accelerators import (
    BY_CLOUD_PREFIX,
    CHIPS,
    DCN,
    GPU_CLUSTERS,
    GPUS,
    MAX_CHIPS,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS,
    Chip,
    Dcn,
    Gpu,
    memory_fraction,
)
from explorer.errors import ExplorerError
from explorer.hardware.libtpu import libtpu_refusal
from explorer.formats import counted


@dataclasses.dataclass(frozen=True)
class Target:
    """A slice of ``chip`` (its libtpu topology), or a GPU cluster: ``chip`` a ``Gpu``, ``shape`` (hosts, GPUs per host)."""

    name: str
    chip: Chip | Gpu
    shape: tuple[int, ...]  # one slice's topology (a GPU cluster's hosts x GPUs per host)
    num_slices: int = 1  # TPU slices joined by the data-center network (``2xv5p-16``: 2)

    @property
    def is_gpu(self) -> bool:
        return isinstance(self.chip, Gpu)

    @property
    def hosts(self) -> int:
        """Hosts of a GPU cluster (1 for a TPU slice: its hosts are not modelled)."""
        return self.shape[0] if self.is_gpu else 1

    @property
    def gpus_per_host(self) -> int:
        return self.shape[1] if self.is_gpu else 0

    @property
    def topology(self) -> str:
        """libtpu's topology (``v5p:4x4x4``; ``2xv5p:4x4x4`` for slices), or the GPU cluster's own name (``h100:2x8``):
        what parse_target reads back."""
        return (f"{self.num_slices}x" if self.num_slices > 1 else "") + self.slice_topology

    @property
    def slice_topology(self) -> str:
        """One slice's libtpu topology (``v5p:4x4x4``): what ``get_topology_desc`` is given, with ``num_slices``."""
        return f"{self.chip.generation}:{'x'.join(str(s) for s in self.shape)}"

    @property
    def multislice(self) -> bool:
        return self.num_slices > 1

    @property
    def dcn(self) -> Dcn | None:
        """The data-center network between the slices (``accelerators.DCN``), or None for one slice or a GPU cluster."""
        return DCN.get(self.chip.generation) if self.multislice else None

    @property
    def wraparound(self) -> tuple[bool, ...]:
        """Per torus axis of a TPU slice (x, y[, z]), whether it has wraparound links (a ring, both directions).

        After "How to Scale Your Model" (part 2, https://jax-ml.github.io/scaling-book/tpus/): on the
        3-D generations (v4, v5p; TPU7x assumed alike) the optical switches give every axis its
        wraparound only in a slice made of whole 4x4x4 cubes (every dimension a multiple of 4: 4x4x4,
        4x4x8; a 2x2x2 or a 2x4x4 has none); on v5e and v6e (2-D, no optical switches) an axis has
        it when it is 16 chips long (a 16x16 pod, or the long axis of an 8x16). Without one, a
        collective along the axis uses one direction only ("it typically doubles the time of most
        communication"). Empty for a GPU cluster.

        >>> parse_target("v5p-128").wraparound, parse_target("v5litepod-128").wraparound, parse_target("v5p-16").wraparound
        ((True, True, True), (False, True), (False, False, False))
        """
        if self.is_gpu:
            return ()
        if self.chip.dims == 3:
            return (all(s % 4 == 0 for s in self.shape),) * 3
        return tuple(s == 16 for s in self.shape)

    @property
    def gpu_topology(self) -> str:
        """The CUDA plugin's topology, partitions x hosts x GPUs per host (``1x2x8``)."""
        return f"1x{self.shape[0]}x{self.shape[1]}"

    @property
    def chips(self) -> int:
        """All chips: ``num_slices`` times one slice's."""
        return math.prod(self.shape) * self.num_slices

    @property
    def slice_chips(self) -> int:
        return math.prod(self.shape)

    @property
    def devices(self) -> int:
        """JAX devices of the slice: what a mesh for it must hold (chips, or 2 per chip on TPU7x)."""
        return self.chips * self.chip.devices_per_chip

    @property
    def cloud_name(self) -> str:
        """Cloud TPU's type name, or the topology where the generation has none here (TPU7x)."""
        if self.is_gpu or not self.chip.cloud_prefix or self.slice_chips < self.chip.cloud_min_chips:
            return self.topology
        return (
            f"{self.num_slices}x" if self.multislice else ""
        ) + f"{self.chip.cloud_prefix}-{self.slice_chips * self.chip.cores_per_chip}"

    def to_dict(self) -> dict:
        """Per-device figures (a device is a chip on every generation but TPU7x, where it is half of one)."""
        chip = self.chip
        if isinstance(chip, Gpu):
            return {
                "name": self.name,
                "topology": self.topology,
                "platform": "cuda",
                "chips": self.chips,
                "devices": self.devices,
                "hosts": self.hosts,
                "gpus_per_host": self.gpus_per_host,
                "devices_per_chip": 1,
                "device_kind": chip.device_kind,
                "hbm_bytes": chip.hbm_bytes,
                "usable_bytes": chip.usable_bytes,
                "memory_fraction": memory_fraction(),
                "peak_flops": chip.peak_flops,
                "hbm_bandwidth": chip.hbm_bandwidth,
                "nvlink_bandwidth": chip.nvlink_bandwidth,
                "network_bandwidth": chip.network_bandwidth,
                "ici_bandwidth": None,
                "ici_links": None,
                "chip_hbm_bytes": chip.hbm_bytes,
                "chip_peak_flops": chip.peak_flops,
                "chip_hbm_bandwidth": chip.hbm_bandwidth,
                "target_config": f"explorer/hardware/gpu_targets/{chip.config_file}",
                "sources": list(chip.sources),
            }
        return {
            "name": self.name,
            "topology": self.topology,
            "chips": self.chips,
            "devices": self.devices,
            "devices_per_chip": chip.devices_per_chip,
            "device_kind": chip.device_kind,
            "hbm_bytes": chip.device_hbm_bytes,
            "peak_flops": chip.device_peak_flops,
            "hbm_bandwidth": chip.device_hbm_bandwidth,
            "ici_bandwidth": chip.device_ici_link_bandwidth,
            "ici_links": chip.ici_links,
            "chip_hbm_bytes": chip.hbm_bytes,
            "chip_peak_flops": chip.peak_flops,
            "chip_hbm_bandwidth": chip.hbm_bandwidth,
            "sources": list(chip.sources),
        } | self._dcn_dict()

    def _dcn_dict(self) -> dict:
        """A multi-slice target's slices and DCN figure (per chip, one way; what it is and its source)."""
        if not self.multislice:
            return {}
        dcn = self.dcn
        return {
            "slices": self.num_slices,
            "slice_topology": self.slice_topology,
            "dcn_bandwidth": dcn.bandwidth,
            "dcn_bandwidth_what": dcn.what,
            "dcn_bandwidth_source": dcn.source,
        }


def tpu_topology(target: Target):
    """libtpu's description of a TPU target's devices (slice by slice, each a MegaScale device with its slice_index).

    One description per topology and process, whatever the target's spelling (``v5e-8``, ``v5litepod-8``): a model that
    holds its own mesh (MaxText's layers do) builds it over these same devices, and JAX refuses a constraint whose
    devices come from another description, ids equal or not."""
    try:
        return described_topology(target.slice_topology, target.chip.chip_config_name or None, target.num_slices)
    except Exception as error:  # libtpu missing, refusing the name, or refusing to load (its lock)
        raise ExplorerError("target", target.name, libtpu_refusal(error) or f"libtpu cannot describe {target.topology}: {error}") from None


@functools.lru_cache(maxsize=16)
def described_topology(topology_name: str, chip_config_name: str | None, num_slices: int):
    """``get_topology_desc`` for a TPU slice topology, once per process (``tpu_topology``)."""
    from jax.experimental import topologies

    from explorer.hardware import libtpu_log

    kwargs = {"chip_config_name": chip_config_name} if chip_config_name else {}
    if num_slices > 1:
        kwargs["num_slices"] = num_slices
    with libtpu_log.quiet():  # the first description loads libtpu, which says it found no TPU VM here
        return topologies.get_topology_desc(topology_name=topology_name, platform="tpu", **kwargs)


def slice_shape(chip: Chip, chips: int) -> tuple[int, ...] | None:
    """The usual topology of a slice of ``chips`` chips (Cloud TPU's tables), or None if there is none.

    Sizes are powers of two; 2-D slices are ``a x b`` with ``a <= b <= 2a``, 3-D slices
    ``a x b x c`` likewise balanced (``2x2x1``, ``2x2x2``, ``2x2x4``, ``2x4x4``, ``4x4x4``, ...);
    one and two chips are ``1x1``/``1x2`` (``1x1x1``/``1x1x2``).
    """
    if chips < 1 or chips > MAX_CHIPS[chip.generation] or chips & (chips - 1):
        return None
    if chips <= 2:
        return (1,) * (chip.dims - 1) + (chips,)
    if chip.dims == 2:
        low = 1 << (chips.bit_length() - 1) // 2
        return (low, chips // low)
    if chips == 4:
        return (2, 2, 1)
    shape = [1, 1, 1]
    for index in range(chips.bit_length() - 1):
        shape[2 - index % 3] *= 2
    return tuple(shape)


def slices(chip: Chip) -> list[int]:
    """Chip counts of the slices this registry names for ``chip`` (from its smallest Cloud TPU type)."""
    return [
        1 << n for n in range(0, MAX_CHIPS[chip.generation].bit_length()) if 1 << n >= chip.cloud_min_chips and slice_shape(chip, 1 << n)
    ]


MAX_SLICES = 64  # slices of one multi-slice target (MaxText's compile_topology_num_slices)
_SLICES = re.compile(r"(?P<count>\d+)x(?P<slice>[a-z].*)")
_CLOUD_NAME = re.compile(r"(?P<prefix>[a-z0-9]+)-(?P<count>\d+)")
# Other names the ecosystem writes for a Cloud TPU type's prefix: MaxText (``compile_topology=v5e-256``, its
# accelerator_to_spec_map.py) names v5e slices ``v5e-N`` (N chips), as Cloud TPU names them ``v5litepod-N``.
CLOUD_PREFIX_ALIASES = {"v5e": "v5litepod"}
_TOPOLOGY = re.compile(r"(?P<generation>[a-z0-9]+):(?P<shape>\d+(?:x\d+)+)")
_DASHED_TOPOLOGY = re.compile(r"(?P<generation>[a-z0-9]+)-(?P<shape>\d+(?:x\d+)+)")  # xpk's --device-type=tpu7x-4x4x4
GPU_FORM = (
    f"a GPU cluster GPU:HOSTSxGPUS of {', '.join(GPUS)} (e.g. h100:1x8, h100:8x8: 1 to {MAX_HOSTS} hosts of 1 to {MAX_GPUS_PER_HOST} GPUs)"
)

# A bad name's message: short (the sidebar is narrow), with an example of each form; every form is in TARGET_FORMS (the
# app shows it and every listed name beside the message) and in docs/targets.md.
TARGET_EXAMPLES = "e.g. v5p-128, v5e-256, v5e:4x4, 2xv5p-16 or h100:2x8 (docs/targets.md lists every form)"
TARGET_FORMS = (
    "a Cloud TPU type (v5p-128, v5litepod-16 or v5e-16, v6e-64, v4-32, tpu7x-128), a libtpu topology GENERATION:AxB[xC] of "
    f"{', '.join(CHIPS)} (v5e:4x4, v5p:4x4x4, tpu7x:4x4x4; xpk's tpu7x-4x4x4), N slices of one (2xv5p-16) or {GPU_FORM}"
)


def tpu_names() -> list[str]:
    """The TPU slices the app lists (Cloud TPU type names, TPU7x topologies)."""
    names = []
    for chip in CHIPS.values():
        names += [Target("", chip, slice_shape(chip, n)).cloud_name for n in slices(chip)]
    return names


def gpu_names() -> list[str]:
    """The GPU clusters the app lists (any HOSTSxGPUS within the limits is accepted)."""
    return [f"{gpu}:{hosts}x{per_host}" for gpu in GPUS for hosts, per_host in GPU_CLUSTERS]


MULTISLICE_NAMES = (
    "2xv5litepod-4",
    "2xv5p-16",
    "2xv5p-128",
    "4xv5p-512",
    "2xv5litepod-256",
    "4xv6e-256",
)  # examples the app lists (any NxSLICE parses)


def valid_names() -> list[str]:
    """Examples of every accepted form, for the app's choices: the TPU slices, several slices, then the GPU clusters."""
    return tpu_names() + list(MULTISLICE_NAMES) + gpu_names()


def gpu_cluster(gpu: Gpu, devices: int) -> Target | None:
    """The usual cluster of ``devices`` GPUs: one host of up to 8, else hosts as full as possible (None if there is none).

    >>> [gpu_cluster(GPUS["h100"], n).topology for n in (4, 64, 12)]
    ['h100:1x4', 'h100:8x8', 'h100:2x6']
    """
    for per_host in range(min(devices, MAX_GPUS_PER_HOST), 0, -1):
        if devices % per_host == 0 and devices // per_host <= MAX_HOSTS:
            return Target("", gpu, (devices // per_host, per_host))
    return None


def hosts_per_axis(target: Target, mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The hosts one group of each mesh axis spans on a GPU cluster (1 per axis on a TPU slice), without compiling.

    JAX numbers a cluster's GPUs host-major and ``topologies.make_mesh`` lays them over the mesh in
    that order, so the leading axes span hosts: what ``placement.gpu_placement`` reads from the
    compiled mesh, for planners that have no devices (a group over 1 host rides NVLink, else the network).

    >>> hosts_per_axis(parse_target("h100:8x8"), (8, 8)), hosts_per_axis(parse_target("h100:2x8"), (4, 4))
    ((8, 1), (2, 1))
    """
    import numpy as np

    if not target.is_gpu:
        return (1,) * len(mesh_shape)
    hosts = (np.arange(math.prod(mesh_shape)) // target.gpus_per_host).reshape(mesh_shape)
    return tuple(
        max(len(set(group.tolist())) for group in np.moveaxis(hosts, axis, -1).reshape(-1, size)) for axis, size in enumerate(mesh_shape)
    )


def _parse_gpu(name: str, text: str, gpu: Gpu, shape: str) -> Target:
    sizes = tuple(int(s) for s in shape.split("x"))
    if len(sizes) != 2:
        raise ExplorerError(
            "target", name, f"names a GPU cluster as {gpu.generation}:HOSTSxGPUS, e.g. {gpu.generation}:2x8 (2 hosts of 8 GPUs)"
        )
    hosts, per_host = sizes
    if not 1 <= per_host <= MAX_GPUS_PER_HOST or not 1 <= hosts <= MAX_HOSTS:
        raise ExplorerError(
            "target",
            name,
            f"has {hosts} hosts of {per_host} GPUs; a cluster here has 1 to {MAX_HOSTS} hosts of 1 to {MAX_GPUS_PER_HOST} "
            f"GPUs (one NVLink domain per host), e.g. {gpu.generation}:1x8, {gpu.generation}:8x8",
        )
    return Target(text, gpu, (hosts, per_host))


def parse_target(name: str) -> Target:
    """A target from a Cloud TPU type name, a libtpu topology string or a GPU cluster (``h100:2x8``).

    Example::

        >>> target = parse_target("v5p-128")
        >>> target.topology, target.chips
        ('v5p:4x4x4', 64)
        >>> cluster = parse_target("h100:2x8")
        >>> cluster.hosts, cluster.gpus_per_host, cluster.devices, cluster.gpu_topology
        (2, 8, 16, '1x2x8')
    """
    text = str(name).strip().lower()
    if not text:
        raise ExplorerError("target", name, f"is empty: give a TPU slice or a GPU cluster, {TARGET_EXAMPLES}")
    several = _SLICES.fullmatch(text)
    if several:
        return _parse_slices(name, text, int(several["count"]), several["slice"])
    dashed = _DASHED_TOPOLOGY.fullmatch(text)
    if dashed and dashed["generation"] in CHIPS:  # xpk's device type, tpu7x-4x4x4: the topology tpu7x:4x4x4
        text = f"{dashed['generation']}:{dashed['shape']}"
    cloud, topology = _CLOUD_NAME.fullmatch(text), _TOPOLOGY.fullmatch(text)
    if topology and topology["generation"] in GPUS:
        return _parse_gpu(name, text, GPUS[topology["generation"]], topology["shape"])
    if cloud and cloud["prefix"] in GPUS:  # h100-8: a GPU count written as a Cloud TPU type
        cluster = gpu_cluster(GPUS[cloud["prefix"]], int(cloud["count"]))
        raise ExplorerError(
            "target",
            name,
            "names GPUs as a TPU type would; a GPU cluster is GPU:HOSTSxGPUS"
            + (f", e.g. {cluster.topology}" if cluster else "")
            + f" ({MAX_GPUS_PER_HOST} GPUs per host at most)",
        )
    prefix = CLOUD_PREFIX_ALIASES.get(cloud["prefix"], cloud["prefix"]) if cloud else None
    if prefix in BY_CLOUD_PREFIX:
        chip = BY_CLOUD_PREFIX[prefix]
        count = int(cloud["count"])
        if count % chip.cores_per_chip:
            raise ExplorerError("target", name, f"counts TensorCores ({chip.cores_per_chip} per {chip.generation} chip): it must be even")
        shape = slice_shape(chip, count // chip.cores_per_chip)
        if shape is None:
            known = ", ".join(Target("", chip, slice_shape(chip, n)).cloud_name for n in slices(chip))
            raise ExplorerError("target", name, f"is not a {chip.generation} slice this tool knows; known: {known}")
        return Target(text, chip, shape)
    if topology and topology["generation"] in CHIPS:
        chip = CHIPS[topology["generation"]]
        shape = tuple(int(s) for s in topology["shape"].split("x"))
        if len(shape) != chip.dims or any(s < 1 for s in shape):
            raise ExplorerError(
                "target",
                name,
                f"{chip.generation} topologies have {chip.dims} dimensions, e.g. {Target('', chip, slice_shape(chip, 16)).topology}",
            )
        if math.prod(shape) > MAX_CHIPS[chip.generation]:
            raise ExplorerError(
                "target", name, f"has {math.prod(shape)} chips; a {chip.generation} slice has at most {MAX_CHIPS[chip.generation]}"
            )
        return Target(text, chip, shape)
    if topology:  # GENERATION:SHAPE of a generation this tool does not know
        raise ExplorerError(
            "target",
            name,
            f"is not a TPU slice name or a GPU cluster: {topology['generation']!r} is neither a TPU generation ({', '.join(CHIPS)}) "
            f"nor a GPU of a cluster GPU:HOSTSxGPUS of {', '.join(GPUS)}",
        )
    raise ExplorerError("target", name, f"is not a TPU slice name or a GPU cluster, {TARGET_EXAMPLES}")


def _parse_slices(name: str, text: str, count: int, slice_name: str) -> Target:
    """``NxSLICE``: ``count`` slices of the TPU slice ``slice_name`` (one line naming what is wrong otherwise)."""
    try:
        one = parse_target(slice_name)
    except ExplorerError as error:
        raise ExplorerError(
            "target",
            name,
            f"is N slices of a TPU slice (NxSLICE), but {slice_name!r} is not a TPU slice type this tool knows "
            f"({error.problem.split(';')[0]}); e.g. 2xv5p-16, 4xv5litepod-16, 4xv6e-256, 2xv5p:4x4x4",
        ) from None
    if one.is_gpu:
        raise ExplorerError("target", name, f"names slices of a GPU cluster; several slices are TPU slices, e.g. 2xv5p-16; or {GPU_FORM}")
    if not 2 <= count <= MAX_SLICES:
        raise ExplorerError("target", name, f"has {count} slices; a multi-slice target has 2 to {MAX_SLICES} (NxSLICE, e.g. 2xv5p-16)")
    return Target(text, one.chip, one.shape, count)


def slice_split(target: Target, shape: tuple[int, ...], axes: tuple[str, ...], dcn: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """How many slices each mesh axis spans (MaxText's ``dcn_*_parallelism``): ``dcn``, or by default the outermost axis
    all of them (data parallelism over the DCN); refused in one line where the slices cannot hold it.

    >>> slice_split(parse_target("2xv5p-16"), (4, 4), ("data", "fsdp"))
    (2, 1)
    >>> slice_split(parse_target("4xv5e:2x2"), (2, 8), ("data", "fsdp"), (1, 4))
    (1, 4)
    """
    n = target.num_slices
    if not target.multislice:
        if dcn is not None and math.prod(dcn) != 1:
            raise ExplorerError("mesh.dcn", list(dcn), f"spreads axes over slices, but the target {target.name} is one slice")
        return (1,) * len(shape)
    fitting = [i for i, size in enumerate(shape) if size % n == 0]
    would = (
        f"an axis that could span all {n}: {', '.join(f'{axes[i]} ({shape[i]})' for i in fitting)}, "
        f"e.g. mesh.dcn {[n if i == fitting[0] else 1 for i in range(len(shape))]}"
        if fitting
        else f"no axis has a multiple of {n} devices"
    )
    if dcn is None:
        if shape[0] % n:
            raise ExplorerError(
                "mesh.dcn",
                None,
                f"leaves the outermost axis {axes[0]} ({shape[0]}) to span the {n} slices of {target.name}, but {shape[0]} "
                f"is not a multiple of {n}; {would}",
            )
        return (n,) + (1,) * (len(shape) - 1)
    if math.prod(dcn) != n:
        raise ExplorerError(
            "mesh.dcn",
            list(dcn),
            f"spans {math.prod(dcn)} slice{'' if math.prod(dcn) == 1 else 's'} in all, but the target {target.name} has {n}; {would}",
        )
    return tuple(dcn)


def check_mesh_fits(target: Target, mesh_size: int) -> None:
    """Refuse a mesh whose device count is not the target's device count, naming both and the targets that would fit."""
    if mesh_size == target.devices:
        return
    fitting = []
    for chip in CHIPS.values():
        shape = slice_shape(chip, mesh_size // chip.devices_per_chip) if mesh_size % chip.devices_per_chip == 0 else None
        if shape:
            slice_ = Target("", chip, shape)
            fitting.append(slice_.topology if slice_.cloud_name == slice_.topology else f"{slice_.cloud_name} ({slice_.topology})")
    clusters = [c.topology for c in (gpu_cluster(gpu, mesh_size) for gpu in GPUS.values()) if c]
    if target.is_gpu:  # the same GPU first
        clusters.sort(key=lambda name: not name.startswith(target.chip.generation + ":"))
    gpu_advice = [f"GPU clusters of {counted(mesh_size, 'GPU')}: {', '.join(clusters)}"] if clusters else []
    tpu_advice = [
        f"slices of {counted(mesh_size, 'device')}: {', '.join(fitting)}"
        if fitting
        else f"no slice this tool knows has {counted(mesh_size, 'device')}"
    ]
    if target.is_gpu:
        advice = "; ".join(gpu_advice + tpu_advice if clusters else tpu_advice)
        has = f"{counted(target.devices, 'GPU')} ({counted(target.hosts, 'host')} of {target.gpus_per_host})"
    else:
        advice = "; ".join(tpu_advice + gpu_advice)
        has = counted(target.chips, "chip") + (f" ({counted(target.devices, 'device')})" if target.devices != target.chips else "")
        if target.multislice:
            has += f" ({target.num_slices} slices of {target.slice_chips})"
    raise ExplorerError(
        "target",
        target.name,
        f"has {has} but the mesh needs {counted(mesh_size, 'device')}; {advice}",
    )
