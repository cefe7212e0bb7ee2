"""Accelerators to plan for: per-chip figures with their public sources, and slice names.

A *target* is a slice of one chip generation. It is named either as Cloud TPU
names it (``v5litepod-16``, ``v6e-64``: chips; ``v5p-128``, ``v4-32``: TensorCores,
two per chip) or as libtpu names a topology (``v5e:4x4``, ``v5p:4x4x4``,
``v4:4x4x4``). Compiling for it needs only the topology string (and, for v4,
``chip_config_name='megacore'`` so that one device is one chip), which
``jax.experimental.topologies.get_topology_desc`` turns into a slice's devices.

The registry is keyed by generation; a GPU generation would be one more ``Chip``
with its own ``platform`` and a compile path that builds its devices from a target
config instead of a libtpu topology.

HBM sizes: Cloud TPU's pages write "GB" for what the devices report in GiB (the
v5p page's own table says "HBM capacity per chip (GiB) 95"), so they are taken as
GiB. ICI: Cloud TPU's pages give a per-chip total; the per-link figure used by the
roofline is the one-way bandwidth per link from "How to Scale Your Model"
(Austin et al., 2025, part 2, https://jax-ml.github.io/scaling-book/tpus/).

TPU7x (Ironwood): Cloud TPU's TPU7x page gives, per chip, 2307 bf16 TFLOP/s, 192 GiB of
HBM at 7380 GB/s and 1200 GB/s of bidirectional ICI on a 3-D torus (the same ICI figure as
v5p, whose per-link bandwidth the book gives: 1200 GB/s / 6 links / 2 directions = 1e11 B/s
one way per link). Its chip is two TensorCores that libtpu exposes as two devices
(``chip_config_name="default"``; "dual-chiplet": each device has half the chip's HBM, compute
and HBM bandwidth), so a ``tpu7x:2x2x1`` slice is 4 chips and 8 devices, and a mesh for it
has 8 devices. XLA's memory figures are per device; the per-device figures the verdict and the
roofline use are the chip's divided by its devices (``Chip.device_*``), and the two devices of
a chip share its ICI links (each gets half of each link). TPU7x has no Cloud TPU type names
here (it is ordered through GKE): name its slices as libtpu does, ``tpu7x:2x2x1``.

Single-chip and two-chip slices (``v5e:1x1``, ``v6e:1x1``, ``v5p:1x1x1``, ``v4:1x1x1``,
``tpu7x:1x1x1``, ``v5e:1x2``) are accepted as topologies: libtpu 0.0.50 describes them.
"""

from __future__ import annotations

import dataclasses
import math
import re

from explorer.errors import ExplorerError

