"""Compiling for NVIDIA GPU clusters without a GPU: the explorer against a bare recipe that imports no explorer code.

Each case is compiled twice: by the explorer as the app does it (``compile_target``: a child
process, the disk cache in a fresh folder) and by ``tests/ground_truth_gpu.py`` in this process
(the deviceless recipe and the Flax guide's train step with the state donated, given the model as
its author wrote it). The explorer's compiles start together in threads (each is its own child
process) while this process compiles the bare ones, so the module takes about as long as the
bare compiles alone.

- argument bytes exactly, the other memory figures within 10%;
- flops within 5% of the GPU program's own dots (cuBLAS calls included), counted by the ground
  truth's own parser with loop trip counts; once, those agree with the same step compiled for a
  TPU slice of 8 chips (XLA's ``cost_analysis()``) within 2%;
- the collectives equal: per op, runs and bytes per step.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import math

import pytest

from explorer.compile.compile_result import Memory, MemoryLimit, TargetCompile
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.models import build_model
from explorer.predict.roofline import Collective, collective_seconds
from explorer.compile.target_compile import compile_target
from explorer.compile.xla_compile import gpu_plugin
from explorer.hardware.accelerators import GPUS
from explorer.hardware.targets import hosts_per_axis, parse_target
from tests import ground_truth_gpu
from tests.explorer import compile_cli, compile_result

pytestmark = pytest.mark.skipif(gpu_plugin() is None, reason='needs JAX\'s CUDA plugin: pip install "partition-explorer[gpu]"')

FSDP_TENSOR = [["batch", "data"], ["embed", "data"], ["hidden", "model"]]  # the guide's MLP: FSDP over data, tensor over model
CASES = {
    # The guide's MLP, FSDP 2 x tensor 4 inside one host: parameters gathered, gradients reduce-scattered.
    "h100:1x8": {
        "name": "h100-fits",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
        "rules": FSDP_TENSOR,
        "model": {"name": "mlp", "options": {"batch": 64, "layers": 4, "depth": 2048, "scan": False}},
    },
    # The guide's MLP stacked with nn.scan: 12 layers in one while loop.
    "b200:1x8": {
        "name": "b200-scanned",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
        "rules": [["batch", "data"], ["hidden", "model"]],
        "model": {"name": "mlp", "options": {"batch": 1024, "layers": 12, "depth": 1024, "scan": True}},
    },
    # Two hosts of 8: a 4x4 mesh whose first axis spans both hosts, the second inside each.
    "h200:2x8": {
        "name": "h200-two-hosts",
        "mesh": {"shape": [4, 4], "axes": ["data", "model"]},
        "rules": FSDP_TENSOR,
        "model": {"name": "mlp", "options": {"batch": 64, "layers": 4, "depth": 2048, "scan": False}},
    },
    # Too large for an 80 GB A100: 16384 wide, replicated over 8 GPUs (data parallelism), float32.
    "a100:1x8": {
        "name": "a100-too-big",
        "mesh": {"shape": [8], "axes": ["data"]},
        "rules": [["batch", "data"]],
        "model": {
            "name": "transformer",
            "options": {
                "batch": 8,
                "seq_len": 128,
                "layers": 2,
                "d_model": 16384,
                "heads": 128,
                "kv_heads": 16,
                "head_dim": 128,
                "mlp_dim": 65536,
                "vocab": 32000,
                "gated_mlp": True,
                "learned_positions": False,
                "scan": True,
                "dtype": "float32",
            },
        },
    },
}
NAMES = list(CASES)


@pytest.fixture(scope="module")
def explorer_results(tmp_path_factory):
    """Every case compiled by the explorer (child processes, started together), and the B200 case for a TPU slice."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        jobs = {name: (parse_layout(CASES[name]), name) for name in NAMES} | {"tpu": (parse_layout(CASES["b200:1x8"]), "v5litepod-8")}
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            futures = {key: pool.submit(compile_target, layout, target) for key, (layout, target) in jobs.items()}
            yield {key: future for key, future in futures.items()}


