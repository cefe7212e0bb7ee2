"""The step model's per-device rates: the H200's are the shared measurement's, every other device's are sourced."""

from __future__ import annotations

import json
import pathlib

import pytest

from explorer.predict.step_rates import MATMUL_EFFICIENCY, TPU_EVIDENCE, rates
from explorer.hardware.accelerators import CHIPS, GPUS

DATA = pathlib.Path(__file__).parents[2] / "data"


def test_the_h200s_rates_are_the_measured_ones():
    measured = json.loads((DATA / "h200-2026-11-27.json").read_text())["device_rates"]
    h200 = rates(GPUS["h200"])
    assert h200.matmul_flops["bf16"] == pytest.approx(measured["matmul_8192_bf16_flops_per_s"], rel=1e-3)
    assert h200.matmul_flops["f32"] == pytest.approx(measured["matmul_8192_f32_flops_per_s"], rel=1e-3)
    assert h200.hbm_bandwidth == pytest.approx(measured["elementwise_4GiB_f32_bytes_per_s_read_plus_write"], rel=1e-3)
    assert h200.matmul_rate("f32") == pytest.approx(measured["matmul_8192_f32_flops_per_s"] * MATMUL_EFFICIENCY, rel=1e-3)
    assert h200.matmul_rate("f8e4m3fn") == 2 * h200.matmul_rate("bf16")
    assert "measured" in h200.validated and "not measured" not in h200.validated.split(";")[0]


@pytest.mark.parametrize("chip", [*CHIPS.values(), *GPUS.values()], ids=lambda c: c.generation)
def test_every_device_has_rates_at_most_its_spec_with_sources(chip):
    device = rates(chip)
    assert 0 < device.matmul_rate("bf16") <= chip.device_peak_flops  # v5e's fit reaches its peak (step_rates)
    assert 0 < device.hbm_bandwidth < chip.device_hbm_bandwidth
    assert device.sources and all(device.sources)
    if chip.generation in TPU_EVIDENCE:  # set from one published run, named
        assert TPU_EVIDENCE[chip.generation].run in device.validated and TPU_EVIDENCE[chip.generation].source in device.sources
    elif chip.generation != "h200":
        assert device.validated.startswith("not measured")


def test_a_tpu_runs_f32_matmuls_at_the_bf16_rate_and_a_gpu_on_tf32():
    """TPU: one bf16 pass at JAX's default precision (the MXU); GPU: TF32 tensor cores, about half of bf16."""
    tpu, gpu = rates(CHIPS["v5p"]), rates(GPUS["h100"])
    assert tpu.matmul_rate("f32") == tpu.matmul_rate("bf16")
    assert tpu.launch_s == 0.0
    assert gpu.matmul_rate("f32") == pytest.approx(gpu.matmul_rate("bf16") / 2, rel=0.05)


def test_fp8_matmuls_run_at_the_chips_fp8_rate_where_its_spec_sheet_has_one():
    """TPU7x's spec sheet gives 4614 fp8 TFLOP/s per chip (twice its bf16): its fp8 matmuls are costed there, per
    device half of it. v6e, v5p, v5e and v4 give no fp8 rate (bf16 and int8 only): theirs are costed at the bf16 rate,
    and the rates say so in words (recipes run fp8_full on Trillium and Ironwood)."""
    from explorer.hardware.accelerators import FP8_SOURCES

    ironwood = rates(CHIPS["tpu7x"])
    assert ironwood.matmul_flops["f8"] == 4614e12 / 2 == 2 * ironwood.matmul_flops["bf16"]
    assert ironwood.matmul_rate("f8e4m3fn") == 2 * ironwood.matmul_rate("bf16")
    assert FP8_SOURCES["tpu7x"] in ironwood.validated
    for generation in ("v6e", "v5p", "v5e", "v4"):
        theirs = rates(CHIPS[generation])
        assert theirs.matmul_flops["f8"] == theirs.matmul_flops["bf16"], generation
        assert "no fp8 rate in its spec sheet: fp8 matmuls at the bf16 rate" in theirs.validated, generation
