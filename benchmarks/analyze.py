"""Analysis speed: the explorer against the bare Flax recipe on Llama-2-7B shapes, planned 16x16 mesh.

The bare recipe is what a user would write by hand: eval_shape of the guide's
init_fn, nn.get_partition_spec, nn.logical_to_mesh_sharding, and shard_shape for
every leaf. Both run as whole fresh processes (imports, tracing, everything), in
alternation (A B A B ...), and in one process for the warm and rules-only cases.

    python benchmarks/analyze.py [--rounds 5]

The command line's ``analyze --json`` (layout file in, JSON out) is timed the same way.

Goals: whole process <= 1.5x the bare recipe; a rules-only re-analysis (model cached)
<= 0.2x the bare recipe.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LLAMA_7B = {
    "name": "llama2-7b-16x16",
    "mesh": {"shape": [16, 16], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["mlp", "model"], ["heads", "model"], ["kv_heads", "model"], ["vocab", "model"], ["embed", "data"], ["layer", None]],
    "model": {"name": "transformer", "options": {
        "batch": 16, "seq_len": 4096, "layers": 32, "d_model": 4096, "heads": 32, "kv_heads": 32,
        "head_dim": 128, "mlp_dim": 11008, "vocab": 32000, "gated_mlp": True, "learned_positions": False,
    }},
}
OTHER_RULES = [["batch", "data"], ["embed", "model"], ["mlp", "data"], ["layer", None]]


def bare_recipe() -> int:
    """What a user writes by hand with Flax; returns the number of leaves it sharded."""
    import functools

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state
    from jax.sharding import AbstractMesh, AxisType

    from explorer.models import build_model
    from explorer.layout import parse_layout

    built = build_model(parse_layout(LLAMA_7B).model)

    def init_fn(key, x, model, optimizer):
        variables = model.init(key, x)
        return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optimizer)

    x = jax.ShapeDtypeStruct(built.inputs[0].shape, jnp.dtype(built.inputs[0].dtype))
    abstract = jax.eval_shape(functools.partial(init_fn, model=built.module, optimizer=optax.adam(1e-3)), jax.random.key(0), x)
    mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rules = tuple(tuple(r) for r in LLAMA_7B["rules"])
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
    shapes = jax.tree_util.tree_map(lambda s, a: s.shard_shape(a.shape), shardings, nn.unbox(abstract))
    return len(jax.tree_util.tree_leaves(shapes))


def explorer_analysis(rules=None) -> int:
    from explorer.analysis import analyze
    from explorer.layout import parse_layout

    layout = dict(LLAMA_7B, rules=rules or LLAMA_7B["rules"])
    return len(analyze(parse_layout(layout)).arrays)


def command_line_json() -> None:
    """``python -m explorer analyze LAYOUT --json``, output discarded: what a CI job runs."""
    import contextlib
    import io
    import json
    import tempfile

    from explorer.__main__ import main

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(LLAMA_7B, handle)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["analyze", handle.name, "--json"])
    finally:
        os.unlink(handle.name)


def _fresh_process(which: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", which], check=True, cwd=ROOT)
    return time.perf_counter() - start


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _summary(name: str, samples: list[float]) -> str:
    return f"{name:<34} median {statistics.median(samples):7.3f} s  (min {min(samples):.3f}, max {max(samples):.3f}, n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=["bare", "explorer", "cli"])
    args = parser.parse_args()
    os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")
    if args.child:
        from explorer import devices

        devices.configure()
        {"bare": bare_recipe, "explorer": explorer_analysis, "cli": command_line_json}[args.child]()
        return

    print(f"Llama-2-7B shapes (32 unscanned layers) on a planned 16x16 mesh, {args.rounds} rounds, A B A B ...")
    bare_cold, explorer_cold, cli_cold = [], [], []
    for _ in range(args.rounds):
        bare_cold.append(_fresh_process("bare"))
        explorer_cold.append(_fresh_process("explorer"))
        cli_cold.append(_fresh_process("cli"))
    ratios = [e / b for e, b in zip(explorer_cold, bare_cold)]
    cli_ratios = [c / b for c, b in zip(cli_cold, bare_cold)]
    print(_summary("bare recipe, whole process", bare_cold))
    print(_summary("explorer, whole process", explorer_cold))
    print(_summary("analyze --json, whole process", cli_cold))
    print(f"ratio explorer / bare (whole process): median {statistics.median(ratios):.2f}x  (goal <= 1.5x)")
    print(f"ratio analyze --json / bare (whole process): median {statistics.median(cli_ratios):.2f}x  (goal <= 1.5x)")

    from explorer import devices

    devices.configure()
    explorer_analysis()  # warm the model cache once
    bare_warm, rules_only = [], []
    for round_index in range(args.rounds):
        bare_warm.append(_timed(bare_recipe))
        fresh_rules = (OTHER_RULES if round_index % 2 else LLAMA_7B["rules"]) + [[f"unused_{round_index}", None]]
        rules_only.append(_timed(explorer_analysis, fresh_rules))
    print(_summary("bare recipe, in process", bare_warm))
    print(_summary("explorer, rules-only re-analysis", rules_only))
    ratio = statistics.median(rules_only) / statistics.median(bare_warm)
    print(f"ratio rules-only re-analysis / bare recipe: {ratio:.3f}x  (goal <= 0.2x)")


if __name__ == "__main__":
    main()
