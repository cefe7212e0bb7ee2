"""Compiling for a target: the explorer against the bare recipe, Llama-2-7B shapes on 64 TPU chips and on 64 H100s.

The explorer's compile is ``target_compile.compile_target`` (a child process running
``python -m explorer compile --in-process``, the disk cache disabled by a fresh folder).
The bare recipe is what MaxText's ``train_compile.py`` does, in the same kind of child
process: ``get_topology_desc`` + ``topologies.make_mesh``, the same train step with
the same shardings, ``jax.jit(...).lower(...).compile()``. Both are whole processes
(imports, tracing, lowering, compiling), timed from the parent, in alternation.

- ``v5p-128`` (64 chips, v5p:4x4x4): FSDP 16 x tensor 4, scanned.
- ``h100:8x8`` (8 hosts of 8 H100s, JAX's CUDA plugin, no GPU): FSDP 8 over the hosts x tensor 8
  inside each (NVLink), scanned and unrolled; XLA's peak per GPU against the 75% of its 79.1 GiB
  that JAX takes by default.

    python benchmarks/compile_target.py [--rounds 2] [--targets v5p-128,h100:8x8]

Goal: the explorer's compile at most 1.1x the bare recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.models.options import SIZE_PRESETS  # noqa: E402  (the Llama-2-7B shapes: one home)

if TYPE_CHECKING:
    from explorer.compile.compile_result import TargetCompile

TARGET = "v5p-128"  # 64 chips, v5p:4x4x4
LLAMA_7B = {
    "name": "llama2-7b-fsdp16-tensor4",
    "mesh": {"shape": [16, 4], "axes": ["fsdp", "tensor"]},
    "rules": [
        ["batch", "fsdp"],
        ["embed", "fsdp"],
        ["mlp", "tensor"],
        ["heads", "tensor"],
        ["kv_heads", "tensor"],
        ["vocab", "tensor"],
        ["layer", None],
    ],
    "model": {
        "name": "transformer",
        "options": {**SIZE_PRESETS["llama2-7b"], "scan": True, "dtype": "bfloat16"},  # batch 16 x 4096 tokens
    },
}

GPU_TARGET = "h100:8x8"  # 8 hosts of 8 H100s
GPU_RULES = LLAMA_7B["rules"]


def llama_gpu(scan: bool) -> dict:
    """Llama-2-7B shapes (the built-in transformer's llama2-7b preset, bf16) for 8 hosts of 8 GPUs."""
    from explorer.models.options import SIZE_PRESETS

    return {
        "name": f"llama2-7b-fsdp8-tensor8-{'scan' if scan else 'unrolled'}",
        "mesh": {"shape": [8, 8], "axes": ["fsdp", "tensor"]},
        "rules": GPU_RULES,
        "model": {"name": "transformer", "options": {**SIZE_PRESETS["llama2-7b"], "scan": scan, "dtype": "bfloat16"}},
    }


BARE = """
import json, sys, time
import flax.linen as nn, jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec
from explorer.layout import parse_layout
from explorer.analysis.analyzer import analyze
from explorer.reading import abstract_model, live
from explorer.compile.train_step import make_train_step, with_sharding

layout = parse_layout(json.load(open(sys.argv[1])))
report, model = analyze(layout), abstract_model(layout.model)
if sys.argv[2] == "tpu":
    devices, options = topologies.get_topology_desc(topology_name="v5p:4x4x4", platform="tpu"), {"xla_tpu_no_crash_on_oom": True}
else:  # a GPU target config file; XLA_FLAGS carries --xla_gpu_experimental_use_collective_kernels=
    devices, options = topologies.get_topology_desc(platform="cuda", target_config=open(sys.argv[2]).read(), topology=sys.argv[3]), {}
mesh = topologies.make_mesh(devices, tuple(layout.mesh.shape), tuple(layout.mesh.axes))
specs = iter(report.array(a.path).spec for a in model.state_arrays)
shardings = jax.tree_util.tree_map(lambda _: NamedSharding(mesh, PartitionSpec(*next(specs))), live(model).state)
ins = tuple(NamedSharding(mesh, PartitionSpec(*a.spec)) for a in report.arrays if a.kind == "input")
args = tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=s) for i, s in zip(live(model).built.inputs, ins))
state = jax.tree_util.tree_map(with_sharding, shardings, live(model).state)
start = time.perf_counter()
with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
    compiled = jax.jit(make_train_step(model), in_shardings=(shardings, *ins), out_shardings=shardings,
                       donate_argnums=0).lower(state, *args).compile(options)
stats = compiled.memory_analysis()
print(json.dumps({"compile_s": time.perf_counter() - start, "peak_bytes": stats.peak_memory_in_bytes}))
"""


def run_tool(layout, target: str) -> tuple[float, TargetCompile]:
    from explorer.compile.target_compile import compile_target

    with tempfile.TemporaryDirectory() as cache:
        os.environ["EXPLORER_CACHE_DIR"] = cache
        start = time.perf_counter()
        result, cached = compile_target(layout, target)
        assert not cached
        return time.perf_counter() - start, result


def run_bare(path: str, target: str) -> tuple[float, dict]:
    from explorer.hardware.devices import child_environment
    from explorer.hardware.targets import parse_target

    parsed = parse_target(target)
    where = ["tpu"] if not parsed.is_gpu else [str(ROOT / "explorer" / "gpu_targets" / parsed.chip.config_file), parsed.gpu_topology]
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", BARE, path, *where], capture_output=True, text=True, env=child_environment(parsed), cwd=ROOT
    )
    elapsed = time.perf_counter() - start
    if completed.returncode:
        raise SystemExit(completed.stderr[-3000:])
    return elapsed, json.loads(completed.stdout.strip().splitlines()[-1])


