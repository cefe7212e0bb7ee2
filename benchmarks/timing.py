"""The Timing page's step time against a hand-written loop of the Flax guide's train step.

Both time the same layout (the guide's MLP on its 2x4 mesh) in the same process,
in alternation (A B A B ...), each round timing ``--steps`` steps after warm-up and
taking the median. The hand-written side is the guide's code: eval_shape,
logical_to_mesh_sharding, jit(init_fn, out_shardings=...), jit(train_step,
in_shardings=..., out_shardings=..., donate_argnums=0: the state donated, as the tool's step is),
block_until_ready.

    python benchmarks/timing.py [--rounds 6] [--steps 10]

Goal: the tool's median / the hand-written median between 0.95 and 1.05.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from explorer.hardware import devices  # noqa: E402

devices.configure()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

from explorer.layout import seed_layout  # noqa: E402
from explorer.models.mlp import LogicalMLP  # noqa: E402
from explorer.timing.timing import time_layout  # noqa: E402


def guide_loop(steps: int, warmup: int = 2):
    """A function timing ``steps`` steps of the guide's train step, as the tool does each run.

    The jitted functions are built (and compiled) once; every call starts from a fresh
    state and warms up, exactly the protocol ``time_layout`` follows with a cached step.
    """
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    rules = (("batch", "data"), ("hidden", "model"))
    model = LogicalMLP(4, 1024, False)
    optimizer = optax.adam(learning_rate=1e-3)
    x_sharding = NamedSharding(mesh, PartitionSpec("data", None))
    x = jax.device_put(jax.random.normal(jax.random.key(0), (8, 1024)), x_sharding)

    def init_fn(k, x, model, optimizer):
        variables = model.init(k, x)
        return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optimizer)

    def train_step(state, x):
        def loss_unrolled(params):
            y = model.apply({"params": params}, x)
            return y.sum()

        grads = jax.grad(loss_unrolled)(state.params)
        return state.apply_gradients(grads=grads)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract = jax.eval_shape(functools.partial(init_fn, model=model, optimizer=optimizer), jax.random.key(0), x)
        state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
        init = jax.jit(
            init_fn, static_argnums=(2, 3), in_shardings=(NamedSharding(mesh, PartitionSpec()), x_sharding), out_shardings=state_sharding
        )
        # the state donated, as the tool's timed step and every training loop do (the loop below threads it)
        step = jax.jit(train_step, in_shardings=(state_sharding, x_sharding), out_shardings=state_sharding, donate_argnums=0)

    def run() -> float:
        state = init(jax.random.key(0), x, model, optimizer)
        for _ in range(warmup):
            state = step(state, x)
        jax.block_until_ready(state)
        samples = []
        for _ in range(steps):
            start = time.perf_counter()
            state = step(state, x)
            jax.block_until_ready(state)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    layout = seed_layout()
    time_layout(layout, steps=1)  # compile once, as a user returning to a layout would have
    by_hand = guide_loop(args.steps)
    by_hand()  # compile the hand-written side too
    tool, hand = [], []
    for _ in range(args.rounds):
        tool.append(time_layout(layout, steps=args.steps).step_s.median)
        hand.append(by_hand())
    ratios = sorted(t / h for t, h in zip(tool, hand))
    print(f"Flax guide MLP on 2x4, {args.rounds} rounds x {args.steps} steps, A B A B ...")
    print(
        f"tool (time_layout)   median of round medians {statistics.median(tool) * 1e3:8.2f} ms  rounds: {[round(t * 1e3, 1) for t in tool]}"
    )
    print(
        f"hand-written loop    median of round medians {statistics.median(hand) * 1e3:8.2f} ms  rounds: {[round(h * 1e3, 1) for h in hand]}"
    )
    print(f"ratio tool / hand: median {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f}); goal 0.95 .. 1.05")


if __name__ == "__main__":
    main()
