"""Opening a MaxText config: the wall time of MaxText's 64B config on ``v5e-256``, cold, in a fresh process.

What it times today is the stage that exists (explorer/models/maxtext.py ``build``): MaxText's config over
``base.yml`` with the keys below, ``v5e-256``'s 256 devices from libtpu's topology description, MaxText's mesh
(FSDP 256) and every parameter of its decoder built abstractly with its sharding. It is NOT yet the whole
``explorer compile --maxtext`` (the flag, the Layout and XLA's compile of the train step are not built): the figure
is the first stage of it, a lower bound on that command's wall time. Each round is a whole child process (imports
included), timed from the parent.

    python benchmarks/compile_maxtext.py [--rounds 2]

Needs the optional extra: pip install --no-deps -r requirements-maxtext.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = [  # MaxText's v5e table's 64B row (global_parameter_scale 64, per-device batch 2, remat full, FSDP over the slice)
    "global_parameter_scale=64",
    "per_device_batch_size=2",
    "remat_policy=full",
    "max_target_length=2048",
    "ici_fsdp_parallelism=-1",
    "compile_topology=v5e-256",
    "compile_topology_num_slices=1",
]
CHILD = """
import json, math, sys
from explorer.models import maxtext
built = maxtext.build(json.loads(sys.argv[1]))
mesh = {name: int(size) for name, size in built.mesh.shape.items() if size > 1}
print(json.dumps({"parameters": sum(math.prod(v.shape) for v in built.parameters.values()), "mesh": mesh}))
"""


def one_round() -> tuple[float, dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(KEYS)], capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"the child exited with {done.returncode}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    rounds = parser.parse_args().rounds
    times, result = [], {}
    for _ in range(rounds):
        seconds, result = one_round()
        times.append(seconds)
    print(f"MaxText 64B on v5e-256: {result['parameters'] / 1e9:.1f}B parameters, mesh {result['mesh']}")
    print(
        f"build (config, mesh, abstract parameters; a lower bound on explorer compile --maxtext): median {statistics.median(times):.1f} s of {rounds}"
    )


if __name__ == "__main__":
    main()
