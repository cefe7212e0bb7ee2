"""The Arrays page's timing of the guide's sharded matmul against the guide's own recipe.

The guide times ``jnp.dot(y, z).block_until_ready()`` with y sharded P('a', None) and z
P(None, 'b') on a 4x2 mesh, and ``jnp.dot(x_single, x_single)`` on one device. This script
does exactly that by hand and runs ``explorer.ops.ops.time_op`` on the same op, in the same
process, in alternation (tool, hand, tool, hand, ...), and prints the median over rounds of
each side's medians and the ratios tool / hand.

    python benchmarks/op_matmul.py [--size 2048] [--steps 5] [--rounds 3]

Goal: each ratio between 0.9 and 1.1 (the tool adds nothing to what it measures).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from explorer.hardware import devices  # noqa: E402

devices.configure()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from explorer.ops.op_spec import MATMUL_PRESET, PRESETS, parse_op  # noqa: E402
from explorer.ops.ops import time_op  # noqa: E402


def guide(size: int, steps: int) -> tuple[float, float]:
    """The guide's cells: device_put with NamedSharding, then %timeit of jnp.dot on the mesh and on one device."""
    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    x = jax.random.normal(jax.random.key(0), (size, size))
    y = jax.device_put(x, NamedSharding(mesh, P("a", None)))
    z = jax.device_put(x, NamedSharding(mesh, P(None, "b")))
    x_single = jax.device_put(x, jax.devices()[0])
    medians = []
    for arguments in ((y, z), (x_single, x_single)):
        jnp.dot(*arguments).block_until_ready()
        samples = []
        for _ in range(steps):
            start = time.perf_counter()
            jnp.dot(*arguments).block_until_ready()
            samples.append(time.perf_counter() - start)
        medians.append(statistics.median(samples))
    return medians[0], medians[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = PRESETS[MATMUL_PRESET][1]
    for array in data["arrays"].values():
        array["shape"] = [args.size, args.size]
    op = parse_op(data)
    rounds = {"tool sharded": [], "tool single": [], "hand sharded": [], "hand single": []}
    for _ in range(args.rounds):
        timing = time_op(op, steps=args.steps, warmup=1)
        rounds["tool sharded"].append(timing.sharded.median)
        rounds["tool single"].append(timing.single.median)
        sharded, single = guide(args.size, args.steps)
        rounds["hand sharded"].append(sharded)
        rounds["hand single"].append(single)
    m = {name: statistics.median(values) for name, values in rounds.items()}
    print(f"{args.size}x{args.size} matmul, {args.rounds} alternating rounds of {args.steps} calls each, median of medians:")
    for side in ("sharded", "single"):
        print(
            f"  {side:8}: tool {m['tool ' + side] * 1e3:.2f} ms, guide's recipe {m['hand ' + side] * 1e3:.2f} ms, "
            f"ratio {m['tool ' + side] / m['hand ' + side]:.3f}"
        )
    print(f"  speedup: tool {m['tool single'] / m['tool sharded']:.2f}x, guide's recipe {m['hand single'] / m['hand sharded']:.2f}x")


if __name__ == "__main__":
    main()
