"""A roofline lower bound on the step time of a compiled program on a target.

Three terms, each from the compiled program's own numbers and the chip's table:

- compute: flops per device / the device's peak bf16 FLOP/s,
- memory: bytes accessed per device / the device's HBM bandwidth,

(a device is a chip on every generation but TPU7x, whose chip is two devices each with half of
its compute, HBM bandwidth and links: ``accelerators.Chip.device_*``),
- collectives: each collective costed with the formulas of "How to Scale Your Model"
  (Austin et al., 2025), part 3 "Sharded Matrices and How to Multiply Them",
  https://jax-ml.github.io/scaling-book/sharding/ (the summary table of
  communication primitives): with V the bytes of the full (gathered) array on one
  device, N the group size, W the bidirectional ICI bandwidth of one axis and
  n_axes the torus axes the group spans,

      AllGather, ReduceScatter   T = V / (W * n_axes) * (N - 1) / N
      AllReduce                  T = 2 * AllGather
      AllToAll                   T = AllGather / 4
      CollectivePermute          T = bytes / W    (one hop to a neighbour; XLA's decomposed rings send
                                                   both ways at once, so both directions count)

On an NVIDIA GPU cluster (``accelerators.Gpu``) the collective term has two levels, after the
book's chapter on GPUs (https://jax-ml.github.io/scaling-book/gpus/): a group
of N GPUs on h hosts, g = N / h of them per host, with W_nvlink the one-way NVLink bandwidth of
one GPU (NVSwitch: every GPU of a host reaches every other at that rate) and W_net the one-way
network bandwidth of one GPU (one NIC per GPU), V as above:

    AllGather, ReduceScatter   T = V * max((N - 1) / N / W_nvlink  [g > 1],
                                           (h - 1) / h / (g * W_net))
    AllReduce                  T = 2 * AllGather (a reduce-scatter then an all-gather)
    AllToAll                   T = B * max((g - 1) / N / W_nvlink, (N - g) / N / W_net)
                                   (B: this GPU's bytes; it keeps 1/N, sends (g-1)/N within its host
                                   and (N-g)/N to other hosts)
    CollectivePermute          T = bytes / W_nvlink, or bytes / W_net when the pairs cross hosts

A group inside one host (h = 1) rides NVLink only. One that spans hosts also crosses the network:
a ring (NCCL's) enters each host once, and the host's g GPUs in the group bring g NICs, so only
V (h - 1) / h crosses into each host, split over them; the two levels overlap (the ring is
pipelined), so the slower one counts. Latency, NCCL's protocol overheads, SHARP/NVLS in-network
reductions and rail-optimised switch topologies are left out.

Several TPU slices joined by the data-center network (DCN): a group of N devices on s slices, g = N / s of
them in each, with W_dcn the DCN bandwidth of one chip (one way: its share of its host's NICs,
``accelerators.DCN``) and W the ICI bandwidth as above, is costed as the GPU cluster's two levels are,
the slices in the hosts' place (the ring enters each slice once, over the g chips' NICs; the slower
level counts):

    AllGather, ReduceScatter   T = V * max((g - 1) / g / (W * n_axes)  [g > 1],  (s - 1) / s / (g * W_dcn))
    AllReduce                  T = 2 * AllGather
    AllToAll                   T = B * max((g - 1) / N / W, (N - g) / N / W_dcn)
    CollectivePermute          T = bytes / W_dcn

A collective XLA splits into an in-slice and a cross-slice part (a hierarchical all-reduce) is two
collectives in the program, each costed on its own level. DCN congestion between jobs, latency and the
hosts' own PCIe hops are left out.

The step takes at least the largest of the three (perfect overlap), so that is the
estimate; it is a lower bound, not a measurement: latency, imperfect overlap,
missing wraparound links (where a ring cannot use both directions) and everything
else the chip does are left out. ``mfu_ceiling`` is compute / step: the model
FLOP utilisation this layout could reach at best.
"""

from __future__ import annotations

import dataclasses

from explorer.hardware.accelerators import DCN, Chip, Gpu

BOOK = "https://jax-ml.github.io/scaling-book/sharding/"


@dataclasses.dataclass(frozen=True)
class Collective:
    """A collective per chip per step, aggregated: its total result bytes and who takes part."""

    op: str
    count: int
    bytes: int
    mesh_axes: tuple[str, ...]
    group_size: int
    # Torus axes the group's chips span (at least 1 when it moves data); on GPUs: of (host, GPU). The advisor's stage 1
    # (``explorer.hardware.placement``) passes torus axes' worth of bandwidth instead: 1 per axis the group runs around as a ring
    # (wraparound links, both directions), 0.5 per axis it runs along as a line (one direction).
    ici_axes: float
    hosts: int = 1  # GPU clusters: the hosts one group spans (1: inside a host, over NVLink)
    slices: int = 1  # several TPU slices: the slices one group spans (more than 1: it crosses the DCN)