@pytest.fixture(scope="module")
def bare_results():
    """Each case by the bare recipe, compiled once in this process on first use."""
    found: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in found:
            spec, target = CASES[name], parse_target(name)
            built = build_model(parse_layout(spec).model)  # the model as its author wrote it: module, inputs, loss
            rules = [(logical, tuple(axes) if isinstance(axes, list) else axes) for logical, axes in spec["rules"]]
            found[name] = ground_truth_gpu.compile_step(
                built.module,
                built.inputs,
                rules,
                spec["mesh"]["shape"],
                spec["mesh"]["axes"],
                target.chip.target_config,
                target.hosts,
                target.gpus_per_host,
                built.loss,
            )
        return found[name]

    return get


def explorer(results, name: str) -> TargetCompile:
    result, cached = results[name].result()
    assert not cached
    return result


@pytest.mark.parametrize("name", NAMES)
def test_memory_per_gpu_is_the_bare_recipes(explorer_results, bare_results, name):
    result, bare = explorer(explorer_results, name), bare_results(name)
    assert result.target.chip.device_kind == bare["device_kind"] and result.target.devices == bare["devices"]
    assert result.memory.argument_bytes == bare["memory"]["argument_bytes"]
    for key in ("output_bytes", "alias_bytes", "temp_bytes", "peak_bytes"):
        assert getattr(result.memory, key) == pytest.approx(bare["memory"][key], rel=0.10), key
    assert result.memory_source == "memory_analysis" and bare["cost_analysis"] in (None, {})


