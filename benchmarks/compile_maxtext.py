"""Opening a MaxText config: the wall time of ``explorer compile --maxtext`` for MaxText's 64B config on ``v5e-256``,
cold, beside MaxText's own ``train_compile.py`` on the same keys (the bare recipe), in the same run.

Each is a whole fresh process (imports, MaxText's config, libtpu's topology, the trace, XLA's compile for the 256
chips), timed from here. The explorer's compile cache is a fresh empty folder, so nothing is reused. The keys are
the v5e table's 64B row (``tests/data/maxtext_v5e/published.json``): the explorer's predicted step and memory
verdict are printed beside the published step.

    python benchmarks/compile_maxtext.py [--rounds 1] [--no-bare]

Needs the optional extra: pip install --no-deps -r requirements-maxtext.txt
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

ROOT = Path(__file__).resolve().parent.parent
TARGET = "v5e-256"
KEYS = [  # MaxText's v5e table's 64B row (global_parameter_scale 64, per-device batch 2, remat full, FSDP over the slice)
    "global_parameter_scale=64",
    "per_device_batch_size=2",
    "remat_policy=full",
    "max_target_length=2048",
    "attention=flash",
    "use_iota_embed=true",
]
PUBLISHED_STEP_S = 13.47  # the row's published step (tests/data/maxtext_v5e/published_steps.py: 118 TFLOP/s per chip)


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:4])} ...: " + (done.stderr.strip().splitlines()[-1] if done.stderr.strip() else str(done.returncode)))
    return seconds, done.stdout


def explorer_round() -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="explorer-bench-cache-") as cache:
        env = {**os.environ, "EXPLORER_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        seconds, out = timed([sys.executable, "-m", "explorer", "compile", "--maxtext", *KEYS, "--target", TARGET, "--json"], env)
    return seconds, json.loads(out)


def bare_round() -> float:
    """MaxText's own AOT compile of the same keys (``train_compile.py``, its ``compile_topology`` for the slice)."""
    from maxtext.configs import __file__ as configs

    base = str(Path(configs).parent / "base.yml")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "maxtext.trainers.pre_train.train_compile", base, *KEYS, f"compile_topology={TARGET}"]
    return timed(command + ["compile_topology_num_slices=1"], env)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-bare", action="store_true", help="skip MaxText's train_compile.py")
    args = parser.parse_args()
    ours, result = [], {}
    for _ in range(args.rounds):
        seconds, result = explorer_round()
        ours.append(seconds)
    predicted = result["estimate"].get("predicted_s")
    print(f"MaxText 64B on {TARGET}: {' '.join(KEYS)}")
    print(
        f"explorer compile --maxtext, cold: median {statistics.median(ours):.0f} s of {args.rounds} (compile stage {result['compile_s']:.0f} s)"
    )
    if predicted:
        print(
            f"  predicted step {predicted:.2f} s vs published {PUBLISHED_STEP_S} s: {predicted / PUBLISHED_STEP_S:.3f}x; fits: {result['fits']}"
        )
    if not args.no_bare:
        bare = [bare_round() for _ in range(args.rounds)]
        print(
            f"MaxText train_compile.py, same keys: median {statistics.median(bare):.0f} s; ratio {statistics.median(ours) / statistics.median(bare):.2f}x"
        )


if __name__ == "__main__":
    main()