def collective_seconds(c: Collective, chip: Chip | Gpu) -> float:
    """The book's time for ``c`` (see the module docstring); 0 for a group of one."""
    n = c.group_size
    if n <= 1 or c.bytes == 0:
        return 0.0
    if isinstance(chip, Gpu):
        return _gpu_seconds(c, chip)
    if c.slices > 1:
        return _dcn_seconds(c, chip)
    bandwidth = chip.ici_bidirectional_bandwidth * (c.ici_axes if c.ici_axes > 0 else 1)
    share = (n - 1) / n
    if c.op == "all-gather":
        return c.bytes / bandwidth * share
    if c.op == "reduce-scatter":  # the result is one shard: the full array is N of them
        return c.bytes * n / bandwidth * share
    if c.op == "all-reduce":
        return 2 * c.bytes / bandwidth * share
    if c.op == "all-to-all":  # the result is this chip's share of an array N times as large
        return c.bytes * n / bandwidth * share / 4
    if c.op == "collective-permute":
        return c.bytes / chip.ici_bidirectional_bandwidth
    raise ValueError(c.op)


def link(c: Collective, chip: Chip | Gpu) -> str:
    """What ``c``'s data rides: ``ici`` on a TPU slice; ``nvlink`` inside a GPU host, ``network`` across hosts."""
    if not isinstance(chip, Gpu):
        return "dcn" if c.slices > 1 else "ici"
    return "network" if c.hosts > 1 else "nvlink"


def _dcn_seconds(c: Collective, chip: Chip) -> float:
    """The two-level time of the module docstring for a group across slices: the ICI hops and the DCN crossings."""
    s = max(min(c.slices, c.group_size), 1)
    g = c.group_size / s
    ici = chip.ici_bidirectional_bandwidth * (c.ici_axes if c.ici_axes > 0 else 1)
    return _two_levels(c, s, (g - 1) / g, ici, DCN[chip.generation].bandwidth / chip.devices_per_chip)


def _gpu_seconds(c: Collective, gpu: Gpu) -> float:
    """The two-level time of the module docstring: the NVLink hops and the network crossings, the slower one."""
    n = c.group_size
    return _two_levels(c, max(min(c.hosts, n), 1), (n - 1) / n, gpu.nvlink_bandwidth, gpu.network_bandwidth)


def _two_levels(c: Collective, parts: int, inner_share: float, inner: float, outer: float) -> float:
    """A group over ``parts`` hosts or slices, g = N / parts in each: ``inner_share`` of the array over the inner
    level's bandwidth, (parts - 1) / parts of it over g links of the outer one; the slower counts (module docstring)."""
    n = c.group_size
    g = n / parts
    per_byte = max(inner_share / inner if g > 1 else 0.0, (parts - 1) / parts / (g * outer))
    if c.op == "all-gather":
        return c.bytes * per_byte
    if c.op == "reduce-scatter":  # the result is one shard: the full array is N of them
        return c.bytes * n * per_byte
    if c.op == "all-reduce":
        return 2 * c.bytes * per_byte
    if c.op == "all-to-all":
        return c.bytes * max((g - 1) / n / inner, (n - g) / n / outer)
    if c.op == "collective-permute":
        return c.bytes / (outer if parts > 1 else inner)
    raise ValueError(c.op)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """The roofline's three terms and the bound they give (``step_s``); ``predicted_s`` is the step model's prediction
    (``explorer.predict.step_model``, per kernel), carried beside the bound where one was made (None where not)."""

    compute_s: float
    memory_s: float
    collective_s: float
    predicted_s: float | None = None
    # What the prediction is made of (``step_model.Prediction.parts``): its kernels' sum before the floor at the bound,
    # the host's dispatch, the buckets, the launches; None where no program was read (``prediction_gap`` says why it differs)
    prediction_parts: dict[str, float] | None = None

    @property
    def step_s(self) -> float:
        return max(self.compute_s, self.memory_s, self.collective_s)

    @property
    def bound(self) -> str:
        terms = {"compute": self.compute_s, "memory": self.memory_s, "collective": self.collective_s}
        return max(terms, key=terms.get)

    @property
    def mfu_ceiling(self) -> float:
        return self.compute_s / self.step_s if self.step_s else 0.0

    def to_dict(self) -> dict:
        return {
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "collective_s": self.collective_s,
            "step_s": self.step_s,
            "bound": self.bound,
            "mfu_ceiling": self.mfu_ceiling,
            "predicted_s": self.predicted_s,
            "prediction_parts": self.prediction_parts,
        }


def estimate(flops: float, bytes_accessed: float, collectives: list[Collective], chip: Chip | Gpu) -> Estimate:
    """The roofline terms for one step on one device."""
    return Estimate(
        compute_s=flops / chip.device_peak_flops,
        memory_s=bytes_accessed / chip.device_hbm_bandwidth,
        collective_s=sum(collective_seconds(c, chip) for c in collectives),
    )