@pytest.mark.parametrize("name", NAMES)
def test_flops_are_the_gpu_programs_dots_with_loop_trip_counts(explorer_results, bare_results, name):
    result, bare = explorer(explorer_results, name), bare_results(name)
    assert result.flops_source == "hlo_matmuls"
    assert bare["dot_flops"] > 0 and result.flops == pytest.approx(bare["dot_flops"], rel=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_the_collectives_are_the_bare_programs(explorer_results, bare_results, name):
    result, bare = explorer(explorer_results, name), bare_results(name)
    found: dict[str, dict[str, int]] = {}
    for c in result.collectives:
        entry = found.setdefault(c.op, {"count": 0, "bytes": 0})
        entry["count"] += c.count
        entry["bytes"] += c.bytes
    assert found == bare["collectives"]
    assert all(c.mesh_axes and "?" not in c.mesh_axes for c in result.collectives if c.group_size > 1)


def test_the_dots_agree_with_a_tpu_slices_cost_analysis(explorer_results, bare_results):
    """The same scanned step for v5litepod-8: XLA's TPU cost_analysis() (elementwise work included, the loop
    body times its trip count) and the GPU program's dots agree within 2% where matmuls dominate."""
    tpu, gpu = explorer(explorer_results, "tpu"), bare_results("b200:1x8")
    assert tpu.flops_source == "cost_analysis" and tpu.loop_work.flops > 0
    assert gpu["dot_flops"] == pytest.approx(tpu.flops, rel=0.02)


def test_a_layout_that_fits_an_h100_is_judged_against_the_75_percent_jax_takes(explorer_results):
    result = explorer(explorer_results, "h100:1x8")
    limit, peak, device = result.memory_limit, result.memory.peak_bytes, GPUS["h100"].hbm_bytes
    assert device == 84942979072  # the target config's device_memory_size: what CUDA reports for an "80 GB" H100
    assert (limit.bytes, limit.device_bytes, limit.fraction) == (int(0.75 * device), device, 0.75)
    assert "75% of the GPU's 79.1 GiB" in limit.what and "XLA_PYTHON_CLIENT_MEM_FRACTION" in limit.what
    assert result.fits and result.fits_device and result.headroom_bytes == int(0.75 * device) - peak
    assert result.xla_messages == ()
    assert {p.axis: p.link for p in result.mesh.placement} == {"data": "nvlink", "model": "nvlink"}
    assert {c.link for c in result.collectives} == {"nvlink"}
    assert {c.op for c in result.collectives} >= {"all-gather", "reduce-scatter", "all-reduce"}
    estimate = result.estimate
    assert estimate.compute_s == pytest.approx(result.flops / 989e12)
    assert estimate.memory_s == pytest.approx(result.bytes_accessed / 3350e9)
    assert estimate.collective_s == pytest.approx(sum(c.seconds for c in result.collectives))
    assert estimate.predicted_s > estimate.step_s  # the step model's prediction (explorer.predict.step_model) beside the bound
    parts = estimate.prediction_parts  # what it is made of, which the page and the CLI say (text.prediction_gap)
    assert math.fsum(parts[k] for k in ("dispatch_s", "matmul_s", "memory_s", "collective_s", "host_s")) == pytest.approx(
        estimate.predicted_s
    )
    assert TargetCompile.from_json(result.to_json()).estimate == estimate  # the compile cache keeps them


def test_a_layout_too_large_for_an_a100_does_not_fit_and_xla_says_so(explorer_results, bare_results):
    result, bare = explorer(explorer_results, "a100:1x8"), bare_results("a100:1x8")
    device = GPUS["a100"].hbm_bytes  # 79.26 GiB
    assert result.compiled and not result.fits and not result.fits_device
    assert result.memory.argument_bytes > device and result.memory.peak_bytes > device
    assert result.headroom_bytes == int(0.75 * device) - result.memory.peak_bytes < 0
    # XLA's GPU compiler does not refuse the program: it logs that its arguments and outputs alone exceed the memory it
    # schedules for (80% of the GPU's) and that rematerialization could not bring the rest under its limit.
    messages = " ".join(result.xla_messages)
    assert f"exceeds the base limit ({device * 80 // 100})" in messages and "Can't reduce memory use below" in messages
    assert result.flops == pytest.approx(bare["dot_flops"], rel=0.05) and result.estimate.step_s > 0


def test_a_4x4_mesh_on_two_hosts_puts_its_first_axis_across_them(explorer_results):
    """Devices are host-major: a 4x4 mesh over 2 hosts of 8 has 'data' groups of 2 GPUs in each of 2 hosts
    (the network) and 'model' groups of 4 GPUs in one host (NVLink); each collective is costed on its level."""
    result = explorer(explorer_results, "h200:2x8")
    placement = {p.axis: p for p in result.mesh.placement}
    assert (placement["data"].hosts, placement["data"].gpus_per_host, placement["data"].link) == (2, 2, "network")
    assert (placement["model"].hosts, placement["model"].gpus_per_host, placement["model"].link) == (1, 4, "nvlink")
    assert placement["data"].text == "data (4): 2 GPUs in each of 2 hosts, over the network"
    assert hosts_per_axis(parse_target("h200:2x8"), (4, 4)) == (placement["data"].hosts, placement["model"].hosts)
    gpu = GPUS["h200"]
    links = {c.mesh_axes: (c.link, c.hosts) for c in result.collectives}
    assert links == {("data",): ("network", 2), ("model",): ("nvlink", 1)}
    # Over 'data' (4 GPUs, 2 in each of 2 hosts) half the gathered array crosses into each host over its 2 NICs,
    # slower than the NVLink hops (3/4 of it at 450 GB/s); over 'model' (4 GPUs of one host) NVLink alone.
    full = {"all-gather": 1, "reduce-scatter": 4, "all-reduce": 2}  # the gathered array V in result bytes
    over_data = [c for c in result.collectives if c.mesh_axes == ("data",)]
    assert {c.op for c in over_data} >= {"all-gather", "reduce-scatter"}
    for c in result.collectives:
        collective = Collective(c.op, c.count, c.bytes, c.mesh_axes, c.group_size, c.ici_axes, c.hosts)
        assert c.seconds == pytest.approx(collective_seconds(collective, gpu))
        level = (1 / 2) / (2 * gpu.network_bandwidth) if c.mesh_axes == ("data",) else (3 / 4) / gpu.nvlink_bandwidth
        assert c.seconds == pytest.approx(full[c.op] * c.bytes * level), c


def test_a_scanned_model_counts_its_loop_per_iteration(explorer_results):
    result = explorer(explorer_results, "b200:1x8")
    assert result.loop_work.flops > 0
    assert [c.count for c in result.collectives if c.op == "all-reduce" and c.mesh_axes == ("model",)] == [24]


def test_without_the_cuda_plugin_a_gpu_target_says_how_to_install_it(seed_dict, monkeypatch):
    from explorer.compile import xla_compile

    monkeypatch.setattr(xla_compile, "GPU_PLUGINS", ("jax_plugins.not_installed",))
    with pytest.raises(ExplorerError) as error:
        compile_target(parse_layout(seed_dict), "h100:1x8")
    assert str(error.value) == (
        "target: 'h100:1x8' compiling for NVIDIA GPUs needs JAX's CUDA plugin (a compile-only install: no GPU, no CUDA "
        'libraries): pip install "partition-explorer[gpu]"'
    )


def test_the_compile_child_gets_nccl_collectives_and_xlas_warnings(monkeypatch):
    from explorer.hardware.devices import child_environment

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    env = child_environment(parse_target("h100:8x8"))
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_gpu_experimental_use_collective_kernels=" and env["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert env["JAX_PLATFORMS"] == "cpu"
    tpu = child_environment(parse_target("v5p-128"))
    assert tpu["XLA_FLAGS"] == "--xla_dump_to=/tmp/x" and tpu["TF_CPP_MIN_LOG_LEVEL"] == "3"


def test_a_cached_result_is_judged_with_this_processs_memory_fraction(seed_dict, tmp_path, monkeypatch):
    """XLA_PYTHON_CLIENT_MEM_FRACTION is not part of the cache key: the verdict is made again on every read."""
    from explorer.compile.compile_cache import cached, store
    from explorer.compile.xla_results import with_verdict

    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    layout, target = parse_layout(seed_dict), parse_target("h100:1x8")
    result = with_verdict(compile_result("h100:1x8", memory=Memory(peak_bytes=70 * 2**30)), target)
    assert not result.fits and result.fits_device
    store(layout, target, result)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".95")
    again = cached(layout, target)
    assert again.fits and again.memory_limit.fraction == 0.95
    assert "with XLA_PYTHON_CLIENT_MEM_FRACTION=.95" in again.memory_limit.what


