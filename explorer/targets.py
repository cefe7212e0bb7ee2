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
v7 (Ironwood) is left out: the libtpu this project pins refuses its topology names.
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

    @property
    def ici_bidirectional_bandwidth(self) -> float:
        """Bytes/s one chip moves along one torus axis using both directions (the book's W_ici)."""
        return 2 * self.ici_link_bandwidth


CHIPS: dict[str, Chip] = {
    chip.generation: chip
    for chip in (
        Chip(
            "v4", "v4", "tpu", "TPU v4", 32 * GIB, 275e12, 1.2e12, 4.5e10, 6, 3, 2, "megacore",
            ("https://cloud.google.com/tpu/docs/v4", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v5e", "v5litepod", "tpu", "TPU v5 lite", 16 * GIB, 197e12, 819e9, 5e10, 4, 2, 1, None,
            ("https://cloud.google.com/tpu/docs/v5e", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v5p", "v5p", "tpu", "TPU v5", 95 * GIB, 459e12, 2765e9, 1e11, 6, 3, 2, None,
            ("https://cloud.google.com/tpu/docs/v5p", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v6e", "v6e", "tpu", "TPU v6 lite", 32 * GIB, 918e12, 1640e9, 1e11, 4, 2, 1, None,
            ("https://cloud.google.com/tpu/docs/v6e", SCALING_BOOK_TPUS),
        ),
    )
}
BY_CLOUD_PREFIX = {chip.cloud_prefix: chip for chip in CHIPS.values()}
MIN_CHIPS = 4  # libtpu's default host is 2x2x1: smaller topologies are refused
MAX_CHIPS = {"v4": 4096, "v5e": 256, "v5p": 8192, "v6e": 256}


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
    def cloud_name(self) -> str:
        return f"{self.chip.cloud_prefix}-{self.chips * self.chip.cores_per_chip}"

    def to_dict(self) -> dict:
        chip = self.chip
        return {
            "name": self.name, "topology": self.topology, "chips": self.chips, "device_kind": chip.device_kind,
            "hbm_bytes": chip.hbm_bytes, "peak_flops": chip.peak_flops, "hbm_bandwidth": chip.hbm_bandwidth,
            "ici_bandwidth": chip.ici_link_bandwidth, "ici_links": chip.ici_links, "sources": list(chip.sources),
        }


def slice_shape(chip: Chip, chips: int) -> tuple[int, ...] | None:
    """The usual topology of a slice of ``chips`` chips (Cloud TPU's tables), or None if there is none.

    Sizes are powers of two from 4 chips; 2-D slices are ``a x b`` with ``a <= b <= 2a``,
    3-D slices ``a x b x c`` likewise balanced (``2x2x1``, ``2x2x2``, ``2x2x4``, ``2x4x4``, ``4x4x4``, ...).
    """
    if chips < MIN_CHIPS or chips > MAX_CHIPS[chip.generation] or chips & (chips - 1):
        return None
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
    """Chip counts of the slices this registry knows for ``chip``."""
    return [1 << n for n in range(2, MAX_CHIPS[chip.generation].bit_length()) if slice_shape(chip, 1 << n)]


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
        if math.prod(shape) < MIN_CHIPS:
            raise ExplorerError("target", name, f"has fewer than {MIN_CHIPS} chips, which libtpu cannot describe without a host")
        return Target(text, chip, shape)
    raise ExplorerError(
        "target", name,
        f"is not a TPU slice name; valid Cloud TPU types: {', '.join(valid_names())}; or a libtpu topology "
        f"GENERATION:AxB[xC] of {', '.join(CHIPS)} (e.g. v5e:4x4, v5p:4x4x4, v4:2x2x2)",
    )


def check_mesh_fits(target: Target, mesh_size: int) -> None:
    """Refuse a mesh whose device count is not the slice's chip count, naming both and the slices that would fit."""
    if mesh_size == target.chips:
        return
    fitting = [
        Target("", chip, slice_shape(chip, mesh_size)).cloud_name + f" ({chip.generation}:{'x'.join(map(str, slice_shape(chip, mesh_size)))})"
        for chip in CHIPS.values() if slice_shape(chip, mesh_size)
    ]
    advice = f"slices of {mesh_size} chips: {', '.join(fitting)}" if fitting else f"no slice this tool knows has {mesh_size} chips"
    raise ExplorerError(
        "target", target.name,
        f"has {target.chips} chips but the mesh needs {mesh_size} devices; {advice}",
    )