GIB = 2**30
SCALING_BOOK_TPUS = "https://jax-ml.github.io/scaling-book/tpus/"


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator generation, per chip.

    ``ici_link_bandwidth`` is one-way bytes/s on one link; ``ici_links`` how many
    links a chip has (4 on a 2-D torus, 6 on a 3-D one). ``cores_per_chip`` is how
    many TensorCores Cloud TPU's type names count per chip.
    """

    generation: str  # the libtpu topology prefix: v4, v5e, v5p, v6e
    cloud_prefix: str  # the Cloud TPU type name before the dash: v4, v5litepod, v5p, v6e
    platform: str
    device_kind: str  # what JAX reports as device_kind
    hbm_bytes: int
    peak_flops: float  # bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    ici_link_bandwidth: float  # one-way bytes/s per link
    ici_links: int
    dims: int  # torus dimensions: 2 or 3
    cores_per_chip: int  # TensorCores each chip counts for in Cloud TPU's type names
    chip_config_name: str | None
    sources: tuple[str, ...]
    devices_per_chip: int = 1  # JAX devices libtpu makes of one chip (2 for TPU7x's two chiplets)
    cloud_min_chips: int = 4  # the smallest Cloud TPU type of this generation, in chips

    @property
    def device_hbm_bytes(self) -> int:
        """HBM of one JAX device (what XLA's per-device peak is compared with)."""
        return self.hbm_bytes // self.devices_per_chip

    @property
    def device_peak_flops(self) -> float:
        return self.peak_flops / self.devices_per_chip

    @property
    def device_hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth / self.devices_per_chip

    @property
    def device_ici_link_bandwidth(self) -> float:
        """One-way bytes/s per link for one device: the chip's devices share its links."""
        return self.ici_link_bandwidth / self.devices_per_chip

    @property
    def ici_bidirectional_bandwidth(self) -> float:
        """Bytes/s one device moves along one torus axis using both directions (the book's W_ici)."""
        return 2 * self.device_ici_link_bandwidth


CHIPS: dict[str, Chip] = {
    chip.generation: chip
    for chip in (
        Chip(
            "v4", "v4", "tpu", "TPU v4", 32 * GIB, 275e12, 1.2e12, 4.5e10, 6, 3, 2, "megacore",
            ("https://cloud.google.com/tpu/docs/v4", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v5e", "v5litepod", "tpu", "TPU v5 lite", 16 * GIB, 197e12, 819e9, 5e10, 4, 2, 1, None,
            ("https://cloud.google.com/tpu/docs/v5e", SCALING_BOOK_TPUS), 1, 1,
        ),
        Chip(
            "v5p", "v5p", "tpu", "TPU v5", 95 * GIB, 459e12, 2765e9, 1e11, 6, 3, 2, None,
            ("https://cloud.google.com/tpu/docs/v5p", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v6e", "v6e", "tpu", "TPU v6 lite", 32 * GIB, 918e12, 1640e9, 1e11, 4, 2, 1, None,
            ("https://cloud.google.com/tpu/docs/v6e", SCALING_BOOK_TPUS), 1, 1,
        ),
        Chip(
            "tpu7x", "", "tpu", "TPU7x", 192 * GIB, 2307e12, 7380e9, 1e11, 6, 3, 2, "default",
            ("https://cloud.google.com/tpu/docs/tpu7x", SCALING_BOOK_TPUS), 2, 4,
        ),
    )
}
BY_CLOUD_PREFIX = {chip.cloud_prefix: chip for chip in CHIPS.values() if chip.cloud_prefix}
MAX_CHIPS = {"v4": 4096, "v5e": 256, "v5p": 8192, "v6e": 256, "tpu7x": 9216}


@dataclasses.dataclass(frozen=True)
class Target:
    """A slice of ``chip``: its name as given, its libtpu topology and chip count."""

    name: str
    chip: Chip
    shape: tuple[int, ...]

    @property
    def topology(self) -> str:
        return f"{self.chip.generation}:{'x'.join(str(s) for s in self.shape)}"

    @property
    def chips(self) -> int:
        return math.prod(self.shape)

    @property
    def devices(self) -> int:
        """JAX devices of the slice: what a mesh for it must hold (chips, or 2 per chip on TPU7x)."""
        return self.chips * self.chip.devices_per_chip

    @property
    def cloud_name(self) -> str:
        """Cloud TPU's type name, or the topology where the generation has none here (TPU7x)."""
        if not self.chip.cloud_prefix or self.chips < self.chip.cloud_min_chips:
            return self.topology
        return f"{self.chip.cloud_prefix}-{self.chips * self.chip.cores_per_chip}"

    def to_dict(self) -> dict:
        """Per-device figures (a device is a chip on every generation but TPU7x, where it is half of one)."""
        chip = self.chip
        return {
            "name": self.name, "topology": self.topology, "chips": self.chips, "devices": self.devices,
            "devices_per_chip": chip.devices_per_chip, "device_kind": chip.device_kind,
            "hbm_bytes": chip.device_hbm_bytes, "peak_flops": chip.device_peak_flops, "hbm_bandwidth": chip.device_hbm_bandwidth,
            "ici_bandwidth": chip.device_ici_link_bandwidth, "ici_links": chip.ici_links,
            "chip_hbm_bytes": chip.hbm_bytes, "chip_peak_flops": chip.peak_flops, "chip_hbm_bandwidth": chip.hbm_bandwidth,
            "sources": list(chip.sources),
        }


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
    return [1 << n for n in range(0, MAX_CHIPS[chip.generation].bit_length())
            if 1 << n >= chip.cloud_min_chips and slice_shape(chip, 1 << n)]


_CLOUD_NAME = re.compile(r"(?P<prefix>[a-z0-9]+)-(?P<count>\d+)")
_TOPOLOGY = re.compile(r"(?P<generation>[a-z0-9]+):(?P<shape>\d+(?:x\d+)+)")


def valid_names() -> list[str]:
    """Examples of every accepted form, for error messages and the app's choices."""
    names = []
    for chip in CHIPS.values():
        names += [Target("", chip, slice_shape(chip, n)).cloud_name for n in slices(chip)]
    return names


def parse_target(name: str) -> Target:
    """A target from a Cloud TPU type name or a libtpu topology string.

    Example::

        >>> target = parse_target("v5p-128")
        >>> target.topology, target.chips
        ('v5p:4x4x4', 64)
    """
    text = str(name).strip().lower()
    cloud, topology = _CLOUD_NAME.fullmatch(text), _TOPOLOGY.fullmatch(text)
    if cloud and cloud["prefix"] in BY_CLOUD_PREFIX:
        chip = BY_CLOUD_PREFIX[cloud["prefix"]]
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
            raise ExplorerError("target", name, f"{chip.generation} topologies have {chip.dims} dimensions, e.g. {Target('', chip, slice_shape(chip, 16)).topology}")
        if math.prod(shape) > MAX_CHIPS[chip.generation]:
            raise ExplorerError("target", name, f"has {math.prod(shape)} chips; a {chip.generation} slice has at most {MAX_CHIPS[chip.generation]}")
        return Target(text, chip, shape)
    raise ExplorerError(
        "target", name,
        f"is not a TPU slice name; valid Cloud TPU types: {', '.join(valid_names())}; or a libtpu topology "
        f"GENERATION:AxB[xC] of {', '.join(CHIPS)} (e.g. v5e:4x4, v5p:4x4x4, v4:2x2x2, tpu7x:2x2x1, v5e:1x1)",
    )


def check_mesh_fits(target: Target, mesh_size: int) -> None:
    """Refuse a mesh whose device count is not the slice's device count, naming both and the slices that would fit."""
    if mesh_size == target.devices:
        return
    fitting = []
    for chip in CHIPS.values():
        shape = slice_shape(chip, mesh_size // chip.devices_per_chip) if mesh_size % chip.devices_per_chip == 0 else None
        if shape:
            slice_ = Target("", chip, shape)
            fitting.append(slice_.topology if slice_.cloud_name == slice_.topology else f"{slice_.cloud_name} ({slice_.topology})")
    advice = f"slices of {mesh_size} devices: {', '.join(fitting)}" if fitting else f"no slice this tool knows has {mesh_size} devices"
    has = f"{target.chips} chips" + (f" ({target.devices} devices)" if target.devices != target.chips else "")
    raise ExplorerError(
        "target", target.name,
        f"has {has} but the mesh needs {mesh_size} devices; {advice}",
    )
