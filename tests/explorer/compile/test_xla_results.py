"""Reading what XLA built for a TPU slice: memory (from the executable, or XLA's dump for a program refused for
HBM), argument padding, flops with loop trip counts, collectives by mesh axis, the verdict.

Each compile runs in a child process as the app runs it (a few seconds for the guide's
MLP on an 8-chip slice); results are cached in a per-test folder.
"""

from __future__ import annotations

import copy
import re

import pytest

from explorer.analysis.analyzer import analyze
from explorer.hlo.program import ParameterLayout
from explorer.layout import SEED_LAYOUT, parse_layout
from explorer.models import mlp
from explorer.compile.target_compile import compile_target
from explorer.target_text import compile_text
from tests.explorer import COMPILE_TARGET as TARGET
from tests.explorer import mlp_layout

pytestmark = pytest.mark.usefixtures("own_compile_cache")


@pytest.fixture(scope="module")
def seed_result(tmp_path_factory):
    """The guide's MLP compiled once for the tests that read its result: (layout, result)."""
    layout = parse_layout(copy.deepcopy(SEED_LAYOUT))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(tmp_path_factory.mktemp("seed-cache")))
        result, cached = compile_target(layout, TARGET)
    assert not cached
    return layout, result


def test_the_guides_mlp_compiles_for_an_8_chip_slice_and_fits(seed_result):
    _, result = seed_result
    assert result.target.topology == "v5e:2x4" and result.target.chips == 8
    assert result.target.chip.device_kind == "TPU v5 lite"
    assert result.fits is True
    # judged in HBM as XLA's compiler judges it: its memory-usage report's total against the HBM it lets a program use
    assert result.judged_peak_bytes == result.cross_check.memory.peak_bytes
    assert result.headroom_bytes == result.target.chip.program_hbm_bytes - result.judged_peak_bytes
    assert all(v is not None for v in result.memory.to_json().values())
    assert set(result.memory.to_json()) == {
        "argument_bytes",
        "output_bytes",
        "alias_bytes",
        "temp_bytes",
        "peak_bytes",
        "generated_code_bytes",
    }
    assert result.estimate.bound in ("compute", "memory", "collective")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", result.compiled_at)  # a cached result says when it was made
    assert result.estimate.step_s == max(getattr(result.estimate, k) for k in ("compute_s", "memory_s", "collective_s"))


def test_arguments_are_the_analysis_state_and_inputs_plus_tpu_padding_to_the_byte(seed_result):
    layout, result = seed_result
    totals = analyze(layout).totals
    state_and_inputs = totals.param_bytes + totals.opt_state_bytes + totals.input_bytes
    padding = result.padding
    assert padding.bytes == state_and_inputs
    # TPU lays a scalar out as one tile of 128 elements: the step counter and Adam's count, 512 B each.
    assert padding.padded == (ParameterLayout(shape="s32[]{:T(128)}", bytes=4, padded_bytes=512),) * 2
    assert result.memory.argument_bytes == state_and_inputs + 2 * (512 - 4)


def test_collectives_name_the_mesh_axes_they_span(seed_result):
    _, result = seed_result
    spans = {c.mesh_axes for c in result.collectives}
    assert spans == {("data",), ("model",)}
    for c in result.collectives:
        assert c.group_size == {"data": 2, "model": 4}[c.mesh_axes[0]]


def test_every_collective_is_traced_to_the_guides_model_code_counts_and_bytes_adding_up(seed_result):
    _, result = seed_result
    for c in result.collectives:
        assert c.sources and {s.file for s in c.sources} == {mlp.__file__}
        assert sum(s.count for s in c.sources) == c.count and sum(s.bytes for s in c.sources) == c.bytes
    assert "top lines by communication" in compile_text(result)


def test_under_pure_data_parallelism_the_all_reduce_bytes_are_the_parameter_bytes(seed_dict):
    layout = mlp_layout(seed_dict, mesh=(8,), axes=("data",), rules=[["batch", "data"]], batch=64, layers=4, depth=512)
    result, _ = compile_target(layout, TARGET)
    reduces = [c for c in result.collectives if c.op == "all-reduce"]
    assert [c.mesh_axes for c in reduces] == [("data",)]
    assert sum(c.bytes for c in reduces) == analyze(layout).totals.param_bytes


def test_a_scanned_models_flops_count_the_loop_body_once_per_layer(seed_dict):
    """24 layers: cost_analysis() counts the scanned body once; the trip count comes from the loop condition."""
    rules = [["batch", "data"]]
    scanned, _ = compile_target(mlp_layout(seed_dict, (8,), ("data",), rules, batch=256, layers=24, depth=512, scan=True), TARGET)
    unrolled, _ = compile_target(mlp_layout(seed_dict, (8,), ("data",), rules, batch=256, layers=24, depth=512, scan=False), TARGET)
    assert scanned.loop_work.flops > 0 and unrolled.loop_work.flops == 0
    assert scanned.flops == pytest.approx(unrolled.flops, rel=0.02)
    assert [c.count for c in scanned.collectives if c.op == "all-reduce"] == [24]


