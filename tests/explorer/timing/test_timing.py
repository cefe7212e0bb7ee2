"""Timing: XLA's own numbers are reported as they are, collectives are counted, guard rails hold."""

import copy
import re
import json
import subprocess
import sys

import pytest

from explorer.formats import human_bytes

from explorer.compile import compiled as compiled_lib
from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.models import mlp
from explorer.compile.compiled import compile_step
from explorer.timing import timing as timing_lib
from explorer.timing.timing import TimingResult, time_layout
from tests.paths import ROOT

SMALL_MLP = {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": False}}


def layout(seed, **changes):
    data = copy.deepcopy(seed)
    data["model"] = SMALL_MLP
    data.update(changes)
    return parse_layout(data)


def test_reported_flops_and_memory_grow_with_the_model_as_xla_counts_them(seed_dict):
    """Doubling the MLP's depth quadruples its matmuls: XLA's FLOP count and its state buffers follow."""
    small = time_layout(layout(seed_dict, rules=[["batch", "data"]]), steps=1, warmup=0)
    wide_model = {"name": "mlp", "options": SMALL_MLP["options"] | {"depth": 512}}
    wide = time_layout(layout(seed_dict, rules=[["batch", "data"]], model=wide_model), steps=1, warmup=0)
    assert 3.5 < wide.flops / small.flops < 4.5
    # the state (params, Adam's mu and nu: 3 copies of 2 layers x 2 kernels, replicated) is what grows
    grown = 3 * 2 * 2 * (512**2 - 256**2) * 4
    assert wide.memory["output_bytes"] - small.memory["output_bytes"] == grown
    assert wide.memory["argument_bytes"] - small.memory["argument_bytes"] == grown + 8 * (512 - 256) // 2 * 4


def test_reported_memory_is_memory_analysis_of_the_same_compiled_step(seed_dict):
    seed = layout(seed_dict)
    result = time_layout(seed, steps=2, warmup=1)
    compiled, cached = compile_step(seed)
    assert cached
    stats = compiled.step.memory_analysis()
    assert result.memory == {
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes,
        "generated_code_bytes": stats.generated_code_size_in_bytes,
        "peak_bytes": stats.peak_memory_in_bytes,
    }
    assert result.flops == compiled.step.cost_analysis()["flops"] > 0


def test_a_scanned_models_flops_count_every_layer_as_the_same_model_unscanned(seed_dict):
    """cost_analysis() counts a while loop's body once: a scanned model's step reports every layer's flops (the loop's
    further iterations added, as a TPU target's figures do), within 10% of the unscanned model's."""
    models = {scan: {"name": "mlp", "options": SMALL_MLP["options"] | {"layers": 4, "scan": scan}} for scan in (False, True)}
    unscanned, scanned = (time_layout(layout(seed_dict, model=models[scan]), steps=1, warmup=0) for scan in (False, True))
    assert scanned.flops == pytest.approx(unscanned.flops, rel=0.10)
    compiled, _ = compile_step(layout(seed_dict, model=models[True]))
    assert scanned.flops > 1.5 * compiled.step.cost_analysis()["flops"]  # 4 layers, not the loop body's 1 (and the rest)


def test_analysis_bytes_agree_with_xla_arguments(seed_dict):
    seed = layout(seed_dict)
    result = time_layout(seed, steps=1, warmup=0)
    report = analyze(seed)
    assert result.memory["argument_bytes"] == report.totals.param_bytes + report.totals.opt_state_bytes + report.totals.input_bytes


def test_tensor_parallel_rules_produce_all_reduces(seed_dict):
    result = time_layout(layout(seed_dict), steps=1, warmup=0)
    assert result.collectives["all-reduce"]["count"] >= 2
    # each all-reduce traced to the guide's model code, and the sources survive the worker's JSON
    assert sum(t.count for t in result.sources) == result.collectives["all-reduce"]["count"]
    assert {s.file for t in result.sources for s in t.sources} == {mlp.__file__}
    assert timing_lib.TimingResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    # the forward pass reduces each layer's (batch/2, depth) partial product over 'model'
    hlo = compile_step(layout(seed_dict))[0].step.as_text()
    assert "f32[4,256]{1,0} all-reduce(" in hlo


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_data_parallel_all_reduces_exactly_the_gradients(seed_dict, scan):
    """Scanned, the gradients are all-reduced inside the loop body, once per layer."""
    model = {"name": "mlp", "options": SMALL_MLP["options"] | {"scan": scan}}
    dp = layout(seed_dict, mesh={"shape": [8], "axes": ["data"]}, rules=[["batch", "data"]])
    dp = parse_layout(dp.to_dict() | {"model": model})
    result = time_layout(dp, steps=1, warmup=0)
    report = analyze(dp)
    used = {op: c for op, c in result.collectives.items() if c["count"]}
    assert set(used) == {"all-reduce"}
    assert used["all-reduce"]["bytes"] == report.totals.global_param_bytes


def test_one_device_needs_no_collectives(seed_dict):
    single = layout(seed_dict, mesh={"shape": [1], "axes": ["data"]}, rules=[["batch", "data"]])
    result = time_layout(single, steps=1, warmup=0)
    assert all(c["count"] == 0 for c in result.collectives.values())


def test_declared_activation_shardings_are_what_xla_chose_for_the_guide(seed_dict):
    result = time_layout(layout(seed_dict), steps=1, warmup=0)
    declared = [a for a in result.activations if a.declared is not None]
    assert declared and not [a for a in declared if a.differs]
    assert ("data", None) in {a.chosen for a in declared}


def test_each_sample_times_one_step_and_never_the_progress_callback(monkeypatch):
    """A fake clock: each step takes a known time, the callback a long one that must not leak into samples."""
    clock = [0.0]
    monkeypatch.setattr(timing_lib.time, "perf_counter", lambda: clock[0])
    durations = iter([0.003, 0.001, 0.002, 0.010, 0.004])

    def step(state):
        clock[0] += next(durations)
        return state + 1

    def on_step(index, seconds):
        clock[0] += 100.0  # drawing a chart on a slow browser

    samples, stopped, _ = timing_lib._timed_steps(step, 0, (), 5, on_step, None)
    assert samples == pytest.approx([0.003, 0.001, 0.002, 0.010, 0.004]) and not stopped
    steps = timing_lib.StepTimes.of(samples)
    assert steps.median == pytest.approx(0.003) and steps.min == pytest.approx(0.001) and steps.max == pytest.approx(0.010)


def test_stop_ends_the_loop_early(seed_dict):
    """A stopped run is a whole result for the steps that ran (compile, memory, collectives), marked as stopped."""
    result = time_layout(layout(seed_dict), steps=50, warmup=0, should_stop=lambda: True)
    assert result.stopped and len(result.step_s.samples) == 1 and result.planned_steps == 50
    assert result.stopped_note() == "Stopped after 1 of 50 steps: every figure here is of the 1 step that ran."
    assert result.compile_s > 0 and result.memory["argument_bytes"] > 0 and "all-reduce" in result.collectives
    assert TimingResult.from_dict(result.to_dict()) == result


def test_planned_mesh_cannot_be_timed(seed_dict):
    planned = layout(seed_dict, mesh={"shape": [16, 16], "axes": ["data", "model"]})
    with pytest.raises(ExplorerError, match="planned mesh but not timed"):
        time_layout(planned, steps=1)


def test_state_too_big_for_memory_is_refused_with_numbers(seed_dict, monkeypatch):
    monkeypatch.setattr(compiled_lib, "available_memory_bytes", lambda: 10 * 2**20)
    with pytest.raises(ExplorerError, match=r"GiB on the host.*GiB are available"):
        time_layout(layout(seed_dict, rules=[["batch", "data"]]), steps=1)


def test_returning_to_a_timed_layout_does_not_recompile(seed_dict, monkeypatch):
    seed = layout(seed_dict, rules=[["batch", "data"], ["hidden", "model"], ["embed", None]])
    first = time_layout(seed, steps=1, warmup=0)
    monkeypatch.setattr(compiled_lib, "_compile", lambda *a: pytest.fail("recompiled a cached layout"))
    again = time_layout(parse_layout({**seed.to_dict(), "name": "renamed"}), steps=1, warmup=0)
    assert again.cached and again.compile_s == first.compile_s


def test_time_command_prints_the_documented_json():
    env = {"EXPLORER_CPU_DEVICES": "8", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "explorer", "time", str(ROOT / "layouts" / "seed-2x4.json"), "--steps", "2", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"compile_s", "step_s", "memory", "flops", "collectives", "devices", "platform"} <= set(data)
    assert set(data["step_s"]) >= {"median", "p10", "p90", "min", "max", "samples"} and len(data["step_s"]["samples"]) == 2
    assert set(data["memory"]) >= {"argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"}
    assert data["devices"] == 8 and data["platform"] == "cpu"
    assert data["collectives"]["all-reduce"]["count"] > 0
    assert {s["file"] for t in data["sources"] for s in t["sources"]} == {str(ROOT / "explorer" / "models" / "mlp.py")}
    # measured, predicted and the bound side by side; on CPU neither applies, and each says why
    assert [row["what"] for row in data["expectations"]] == ["measured", "predicted", "lower bound"]
    assert data["predicted_s"] is None and data["lower_bound_s"] is None and data["mfu"] is None
    assert data["peak_bytes_in_use"] is None and data["memory"]["alias_bytes"] > 0


def test_time_command_refuses_a_planned_mesh_with_exit_2(tmp_path):
    layout_file = tmp_path / "big.json"
    data = json.loads((ROOT / "layouts" / "seed-2x4.json").read_text())
    data["mesh"]["shape"] = [16, 16]
    layout_file.write_text(json.dumps(data))
    result = subprocess.run(
        [sys.executable, "-m", "explorer", "time", str(layout_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"EXPLORER_CPU_DEVICES": "8", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert result.returncode == 2 and "not timed" in result.stderr and "Traceback" not in result.stderr


# --- the timing gates: refused before compiling, or after compiling and before allocating ---------


def indivisible(seed_dict):
    """The guide's MLP with batch 3 on the 2x4 mesh: 'batch' -> data (2) does not divide 3."""
    return layout(seed_dict, model={"name": "mlp", "options": {**SMALL_MLP["options"], "batch": 3}})


def test_an_indivisible_layout_is_refused_before_compiling_with_the_layout_pages_message(seed_dict, monkeypatch):
    from explorer.analysis.findings import indivisible_error

    monkeypatch.setattr(compiled_lib, "_compile", lambda *a: pytest.fail("compiled an indivisible layout"))
    bad = indivisible(seed_dict)
    with pytest.raises(ExplorerError) as refused:
        time_layout(bad, steps=1)
    assert str(refused.value) == str(indivisible_error(analyze(bad)))
    assert "has size 3" in str(refused.value) and refused.value.field == "rules"


def test_a_race_with_an_indivisible_layout_is_refused_before_any_timing(seed_dict, monkeypatch):
    from explorer.timing import compare

    monkeypatch.setattr(compare, "time_layout", lambda *a, **k: pytest.fail("timed a layout of a refused race"))
    with pytest.raises(ExplorerError, match="has size 3"):
        compare.race([layout(seed_dict), indivisible(seed_dict)], rounds=1, steps=1)


def test_time_command_refuses_an_indivisible_layout_with_exit_2(tmp_path):
    layout_file = tmp_path / "batch3.json"
    data = json.loads((ROOT / "layouts" / "seed-2x4.json").read_text())
    data["model"]["options"]["batch"] = 3
    layout_file.write_text(json.dumps(data))
    result = subprocess.run(
        [sys.executable, "-m", "explorer", "time", str(layout_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"EXPLORER_CPU_DEVICES": "8", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert result.returncode == 2 and "has size 3" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_compiled_peak_over_the_limit_is_refused_before_allocation(seed_dict, monkeypatch):
    """The state estimate passes, XLA's compiled peak does not: refused with XLA's numbers, nothing allocated.

    Long sequences and a narrow model: attention scores make XLA's temporaries dwarf the state (as in the
    issue's seq_len 8192, d_model 64 transformer, scaled down).
    """
    from explorer.timing import timing

    options = {"batch": 8, "seq_len": 512, "layers": 1, "d_model": 16, "heads": 2, "kv_heads": 2, "head_dim": 8, "mlp_dim": 32, "vocab": 64}
    small = layout(seed_dict, rules=[["batch", "data"]], model={"name": "transformer", "options": options})
    report = analyze(small)
    step, _ = compile_step(small, report)
    peak = max(compiled_lib.compiled_peak_bytes(step.init), compiled_lib.compiled_peak_bytes(step.step)) * report.mesh.size
    estimate = compiled_lib.host_footprint_bytes(report)
    assert peak > estimate, "this layout's compiled peak must exceed the estimate for the test to mean anything"
    limit = (estimate + peak) / 2  # between the two: the first gate passes, the second must refuse
    monkeypatch.setattr(compiled_lib, "available_memory_bytes", lambda: int(limit / compiled_lib.MEMORY_FRACTION))
    monkeypatch.setattr(timing, "example_inputs", lambda *a, **k: pytest.fail("allocated inputs of a refused timing"))
    compiled_lib.check_timeable(report)  # the first gate passes
    with pytest.raises(ExplorerError, match=r"XLA's compiled memory analysis.*temporaries.*GiB are available"):
        time_layout(small, steps=1)


@pytest.mark.parametrize("temp", [192, 5 * 2**20])
def test_the_note_on_temporaries_claims_only_what_their_size_can_hold(temp):
    """Issue 38: "temporaries (192 B) are XLA's own: gradients, Adam's update and activations…" (192 B hold none of them)."""
    declared = 80 * 2**10
    result = timing_lib.TimingResult(
        layout_name="x",
        platform="cpu",
        devices=8,
        compile_s=1.0,
        cached=False,
        warmup=1,
        step_s=timing_lib.StepTimes.of([0.1]),
        flops=1.0,
        memory={"argument_bytes": 10, "output_bytes": 10, "temp_bytes": temp, "alias_bytes": 10},
        estimate={"argument_bytes": 10, "output_bytes": 10, "declared_activation_bytes": declared},
        collectives={},
        activations=(),
        state_leaves=1,
    )
    note = result.memory_notes()[-1]
    assert note.startswith(f"temporaries ({human_bytes(temp)}) ")  # in units a person reads (issue 55)
    if temp < declared:
        assert "gradients" not in note and "less than the declared activations (80.0 KiB)" in note
    else:
        assert "activations it keeps for the backward pass" in note and "gradients and Adam's update" in note


# --- on an accelerator: a GPU's kind and memory injected, the program run on the simulated CPU devices ---------

ONE_DEVICE = {"mesh": {"shape": [1], "axes": ["data"]}, "rules": [["batch", "data"]]}
H200_KIND = "NVIDIA H200"


class FakeGpu:
    """What the gates and the result read of a device: its platform, its kind and ``memory_stats()``."""

    platform = "gpu"

    def __init__(self, stats, kind=H200_KIND):
        self.stats, self.device_kind = stats, kind

    def memory_stats(self):
        return self.stats


@pytest.fixture
def on_gpu(monkeypatch):
    """Time as on a GPU with ``stats`` as its memory_stats(), on a host with 1 MiB available."""

    def use(stats, kind=H200_KIND):
        device = FakeGpu(stats, kind)
        monkeypatch.setattr(compiled_lib, "timing_device", lambda: device)
        monkeypatch.setattr(timing_lib, "timing_device", lambda: device)
        monkeypatch.setattr(compiled_lib, "available_memory_bytes", lambda: 2**20)
        return device

    return use


def test_the_gates_use_the_devices_memory_not_the_hosts(seed_dict, on_gpu, monkeypatch):
    """Over the host's (1 MiB) but under the device's memory: timed. Over the device's: refused with its figures."""
    small = layout(seed_dict, **ONE_DEVICE)
    monkeypatch.setattr(compiled_lib, "available_memory_bytes", lambda: 2**20)
    with pytest.raises(ExplorerError, match="GiB on the host"):
        time_layout(small, steps=1, warmup=0)  # simulated devices: the host is the gate
    on_gpu({"bytes_limit": 16 * 2**30, "peak_bytes_in_use": 5 * 2**20})
    result = time_layout(small, steps=1, warmup=0)
    assert result.device_kind == H200_KIND and result.bytes_limit == 16 * 2**30
    assert result.peak_bytes_in_use == 5 * 2**20  # the real peak in use, beside XLA's analysis
    on_gpu({"bytes_limit": 2 * 2**20})
    with pytest.raises(ExplorerError) as refused:
        time_layout(small, steps=1, warmup=0)
    assert refused.value.field == "model"
    assert re.search(r"would need \d+\.\d\d GiB on the NVIDIA H200, of its 0\.00 GiB \(JAX's limit\)", str(refused.value))
    assert "host" not in str(refused.value) and "simulated" not in str(refused.value)


def test_without_memory_stats_the_gate_takes_the_device_kinds_memory():
    from explorer.hardware.accelerators import GPUS

    budget = compiled_lib.memory_budget(FakeGpu(None))
    assert budget.limit_bytes == GPUS["h200"].usable_bytes > 100 * 2**30 and not budget.simulated
    with pytest.raises(ExplorerError, match=r"device: 'Mystery GPU' gives no memory_stats\(\)"):
        compiled_lib.memory_budget(FakeGpu(None, "Mystery GPU"))


def test_the_timed_step_donates_the_state(seed_dict):
    """As a training loop does: XLA aliases the state's buffers to the outputs, so the step holds one copy of it."""
    import jax

    small = layout(seed_dict, **ONE_DEVICE)
    run = timing_lib.timed_run(small, steps=2, warmup=1)  # the state threaded through the donated steps
    device = jax.devices()[0]
    state_bytes = sum(s.data.nbytes for leaf in jax.tree_util.tree_leaves(run.state) for s in leaf.addressable_shards if s.device == device)
    assert compile_step(small)[0].step.memory_analysis().alias_size_in_bytes == state_bytes > 0
    assert run.result.memory["alias_bytes"] == state_bytes


def test_on_a_gpu_flops_are_the_programs_matmuls_and_mfu_is_against_tf32_for_f32(seed_dict, on_gpu):
    """cost_analysis() misses cuBLAS/Triton matmuls on a GPU: the FLOP count is the optimized program's dots.

    Every matmul of this MLP (batch 8, width 256, forward and backward) multiplies 8 x 256 by 256 x 256 or
    256 x 8 by 8 x 256: 2 x 8 x 256 x 256 flops each, and the optimized program holds that many dots (XLA
    dropped the input's gradient, which the jaxpr still has). f32 matmuls are held to TF32's dense peak."""
    small = layout(seed_dict, **ONE_DEVICE)
    on_gpu({"bytes_limit": 16 * 2**30})
    result = time_layout(small, steps=1, warmup=0)
    dots = re.findall(r"= f32\[\d+,\d+\]\S* dot\(", compile_step(small)[0].step.as_text())
    expected = len(dots) * 2 * 8 * 256 * 256
    assert result.flops_source == "hlo_matmuls" and result.flops == expected and len(dots) == 10
    assert result.matmul_peak_s == pytest.approx(expected / 494.7e12)  # H200 TF32 dense (f32 at JAX's default precision)
    assert result.mfu == pytest.approx(result.matmul_peak_s / result.step_s.median)
    assert 0 < result.lower_bound_s <= result.predicted_s  # the step model's prediction never falls below the bound
    rows = {row["what"]: row for row in result.expectations()}
    assert rows["predicted"]["ratio"] == pytest.approx(result.step_s.median / result.predicted_s)


def test_bf16_and_f32_matmuls_have_their_own_peak():
    from explorer.hardware.accelerators import CHIPS, GPUS

    assert compiled_lib.matmul_peak_flops(GPUS["h200"], "bf16")[0] == 989e12
    assert compiled_lib.matmul_peak_flops(GPUS["h200"], "f32")[0] == 494.7e12
    assert compiled_lib.matmul_peak_flops(CHIPS["v5p"], "f32")[0] == CHIPS["v5p"].peak_flops  # one bf16 pass on TPU


def test_on_cpu_there_is_no_mfu_bound_or_peak_in_use_and_it_says_why(seed_dict):
    result = time_layout(layout(seed_dict, **ONE_DEVICE), steps=1, warmup=0)
    assert result.flops_source == "cost_analysis" and result.mfu is None and "no MFU on CPU" in result.peak_note
    assert result.peak_bytes_in_use is None and result.lower_bound_s is None and result.predicted_s is None
    rows = {row["what"]: row for row in result.to_dict()["expectations"]}
    assert rows["measured"]["step_s"] == result.step_s.median
    assert rows["lower bound"]["step_s"] is None and "simulated CPU devices" in rows["lower bound"]["note"]


def test_the_text_shows_measured_predicted_and_bound_with_ratios_mfu_and_the_peak_in_use(seed_dict):
    import dataclasses

    from explorer.text import timing_text

    result = time_layout(layout(seed_dict, **ONE_DEVICE), steps=1, warmup=0)
    on_a_gpu = dataclasses.replace(
        result,
        step_s=timing_lib.StepTimes.of([0.4]),
        lower_bound_s=0.1,
        matmul_peak_s=0.2,
        peak_note="bf16 matmuls at bf16 dense 989 TFLOP/s",
        peak_bytes_in_use=3 * 2**30,
        bytes_limit=4 * 2**30,
        expectation_note="the per-kernel step model is not in yet",
    )
    text = timing_text(on_a_gpu)
    assert "MFU 50.0% (bf16 matmuls at bf16 dense 989 TFLOP/s)" in text
    assert re.search(r"lower bound +100 ms +measured/it +4\.00x", text)
    assert "step: median 400 ms, p10 400 ms, p90 400 ms, min 400 ms, max 400 ms over 1 step" in text  # units a person reads
    assert re.search(r"predicted +— +measured/it +— +the per-kernel step model is not in yet", text)
    assert "peak in use (memory_stats, this process's peak so far): 3.0 GiB of 4.0 GiB (JAX's limit)" in text
    assert "not available" in timing_text(result) and "no MFU on CPU" in timing_text(result)
