"""The accelerators to plan for: each TPU generation's and NVIDIA GPU's figures, with their public sources.

This module's one job is the tables (``CHIPS``, ``GPUS``) and what is read with them (XLA's vendored GPU
target configs, JAX's share of a GPU's memory); ``targets`` names slices and clusters of them and does the
arithmetic on their shapes.

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
a chip share its ICI links (each gets half of each link). Its slices are named as MaxText's accelerator table and
GKE's recipes name them: ``tpu7x-N`` counts TensorCores, two per chip (``tpu7x-128`` is the 64 chips of ``tpu7x:4x4x4``),
and xpk's device types write the topology with a dash (``tpu7x-4x4x4``); libtpu's ``tpu7x:4x4x4`` is accepted too.


A GPU's memory is the target config's ``device_memory_size`` (what CUDA reports for the card: 79.1 GiB
on an "80 GB" H100). Its other figures, per GPU, from NVIDIA's data sheets (dense bf16: the sheets
quote bf16 "with sparsity", twice the dense rate):

====  ==========  ========  ===============  ======================  =======================================
GPU   bf16 dense  HBM B/W   NVLink (1 way)   network per GPU (1 way) sources
====  ==========  ========  ===============  ======================  =======================================
A100  312 TF/s    2039 GB/s 300 GB/s (600    25 GB/s (200 Gb/s HDR   nvidia.com/en-us/data-center/a100/,
      (80GB SXM)            both ways)       InfiniBand per GPU)     .../dgx-a100/
H100  989 TF/s    3350 GB/s 450 GB/s (900)   50 GB/s (400 Gb/s       .../h100/, .../dgx-h100/
      (SXM)                                  ConnectX-7 per GPU)
H200  989 TF/s    4800 GB/s 450 GB/s (900)   50 GB/s (400 Gb/s)      .../h200/, .../dgx-h200/
B200  2250 TF/s   8000 GB/s 900 GB/s (1800)  50 GB/s (400 Gb/s)      .../hgx/ (HGX B200: 36 PF bf16 sparse
                                                                     for 8), .../dgx-b200/
====  ==========  ========  ===============  ======================  =======================================

The network figure is one NIC per GPU, as in NVIDIA's DGX/HGX reference designs (8 ConnectX
ports per 8-GPU host); the two-level model of collectives that uses them is ``roofline``'s and
follows the GPU chapter of "How to Scale Your Model" (https://jax-ml.github.io/scaling-book/gpus/).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from importlib import resources

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
    # fp8 FLOP/s per chip where the generation's spec sheet gives an fp8 rate (FP8_SOURCES), else None: its fp8 matmuls
    # are costed at the bf16 rate, and the prediction says so
    fp8_peak_flops: float | None = None

    @property
    def device_fp8_flops(self) -> float | None:
        """fp8 FLOP/s of one JAX device, None where the chip has no fp8 rate."""
        return None if self.fp8_peak_flops is None else self.fp8_peak_flops / self.devices_per_chip

    @property
    def device_hbm_bytes(self) -> int:
        """HBM of one JAX device (what XLA's per-device peak is compared with)."""
        return self.hbm_bytes // self.devices_per_chip

    @property
    def program_hbm_bytes(self) -> int:
        """The HBM XLA's TPU compiler lets one device's program use (``PROGRAM_HBM_GIB``): less than the device's."""
        return round(PROGRAM_HBM_GIB[self.generation] * GIB)

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
            "v4",
            "v4",
            "tpu",
            "TPU v4",
            32 * GIB,
            275e12,
            1.2e12,
            4.5e10,
            6,
            3,
            2,
            "megacore",
            ("https://cloud.google.com/tpu/docs/v4", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v5e",
            "v5litepod",
            "tpu",
            "TPU v5 lite",
            16 * GIB,
            197e12,
            819e9,
            5e10,
            4,
            2,
            1,
            None,
            ("https://cloud.google.com/tpu/docs/v5e", SCALING_BOOK_TPUS),
            1,
            1,
        ),
        Chip(
            "v5p",
            "v5p",
            "tpu",
            "TPU v5",
            96 * GIB,  # Cloud TPU's page says 95 GiB, yet XLA lets a program use 95.73 GiB (PROGRAM_HBM_GIB); the book's 96
            459e12,
            2765e9,
            1e11,
            6,
            3,
            2,
            None,
            ("https://cloud.google.com/tpu/docs/v5p", SCALING_BOOK_TPUS),
        ),
        Chip(
            "v6e",
            "v6e",
            "tpu",
            "TPU v6 lite",
            32 * GIB,
            918e12,
            1640e9,
            1e11,
            4,
            2,
            1,
            None,
            ("https://cloud.google.com/tpu/docs/v6e", SCALING_BOOK_TPUS),
            1,
            1,
        ),
        Chip(
            "tpu7x",
            "tpu7x",
            "tpu",
            "TPU7x",
            192 * GIB,
            2307e12,
            7380e9,
            1e11,
            6,
            3,
            2,
            "default",
            ("https://cloud.google.com/tpu/docs/tpu7x", SCALING_BOOK_TPUS),
            2,
            1,
            4614e12,  # FP8_SOURCES["tpu7x"]
        ),
    )
}
# Where each generation's fp8 matmul rate comes from, or why it has none (Chip.fp8_peak_flops). Only TPU7x's spec sheet
# gives one; v6e's, v5p's and v5e's give bf16 and int8 rates (918 and 1836, 459 and 918, 197 and 394 TFLOP/s or TOP/s),
# v4's bf16 and int8: their fp8 matmuls are costed at the bf16 rate (XLA's TPU compiler runs them on the bf16 MXU).
FP8_SOURCES = {
    "tpu7x": "https://cloud.google.com/tpu/docs/tpu7x (peak compute per chip: 4614 TFLOP/s fp8, twice its 2307 bf16)",
    "v6e": "https://cloud.google.com/tpu/docs/v6e (918 TFLOP/s bf16, 1836 TOP/s int8: no fp8 rate)",
    "v5p": "https://cloud.google.com/tpu/docs/v5p (459 TFLOP/s bf16, 918 TOP/s int8: no fp8 rate)",
    "v5e": "https://cloud.google.com/tpu/docs/v5e (197 TFLOP/s bf16, 394 TOP/s int8: no fp8 rate)",
    "v4": "https://cloud.google.com/tpu/docs/v4 (275 TFLOP/s bf16 and int8: no fp8 rate)",
}
# The HBM XLA's TPU compiler lets one device's program use, in GiB as its refusal writes it (E1000: "... exceeds
# available HBM (31.24G)"; libtpu keeps the rest): a program over it is refused, one under it compiles. Read from
# libtpu 0.0.50.1's refusals (tests/explorer/compile/test_xla_results.py compiles one too big for each generation).
PROGRAM_HBM_GIB = {"v4": 30.75, "v5e": 15.75, "v5p": 95.73, "v6e": 31.24, "tpu7x": 94.74}
BY_CLOUD_PREFIX = {chip.cloud_prefix: chip for chip in CHIPS.values() if chip.cloud_prefix}
MAX_CHIPS = {"v4": 4096, "v5e": 256, "v5p": 8192, "v6e": 256, "tpu7x": 9216}


