"""The rates the step model (``explorer.predict.step_model``) runs each kernel at, per device, with their sources.

Three figures per device, and what they rest on:

- ``matmul_flops``: FLOP/s a large matmul gets, per operand element type, at JAX's default precision.
  On the H200 they are measured (``tests/data/h200-2026-11-27.json``, ``device_rates``: ``jit(x @ y)``
  of 8192^3 ones, mean of 10 after 3 warm-ups): bf16 870.9 TFLOP/s, f32 445.2 TFLOP/s (JAX's default
  precision runs f32 matmuls on TF32 tensor cores on this GPU). Other GPUs: their spec sheet's dense
  figure (bf16; TF32 for f32) times the fraction of it the H200 reached (bf16 870.9 / 989 = 0.881,
  TF32 445.2 / 494.7 = 0.900).
  TPUs: v5e, v5p, v4, v6e and TPU7x, their spec sheet's bf16 peak at a matmul efficiency set from one published run
  each (``TPU_EVIDENCE``: MaxText's 32B on one v5e-256, its 32B on one v5p-128, its 22B on one v4-128, tpu-recipes'
  Llama 3.1 8B on v6e-8 and Llama 3.1 70B in bf16 on tpu7x-128; the other published runs out of sample,
  docs/step-time.md). fp8 matmuls at the chip's fp8 peak where its spec sheet gives one (TPU7x's 4614 TFLOP/s per
  chip, ``accelerators.FP8_SOURCES``), at its bf16 peak where it gives none (v6e, v5p, v5e, v4), said so. An f32 matmul on a TPU runs at the
  bf16 rate: by default JAX's f32 dots run in bfloat16 on a TPU (JAX's "Matmul precision" page,
  https://docs.jax.dev/en/latest/201/precision.html: "float32 dot products may be computed with
  reduced-precision arithmetic internally (bfloat16 on TPU, TF32 on recent GPUs)"; Cloud TPU's
  https://cloud.google.com/tpu/docs/bfloat16: "By default, TPUs perform matrix multiplication
  operations with bfloat16 values and accumulations with IEEE float32 values"); operands still move as f32.
- ``MATMUL_FIXED_K``: a matmul's tiles each pay a fixed cost besides their K / 64 steps of 64
  contracted elements: the pipeline filling (the default Triton gemm configs of XLA's GPU programs run
  3 stages, ``num_stages`` in their ``backend_config``) and the epilogue writing the tile, about 4 steps
  in all, 256 elements: a matmul contracting K costs its flops x (K + 256) / K. It matters below
  K of a few thousand (GPT-2's 768, attention's head dimension 64-128).
- ``matmul_efficiency``: the share of the rates above a training step's matmuls get, 0.73 on every
  device. Calibrated on the H200: ``mlp_h200`` in the same file is a step of 46 f32 matmuls of 8192^3
  (and an Adam update); its measured step less its memory-bound kernels leaves its matmuls running at
  0.708 of the benchmark's rate, 0.73 once their K of 8192 has paid its fixed 256. Two reasons are
  known: the benchmark multiplies arrays of ones, and random data draws more power and lowers the
  clock (Horace He, 2024, https://www.thonking.ai/p/strangely-matrix-multiplications: 13% on an A100
  between zeros and normal values); a step's backward matmuls read transposed operands. The three
  transformers of the file, not used to set it, are then predicted within 1.11x (``docs/step-time.md``).
- ``hbm_bandwidth``: bytes/s a memory-bound kernel moves, reads plus writes. H200: 4.217 TB/s
  measured (the same file: an elementwise pass over 4 GiB of f32; the spec says 4.8 TB/s, 0.879 of
  it); other devices: their spec sheet's bandwidth times 0.879.
- ``launch_s``: the fixed cost of one kernel on a GPU, 1 us, and ``collective_launch_s`` of one NCCL
  collective, 5 us: XLA's own GPU performance model's ``kKernelLaunchOverhead`` and
  ``kNcclKernelLaunchOverhead`` (openxla/xla ``xla/service/gpu/model/gpu_performance_model_base.h``).
  A TPU runs the whole program as one executable: no per-kernel launch (0).
- ``dispatch_s``: once per step, what the host adds around the program as the Timing page times a
  step (the jitted call's dispatch, then waiting for its result): 30 us, every device, from JAX's own
  dispatch benchmark (``benchmarks/api_benchmark.py``, jax-ml/jax pull request 4128: "jit_trivial
  31.5 us", a call and its wait). Not measured on the H200 (its four layouts' steps are 0.16-0.64 s);
  it matters only for steps of a few milliseconds or less.

- ``host_bandwidth``: bytes/s one device moves to or from its host's memory, one way, what host offload's
  transfers (activations a remat policy offloads to ``pinned_host``) ride. TPUs: PCIe, 1.5e10 bytes/s, the Scaling
  Book's figure for a TPU's host link (https://jax-ml.github.io/scaling-book/tpus/); GPUs: their PCIe link, one way
  (NVIDIA's spec sheets: PCIe Gen5 x16 128 GB/s both ways on H100, H200 and B200; Gen4 64 GB/s on A100).

Only the H200's figures are measured; every other device's are the spec sheet scaled by what the
H200 reached of its own, and on v5e, v5p and v4 the matmul efficiency from one published run; ``validated`` says which
in words.
"""