def compare(data: dict, target: str, rounds: int) -> tuple[TargetCompile, list[float], list[float], list[float]]:
    """Explorer and bare, ``rounds`` times in alternation: the last result and the times."""
    from explorer.layout import parse_layout

    layout = parse_layout(data)
    tool_s, bare_s, ratios = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layout.json")
        with open(path, "w") as handle:
            json.dump(data, handle)
        for round_ in range(rounds):  # A B, then B A: a drift in the machine's load hits both alike
            if round_ % 2:
                b, bare = run_bare(path, target)
                t, result = run_tool(layout, target)
            else:
                t, result = run_tool(layout, target)
                b, bare = run_bare(path, target)
            tool_s.append(t)
            bare_s.append(b)
            ratios.append(t / b)
            print(
                f"  round {round_ + 1}: explorer {t:.1f} s (compile_s {result.compile_s:.1f}), "
                f"bare {b:.1f} s (compile_s {bare['compile_s']:.1f}), ratio {t / b:.3f}; peak explorer "
                f"{result.memory.peak_bytes:,} B, bare {bare['peak_bytes']:,} B",
                flush=True,
            )
    return result, tool_s, bare_s, ratios


def report(result: TargetCompile, tool_s: list[float], bare_s: list[float], ratios: list[float]) -> None:
    gib = 2**30
    memory, estimate, device = result.memory, result.estimate, "GPU" if result.target.is_gpu else "chip"
    print(
        f"  explorer median {statistics.median(tool_s):.1f} s, bare median {statistics.median(bare_s):.1f} s, "
        f"ratio median {statistics.median(ratios):.3f} (goal <= 1.1)"
    )
    print(f"  per {device}: " + ", ".join(f"{k.removesuffix('_bytes')} {v / gib:.2f} GiB" for k, v in memory.figures().items()))
    print(f"  fits: {result.fits} (against {result.memory_limit.what}), headroom {result.headroom_bytes / gib:.2f} GiB")
    for message in result.xla_messages:
        print(f"  XLA: {message}")
    print(
        f"  {result.flops / 1e12:.2f} TFLOP ({result.flops_source}), {result.bytes_accessed / gib:.2f} GiB accessed per {device} per step"
    )
    print(
        f"  roofline lower bound: compute {estimate.compute_s * 1e3:.1f} ms, memory {estimate.memory_s * 1e3:.1f} ms, "
        f"collectives {estimate.collective_s * 1e3:.1f} ms -> {estimate.step_s * 1e3:.1f} ms, {estimate.bound}-bound, "
        f"MFU <= {estimate.mfu_ceiling:.0%}"
    )
    for placed in result.mesh.placement:
        if placed.text is not None:
            print(f"    {placed.text}")
    for c in result.collectives:
        print(f"    {c.op} x{c.count} over {'x'.join(c.mesh_axes) or '-'} ({c.link}): {c.bytes / gib:.3f} GiB, >= {c.seconds * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--targets", default=f"{TARGET},{GPU_TARGET}", help="comma-separated: v5p-128 and/or h100:8x8")
    args = parser.parse_args()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if TARGET in targets:
        print(f"Llama-2-7B shapes (scan, bf16), FSDP 16 x tensor 4 on {TARGET} (v5p:4x4x4):", flush=True)
        report(*compare(LLAMA_7B, TARGET, args.rounds))
    if GPU_TARGET in targets:
        for scan in (True, False):
            print(
                f"\nLlama-2-7B shapes ({'scanned' if scan else 'unrolled'}, bf16), FSDP 8 over hosts x tensor 8 inside on "
                f"{GPU_TARGET} (64 H100s, no GPU):",
                flush=True,
            )
            report(*compare(llama_gpu(scan), GPU_TARGET, args.rounds))


if __name__ == "__main__":
    main()