def test_the_command_line_refuses_an_unknown_gpu_with_one_line_naming_the_valid_targets():
    completed = compile_cli("layouts/seed-2x4.json", "--target", "v100:1x8")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert completed.stderr.startswith("error: target: 'v100:1x8' is not a TPU slice name or a GPU cluster")
    assert (
        "GPU:HOSTSxGPUS of a100, h100, h200, b200" in completed.stderr and "TPU generation (v4, v5e, v5p, v6e, tpu7x)" in completed.stderr
    )


def test_the_command_line_refuses_a_device_count_mismatch_with_both_counts(tmp_path):
    layout = tmp_path / "layout.json"
    data = copy.deepcopy(CASES["h200:2x8"])
    layout.write_text(json.dumps(data))
    completed = compile_cli(str(layout), "--target", "h100:1x8")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert completed.stderr.startswith(
        "error: target: 'h100:1x8' has 8 GPUs (1 host of 8) but the mesh needs 16 devices; GPU clusters of 16 GPUs: h100:2x8, "
    )
    assert "v5litepod-16 (v5e:4x4)" in completed.stderr and "Traceback" not in completed.stderr
    too_many = compile_cli("layouts/seed-2x4.json", "--target", "h100:1x16")
    assert too_many.returncode == 2 and "1 to 8 GPUs" in too_many.stderr and too_many.stderr.count("\n") == 1


def test_the_ground_truth_imports_no_explorer_code():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(ground_truth_gpu.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + [
        alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
    ]
    assert imported and not [m for m in imported if m == "explorer" or m.startswith("explorer.")]


def test_the_verdict_line_names_the_figure_it_compares_with_on_a_gpu():
    """On a GPU the headroom is measured against JAX's share of the memory: the CLI line and the page say that figure."""
    from explorer.target_text import compile_text
    from ui.target_view import verdict

    result = compile_result(
        "h100:1x8",
        memory=Memory(peak_bytes=50 * 2**30),
        headroom_bytes=10 * 2**30,
        memory_limit=MemoryLimit(60 * 2**30, 80 * 2**30, 0.75, "75% of the GPU's 80.0 GiB"),
    )
    assert "fits in the 60.0 GiB JAX lets one process use per GPU (75% of its 80.0 GiB): 10.0 GiB to spare" in compile_text(result)
    assert (
        verdict(result)
        == "Fits: XLA's peak is 50.0 GiB of the 60.0 GiB JAX lets one process use per GPU (75% of its 80.0 GiB), 10.0 GiB to spare."
    )