from __future__ import annotations

import dataclasses

from explorer.formats import plain_number
from explorer.hardware.accelerators import FP8_SOURCES, Chip, Gpu

MEASURED = "tests/data/h200-2026-11-27.json"
JAX_DISPATCH = "https://github.com/jax-ml/jax/pull/4128 (benchmarks/api_benchmark.py: jit_trivial)"
XLA_GPU_MODEL = "openxla/xla xla/service/gpu/model/gpu_performance_model_base.h (kKernelLaunchOverhead, kNcclKernelLaunchOverhead)"
JAX_PRECISION = "https://docs.jax.dev/en/latest/201/precision.html"
TPU_BF16 = "https://cloud.google.com/tpu/docs/bfloat16"
NVIDIA = "https://www.nvidia.com/en-us/data-center/"

H200_BF16 = 870.9e12  # measured, MEASURED device_rates.matmul_8192_bf16_flops_per_s
H200_F32 = 445.2e12  # measured, MEASURED device_rates.matmul_8192_f32_flops_per_s (TF32 tensor cores)
H200_HBM = 4.217e12  # measured, MEASURED device_rates.elementwise_4GiB_f32_bytes_per_s_read_plus_write
BF16_FRACTION = H200_BF16 / 989e12  # of the H200's dense bf16 spec (989 TFLOP/s, NVIDIA + "h200/")
TF32_FRACTION = H200_F32 / 494.7e12  # of its dense TF32 spec (989.4 TFLOP/s with sparsity, half dense)
HBM_FRACTION = H200_HBM / 4.8e12  # of its HBM spec (4.8 TB/s)
MATMUL_FIXED_K = 256  # a tile's fixed cost in contracted elements: 3 pipeline stages of 64 and the epilogue, see above
MATMUL_EFFICIENCY = 0.73  # calibrated on MEASURED's mlp_h200 (0.708 x (8192 + 256) / 8192), see the module docstring
DISPATCH_S = 30e-6  # per step: JAX's jit_trivial benchmark (jax-ml/jax pull request 4128), see the module docstring
GPU_LAUNCH_S = 1e-6
NCCL_LAUNCH_S = 5e-6
V5E_MATMUL_EFFICIENCY = 1.0  # set from MaxText's 32B run on one v5e-256 (TPU_EVIDENCE; docs/step-time.md): the fit reaches
# the spec's peak (its program is predicted 1.07x the published step even there: the rest is in the non-matmul terms)
V5P_MATMUL_EFFICIENCY = 0.884  # set from MaxText's 32B run on one v5p-128 (TPU_EVIDENCE; docs/step-time.md): its step at 0.884 of the peak
V4_MATMUL_EFFICIENCY = 0.802  # set from MaxText's 22B run on one v4-128 (TPU_EVIDENCE; docs/step-time.md): its step at 0.802 of the peak
# set from tpu-recipes' Llama 3.1 70B in bf16 on tpu7x-128 (TPU_EVIDENCE; docs/step-time.md): its step at 0.723 of the peak
TPU7X_MATMUL_EFFICIENCY = 0.723
# set from tpu-recipes' Llama 3.1 8B on v6e-8 (TPU_EVIDENCE; docs/step-time.md): its step at 0.639 of the peak
V6E_MATMUL_EFFICIENCY = 0.639
# Each set from one published two-slice run (DCN_EVIDENCE; docs/step-time.md)
V5E_DCN_EFFICIENCY = 0.215
V5P_DCN_EFFICIENCY = 0.273
# v4's fit reaches the DCN figure (1.0): even there its 22B program's second slice is predicted to add 0.67 s where the
# published step adds 0.36 s (+0.24 s of other kernels, +0.43 s of collectives not hidden, the DCN's at 1.0 included)
V4_DCN_EFFICIENCY = 1.0
TPU_HOST_BANDWIDTH = 1.5e10  # PCIe, one way, per chip: the Scaling Book (SCALING_BOOK_HOST)
SCALING_BOOK_HOST = "https://jax-ml.github.io/scaling-book/tpus/ (PCIe bandwidth between a TPU and its host, 1.5e10 bytes/s)"
GPU_HOST_BANDWIDTH = {"a100": 32e9, "h100": 64e9, "h200": 64e9, "b200": 64e9}  # PCIe one way: half the spec sheets' both-ways figure