@dataclasses.dataclass(frozen=True)
class Dcn:
    """The data-center network (DCN) between TPU slices, per chip: one-way egress bytes/s, and where the figure is from.

    Cloud TPU publishes it per host (its NICs) or per pod, not per chip; ``bandwidth`` is that figure divided
    over the host's chips (every chip's share of its host's NICs), which is how the step model costs a
    collective that crosses slices. ``what`` says which published figure it is and how it was divided.
    """

    bandwidth: float  # one-way bytes/s per chip
    what: str
    source: str


# Per TPU generation (see ``Dcn``). v4 and TPU7x publish no per-host NIC figure that the sources here give: their
# figures are labelled as assumptions.
DCN: dict[str, Dcn] = {
    "v5e": Dcn(
        3.125e9,
        "2 x 100 Gbps NICs per 8-chip host = 25 Gbps per chip (the pod's 6.4 Tbps over 256 chips agrees)",
        "https://cloud.google.com/tpu/docs/v5e",
    ),
    "v6e": Dcn(
        12.5e9,
        "4 x 200 Gbps NICs per 8-chip host = 100 Gbps per chip (the pod's 25.6 Tbps over 256 chips agrees)",
        "https://cloud.google.com/tpu/docs/v6e",
    ),
    "v5p": Dcn(
        6.25e9,
        "200 Gbps of network per 4-chip ct5p-hightpu-4t VM = 50 Gbps per chip",
        "https://cloud.google.com/compute/docs/tpus/tpu-machines",
    ),
    "v4": Dcn(
        6.25e9,
        "assumed v5p's 50 Gbps per chip (4 chips per host as on v5p); no per-host figure in the sources here",
        "https://cloud.google.com/tpu/docs/v4",
    ),
    "tpu7x": Dcn(
        6.25e9,
        "assumed v5p's 50 Gbps per chip; no per-host figure in the sources here",
        "https://cloud.google.com/tpu/docs/tpu7x",
    ),
}

