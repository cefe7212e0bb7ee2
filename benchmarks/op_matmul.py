"""The Arrays page's timing of the guide's sharded matmul against the guide's own recipe.

The guide times ``jnp.dot(y, z).block_until_ready()`` with y sharded P('a', None) and z
P(None, 'b') on a 4x2 mesh, and ``jnp.dot(x_single, x_single)`` on one device. This script
does exactly that by hand and runs ``explorer.ops.time_op`` on the same op, in the same
process, and prints each side's medians and the ratios tool / hand.

    python benchmarks/op_matmul.py [--size 2048] [--steps 5]

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

from explorer import devices  # noqa: E402

devices.configure()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from explorer.ops import MATMUL_PRESET, PRESETS, parse_op, time_op  # noqa: E402


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
    args = parser.parse_args()
    data = PRESETS[MATMUL_PRESET][1]
    for array in data["arrays"].values():
        array["shape"] = [args.size, args.size]
    timing = time_op(parse_op(data), steps=args.steps, warmup=1)
    sharded, single = guide(args.size, args.steps)
    print(f"{args.size}x{args.size} matmul, {args.steps} calls each, medians:")
    print(f"  sharded over 8: tool {timing.sharded.median * 1e3:.2f} ms, guide's recipe {sharded * 1e3:.2f} ms, ratio {timing.sharded.median / sharded:.3f}")
    print(f"  one device:     tool {timing.single.median * 1e3:.2f} ms, guide's recipe {single * 1e3:.2f} ms, ratio {timing.single.median / single:.3f}")
    print(f"  speedup: tool {timing.speedup:.2f}x, guide's recipe {single / sharded:.2f}x")


if __name__ == "__main__":
    main()