# Dense TF32 tensor-core FLOP/s from the spec sheets (they print the sparse figure, twice this).
GPU_TF32 = {"a100": 156e12, "h100": 494.7e12, "h200": 494.7e12, "b200": 1.1e15}


@dataclasses.dataclass(frozen=True)
class TpuEvidence:
    """A TPU generation's matmul efficiency (the share of its spec sheet's bf16 peak a training step's matmuls get),
    set from one named published run: the step model's prediction of that run's program equals its published step."""

    matmul_efficiency: float
    run: str  # which published run, in words, with its keys
    source: str


MAXTEXT_V5E = (
    "https://github.com/AI-Hypercomputer/maxtext MaxText/configs/v5e/README.md (TFLOP/s per chip, 16B-128B on 1-32 v5e-256 slices)"
)
MAXTEXT_V5P = "https://github.com/AI-Hypercomputer/maxtext MaxText/configs/v5p/README.md (TFLOP/s per chip, 32B-1024B on 1-2 v5p slices)"
MAXTEXT_V4 = (
    "https://github.com/AI-Hypercomputer/maxtext MaxText/configs/v4/README.md (TFLOP/s per chip, 22B on 1-8 v4-128, 52B on 1-2 v4-384)"
)
TPU_RECIPES_TPU7X = (
    "https://github.com/AI-Hypercomputer/tpu-recipes training/ironwood/README.md (each recipe's step time) and "
    "training/ironwood/*/run_recipe.sh (its MaxText keys and XLA flags)"
)
TPU_RECIPES_V6E = (
    "https://github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-{8,16,32}/README.md "
    "(each recipe's step time, its log line)"
)
# Set by the fits of tests/explorer/predict/test_tpu_steps.py (v5e) and test_tpu_published.py (v5p, v4, v6e, tpu7x): each
# recomputes its figure from the recorded program and fails if it moved.
TPU_EVIDENCE = {
    "v5e": TpuEvidence(
        V5E_MATMUL_EFFICIENCY,
        "MaxText's v5e table, 32B on one v5e-256: global_parameter_scale=32 per_device_batch_size=4 remat_policy=full "
        "max_target_length=2048 attention=flash, 132 TFLOP/s per chip",
        MAXTEXT_V5E,
    ),
    "v5p": TpuEvidence(
        V5P_MATMUL_EFFICIENCY,
        "MaxText's v5p table, 32B on one v5p-128, its own program as MaxText ran it then (32b.sh at 76bd53b0f): "
        "global_parameter_scale=32 per_device_batch_size=8 remat_policy=minimal ici_tensor_parallelism=4 attention=flash, "
        "328 TFLOP/s per chip",
        MAXTEXT_V5P,
    ),
    "v4": TpuEvidence(
        V4_MATMUL_EFFICIENCY,
        "MaxText's v4 table, 22B on one v4-128, its own program as MaxText ran it then (1xv4-128.sh at 281e04bf3): "
        "width 6144, 48 layers, 24 heads of 256, per_device_batch_size=16 max_target_length=1024 remat_policy=full "
        "ici_fsdp_parallelism=64, 156 TFLOP/s per chip",
        MAXTEXT_V4,
    ),
    "v6e": TpuEvidence(
        V6E_MATMUL_EFFICIENCY,
        "tpu-recipes' Llama 3.1 8B on one v6e-8 (MaxText tpu-recipes-v0.1.4's llama3_1_8b_8192_no_collective_matmul: "
        "model_name=llama3.1-8b per_device_batch_size=3 remat_policy=custom with offloaded layer inputs and projections "
        "max_target_length=8192 attention=flash, 2048-wide splash blocks; under the recipe's LIBTPU_INIT_ARGS), 3.443 s a step",
        TPU_RECIPES_V6E,
    ),
    "tpu7x": TpuEvidence(
        TPU7X_MATMUL_EFFICIENCY,
        "tpu-recipes' Llama 3.1 70B in bf16 on one tpu7x-4x4x4 (training/ironwood/llama3.1-70b/8k-bf16-tpu7x-4x4x4: "
        "model_name=llama3.1-70b per_device_batch_size=2 max_target_length=8192 remat_policy=custom, every decoder "
        "input and projection kept on the device, opt_type=adamw mu_dtype=bfloat16, tokamax splash attention with "
        "2048-wide blocks, under its LIBTPU_INIT_ARGS), 12.20 s a step",
        TPU_RECIPES_TPU7X,
    ),
}