def test_a_layout_far_too_large_for_the_chip_reports_that_it_does_not_fit(seed_dict):
    """libtpu >= 0.0.47.1 refuses xla_tpu_no_crash_on_oom's programs; the figures come from XLA's dump instead."""
    layout = mlp_layout(seed_dict, rules=[["batch", "data"]], layers=4, depth=16384)
    result, _ = compile_target(layout, TARGET)
    hbm = result.target.chip.program_hbm_bytes
    assert result.fits is False and result.compiled is False and result.memory_source == "xla_dump"
    assert result.memory.peak_bytes > hbm
    assert result.headroom_bytes == hbm - result.memory.peak_bytes < 0
    # XLA's own E1000 figures: its total rounded to 0.01 GiB, and the HBM it had (15.75 GiB of v5e's 16).
    assert result.oom.message.startswith("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom")
    assert abs(result.oom.required_bytes - result.memory.peak_bytes) <= 0.005 * 2**30
    assert result.oom.available_bytes == int(15.75 * 2**30) == hbm
    # Replicated parameters and Adam's two moments (4 layers of two 16384x16384 f32 kernels: 8 GiB each) are the arguments.
    state = analyze(layout).totals
    assert result.memory.argument_bytes >= state.param_bytes + state.opt_state_bytes + state.input_bytes
    assert [c.mesh_axes for c in result.collectives if c.op == "all-reduce"] == [("data",)]
    assert {s.file for c in result.collectives for s in c.sources} == {mlp.__file__}  # the dump keeps the stack frames
    assert result.flops_source == "hlo_matmuls" and result.flops > 0 and result.estimate.step_s > 0


def test_a_refused_scanned_transformer_counts_its_dots_once_per_layer():
    """Issue 30: XLA refuses a scanned transformer for HBM (E1000); its flops, read from the dump, count the scanned body
    once per layer: within 2% of the model's own dots (with the one XLA recomputes), the train step's three times the forward's (per device, T tokens:
    2 T x each weight matrix, 2 x 2 T^2 per head for the scores and the weighted values, and the head's 2 T x d x vocab)."""
    options = {
        "batch": 8,
        "seq_len": 128,
        "layers": 4,
        "d_model": 4096,
        "heads": 32,
        "kv_heads": 32,
        "head_dim": 128,
        "mlp_dim": 16384,
        "vocab": 256,
        "gated_mlp": True,
        "scan": True,
        "dtype": "float32",
    }
    layout = parse_layout(
        {
            "name": "scanned-too-big",
            "mesh": {"shape": [8], "axes": ["data"]},
            "rules": [["batch", "data"]],
            "model": {"name": "transformer", "options": options},
        }
    )
    result, _ = compile_target(layout, TARGET)
    assert result.compiled is False and result.oom is not None and result.flops_source == "hlo_matmuls"
    tokens, d, heads, kv_heads, head_dim = 128, 4096, 32, 32, 128  # batch 8 over 8 devices: one sequence of 128 each
    weights = d * head_dim * (2 * heads + 2 * kv_heads) + 3 * d * options["mlp_dim"]  # q, o, k, v; gated MLP in, gate, out
    layer = 2 * tokens * weights + 2 * 2 * tokens**2 * heads * head_dim
    expected = 3 * (options["layers"] * layer + 2 * tokens * d * options["vocab"])
    # XLA's own program does a little more: to fit, its rematerialization computes each layer's MLP output projection
    # once more in the backward loop (2 T x d x mlp_dim a layer: 8.3% here). Counted once, the body would be a quarter.
    recomputed = options["layers"] * 2 * tokens * d * options["mlp_dim"]
    assert result.flops == pytest.approx(expected + recomputed, rel=0.02)


def test_the_route_for_a_program_that_does_not_fit_agrees_with_xla_on_one_that_fits(seed_dict):
    """The same dump read for a program that fits: memory_analysis() to the byte, peak and temporaries within 16 MiB."""
    layout = mlp_layout(seed_dict, rules=[["batch", "data"]], layers=4, depth=2048)
    result, _ = compile_target(layout, TARGET)
    assert result.fits is True and result.memory_source == "memory_analysis" and result.oom is None
    dumped, memory = result.cross_check.memory, result.memory
    for key in ("argument_bytes", "output_bytes", "alias_bytes"):
        assert getattr(dumped, key) == getattr(memory, key), key
    # memory_analysis() adds a few MiB of buffers outside the HBM heap (14 MiB of 512 here, 0.6 of 6,400 MiB at depth 8192).
    assert abs(dumped.peak_bytes - memory.peak_bytes) <= 16 * 2**20
    assert abs(dumped.temp_bytes - memory.temp_bytes) <= 16 * 2**20
    # The dots alone are most of an MLP's flops and never more than cost_analysis() counts.
    assert 0.5 * result.flops <= result.cross_check.matmul_flops <= result.flops
