"""One process with 8 devices against 2 processes with 4 each (jax.distributed, gloo), same layout.

Both sides time the same layout (the guide's MLP on its 2x4 mesh unless ``--depth``
says otherwise) in alternation (A B A B ...) in one run: A is ``time_layout`` in
this process (8 simulated CPU devices), B is ``time_local_processes`` with 2 local
workers of 4 devices each. Each round takes the median of ``--steps`` steps after
warm-up; the ratio is B's median over A's, per round.

    python benchmarks/processes.py [--rounds 4] [--steps 20] [--depth 1024]

No goal: the figure tells what crossing a process boundary costs on this machine
(on CPU, gloo over loopback TCP instead of memory shared by the devices of one process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from explorer.hardware import devices  # noqa: E402

devices.configure(8)

from explorer.layout import parse_layout, seed_layout  # noqa: E402
from explorer.timing.timing import time_layout  # noqa: E402
from explorer.timing.workers import time_local_processes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--depth", type=int, default=1024)
    args = parser.parse_args()
    data = seed_layout().to_dict()
    data["model"]["options"]["depth"] = args.depth
    layout = parse_layout(data)
    time_layout(layout, steps=1)  # compile once in this process; the workers compile in every round
    one, two = [], []
    for _ in range(args.rounds):
        one.append(time_layout(layout, steps=args.steps).step_s.median)
        result = time_local_processes(layout, 2, steps=args.steps)
        assert (result.processes, result.devices_per_process) == (2, 4)
        two.append(result.step_s.median)
    ratios = sorted(b / a for a, b in zip(one, two))
    print(f"guide MLP (depth {args.depth}) on 2x4, {args.rounds} rounds x {args.steps} steps, A B A B ...")
    print(
        f"A 1 process x 8 devices    median of round medians {statistics.median(one) * 1e3:8.2f} ms  rounds: {[round(t * 1e3, 1) for t in one]}"
    )
    print(
        f"B 2 processes x 4 devices  median of round medians {statistics.median(two) * 1e3:8.2f} ms  rounds: {[round(t * 1e3, 1) for t in two]}"
    )
    print(f"ratio B / A: median {statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f})")


if __name__ == "__main__":
    main()