@dataclasses.dataclass(frozen=True)
class DcnEvidence:
    """The share of the DCN figure (``accelerators.DCN``) a TPU generation's collectives across slices get in a step,
    set from one named published multi-slice run: the step its second slice adds over the same model on one slice (the
    generation's matmul calibration run), as the step model predicts the two programs, equals the published one. The
    step model takes those collectives as not hidden (XLA schedules their MegaScale sends beside the layer's kernels,
    yet the published steps grow with the slices by more than their bandwidth at the DCN figure would hide)."""

    efficiency: float
    run: str
    source: str


# Set by the fits of tests/explorer/predict/test_tpu_steps.py (v5e) and test_tpu_published.py (v5p, v4), as above.
DCN_EVIDENCE = {
    "v5e": DcnEvidence(
        V5E_DCN_EFFICIENCY,
        "MaxText's v5e table, 32B on two v5e-256 (128 TFLOP/s per chip) beside one (132)",
        MAXTEXT_V5E,
    ),
    "v5p": DcnEvidence(
        V5P_DCN_EFFICIENCY,
        "MaxText's v5p table, 32B on two v5p-128 (319 TFLOP/s per chip) beside one (328)",
        MAXTEXT_V5P,
    ),
    "v4": DcnEvidence(
        V4_DCN_EFFICIENCY,
        "MaxText's v4 table, 22B on two v4-128 beside one",
        MAXTEXT_V4,
    ),
}
# the nearest evidence for a generation with no multi-slice run compared: v6e takes v5e's, TPU7x v5p's
DCN_NEAREST = {"v6e": "v5e", "tpu7x": "v5p"}


@dataclasses.dataclass(frozen=True)
class Rates:
    """What one device of a target does per second, and where each figure comes from."""

    matmul_flops: dict[str, float]  # per operand element type: bf16, f16, f32, f8 (all fp8 kinds); a large matmul of ones
    matmul_efficiency: float  # the share of matmul_flops a training step's matmuls get
    hbm_bandwidth: float  # bytes/s, reads plus writes
    launch_s: float  # per kernel
    collective_launch_s: float  # per collective
    validated: str  # in words: measured on real hardware, or derived
    sources: tuple[str, ...]
    dispatch_s: float = DISPATCH_S  # per step, the host's dispatch and wait
    host_bandwidth: float = TPU_HOST_BANDWIDTH  # bytes/s to or from the host's memory, one way (host offload)
    dcn_efficiency: float = 1.0  # the share of the DCN figure collectives across TPU slices get (DCN_EVIDENCE)

    def matmul_rate(self, dtype: str) -> float:
        """FLOP/s a step's matmul whose operands are ``dtype`` gets (fp8 kinds as f8; anything else at the f32 rate)."""
        key = "f8" if dtype.startswith("f8") else dtype
        return self.matmul_flops.get(key, self.matmul_flops["f32"]) * self.matmul_efficiency

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"sources": list(self.sources)}