# --- NVIDIA GPUs -------------------------------------------------------------------------------

JAX_MEMORY_FRACTION = 0.75  # what JAX's GPU client takes of a GPU's memory by default
MEMORY_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"
JAX_GPU_MEMORY = "https://docs.jax.dev/en/latest/gpu_memory_allocation.html"
SCALING_BOOK_GPUS = "https://jax-ml.github.io/scaling-book/gpus/"
MAX_GPUS_PER_HOST = 8
MAX_HOSTS = 128


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU, per GPU (a JAX device is one GPU).

    Bandwidths are one way, bytes/s: ``nvlink_bandwidth`` what one GPU sends (and, at the same
    time, receives) to the other GPUs of its host through NVSwitch; ``network_bandwidth`` what
    it sends to other hosts through its own NIC. ``hbm_bytes`` is read from ``config_file``,
    XLA's target config for the GPU (``device_memory_size``), the memory XLA compiles for.
    """

    generation: str  # the target name's prefix: a100, h100, h200, b200
    config_file: str  # XLA's GPU target config, in explorer/hardware/gpu_targets/
    peak_flops: float  # dense bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s
    nvlink_bandwidth: float  # one way, bytes/s per GPU, within a host
    network_bandwidth: float  # one way, bytes/s per GPU, between hosts
    sources: tuple[str, ...]
    platform: str = "cuda"
    devices_per_chip: int = 1
    chip_config_name: str | None = None

    @property
    def target_config(self) -> str:
        """XLA's GpuTargetConfig text proto for this GPU (``get_topology_desc(target_config=...)``)."""
        return _config_text(self.config_file)

    @property
    def device_kind(self) -> str:
        """What JAX reports as the device's kind (the target config's ``device_description_str``)."""
        return _config_field(self.config_file, "device_description_str")

    @property
    def hbm_bytes(self) -> int:
        return int(_config_field(self.config_file, "device_memory_size"))

    @property
    def device_hbm_bytes(self) -> int:
        return self.hbm_bytes

    @property
    def device_peak_flops(self) -> float:
        return self.peak_flops

    @property
    def device_hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth

    @property
    def usable_bytes(self) -> int:
        """What a JAX process may use of the GPU's memory: ``memory_fraction()`` of it (75% unless the user chose)."""
        return int(self.hbm_bytes * memory_fraction())


def memory_fraction() -> float:
    """JAX's share of a GPU's memory: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` if set (and sane), else 0.75."""
    raw = os.environ.get(MEMORY_FRACTION_ENV)
    try:
        value = float(raw) if raw else JAX_MEMORY_FRACTION
    except ValueError:
        return JAX_MEMORY_FRACTION
    return value if 0 < value <= 1 else JAX_MEMORY_FRACTION


@functools.cache
def _config_text(name: str) -> str:
    return resources.files("explorer.hardware.gpu_targets").joinpath(name).read_text()


def _config_field(name: str, field: str) -> str:
    found = re.search(rf"^\s*{field}:\s*\"?([^\"\n]*)\"?\s*$", _config_text(name), re.M)
    if found is None:
        raise ExplorerError("GPU target config", name, f"has no {field}")
    return found[1]


NVIDIA = "https://www.nvidia.com/en-us/data-center/"
GPUS: dict[str, Gpu] = {
    gpu.generation: gpu
    for gpu in (
        Gpu(
            "a100",
            "a100_sxm_80.txtpb",
            312e12,
            2039e9,
            300e9,
            25e9,
            (NVIDIA + "a100/", NVIDIA + "dgx-a100/", SCALING_BOOK_GPUS, JAX_GPU_MEMORY),
        ),
        Gpu(
            "h100",
            "h100_sxm.txtpb",
            989e12,
            3350e9,
            450e9,
            50e9,
            (NVIDIA + "h100/", NVIDIA + "dgx-h100/", SCALING_BOOK_GPUS, JAX_GPU_MEMORY),
        ),
        Gpu("h200", "h200.txtpb", 989e12, 4800e9, 450e9, 50e9, (NVIDIA + "h200/", NVIDIA + "dgx-h200/", SCALING_BOOK_GPUS, JAX_GPU_MEMORY)),
        Gpu("b200", "b200.txtpb", 2250e12, 8000e9, 900e9, 50e9, (NVIDIA + "hgx/", NVIDIA + "dgx-b200/", SCALING_BOOK_GPUS, JAX_GPU_MEMORY)),
    )
}
GPU_CLUSTERS = ((1, 1), (1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (32, 8))  # (hosts, GPUs per host) the app lists