def rates(chip: Chip | Gpu) -> Rates:
    """The step model's rates for one device of ``chip`` (see the module docstring)."""
    if isinstance(chip, Gpu) and chip.generation == "h200":
        return Rates(
            {"bf16": H200_BF16, "f16": H200_BF16, "f32": H200_F32, "f8": 2 * H200_BF16},
            MATMUL_EFFICIENCY,
            H200_HBM,
            GPU_LAUNCH_S,
            NCCL_LAUNCH_S,
            f"measured on one H200 ({MEASURED}): matmul and HBM rates, the matmul efficiency calibrated on its mlp_h200; "
            "fp8 assumed at twice bf16 (not measured)",
            (MEASURED, XLA_GPU_MODEL, JAX_DISPATCH, NVIDIA, *chip.sources),
            host_bandwidth=GPU_HOST_BANDWIDTH[chip.generation],
        )
    if isinstance(chip, Gpu):
        bf16 = chip.peak_flops * BF16_FRACTION
        return Rates(
            {"bf16": bf16, "f16": bf16, "f32": GPU_TF32[chip.generation] * TF32_FRACTION, "f8": 2 * bf16},
            MATMUL_EFFICIENCY,
            chip.hbm_bandwidth * HBM_FRACTION,
            GPU_LAUNCH_S,
            NCCL_LAUNCH_S,
            f"not measured: {chip.generation}'s spec sheet figures times the fractions of its own the H200 reached ({MEASURED})",
            (MEASURED, XLA_GPU_MODEL, JAX_DISPATCH, NVIDIA, *chip.sources),
            host_bandwidth=GPU_HOST_BANDWIDTH[chip.generation],
        )
    # A generation with no published run takes the share v5e's run gave (the nearest evidence: the same MXU design and
    # XLA's TPU compiler), not the H200's, whose GPU kernels are another design (0.643 of the peak: 1.4x slow on v5e)
    evidence = TPU_EVIDENCE.get(chip.generation, TPU_EVIDENCE["v5e"])
    if chip.generation in TPU_EVIDENCE:
        matmuls = (
            f"{chip.generation}: the share of its spec sheet's bf16 peak a step's matmuls get set from one published run "
            f"({evidence.run}), every other published run out of sample (docs/step-time.md)"
        )
    else:
        matmuls = (
            f"not measured: no published run of {chip.generation} compared; its spec sheet's bf16 peak at the share v5e's "
            f"published run gave ({evidence.run})"
        )
    peak = chip.device_peak_flops
    fp8 = chip.device_fp8_flops
    fp8_words = (
        f"fp8 matmuls at its fp8 peak ({FP8_SOURCES[chip.generation]})"
        if fp8
        else f"no fp8 rate in its spec sheet: fp8 matmuls at the bf16 rate ({FP8_SOURCES[chip.generation]})"
    )
    dcn_generation = chip.generation if chip.generation in DCN_EVIDENCE else DCN_NEAREST.get(chip.generation, "v5e")
    dcn = DCN_EVIDENCE[dcn_generation]
    dcn_words = f"collectives across slices not hidden, at {plain_number(dcn.efficiency)} of the DCN figure, " + (
        f"set from one published run ({dcn.run})"
        if dcn_generation == chip.generation
        else f"not measured: {dcn_generation}'s share ({dcn.run})"
    )
    return Rates(
        {"bf16": peak, "f16": peak, "f32": peak, "f8": fp8 or peak},
        evidence.matmul_efficiency,
        chip.device_hbm_bandwidth * HBM_FRACTION,
        0.0,
        0.0,
        f"{matmuls}; HBM: its spec times the fraction the H200 reached ({MEASURED}); f32 matmuls at the bf16 rate (one "
        f"bf16 pass at default precision); {fp8_words}; {dcn_words}",
        (evidence.source, MEASURED, JAX_PRECISION, TPU_BF16, JAX_DISPATCH, SCALING_BOOK_HOST, *chip.sources),
        dcn_efficiency=dcn.efficiency,
    )
