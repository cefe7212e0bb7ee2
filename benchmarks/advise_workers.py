"""The advisor's stage 2 with 1 worker, N local workers and a two-node local Ray cluster: wall times as ratios, one run.

Held fixed: one stage 1 (the guide's MLP, ``--layers`` layers ``--depth`` wide, on a v5litepod-8), copied for each run,
so every run compiles from the same shortlist; each run has a fresh disk cache (every compile is a compile), and each
is the same search (``--compiles`` shortlisted candidates and the own layout). The cluster is started here with
``ray.cluster_utils.Cluster``: a head and a worker node of one CPU each, on this machine (the two nodes share its
cores: on one machine it measures the overhead of Ray's tasks, not a speed-up a second machine would bring).

    python benchmarks/advise_workers.py [--workers N] [--compiles 5] [--layers 4] [--depth 1024] [--no-cluster]

Needs requirements-ray.txt for the cluster's row (else the row says it was skipped). Run on an idle machine: the
ratios are of wall times, and compiles running at once share the cores.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from explorer import advisor  # noqa: E402
from explorer.compile.compile_pool import POOL, default_workers  # noqa: E402
from explorer.layout import SEED_LAYOUT, parse_layout  # noqa: E402


def run(search: advisor.Search, compiles: int) -> tuple[float, advisor.Search]:
    os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="advise-workers-")
    start = time.perf_counter()
    done = advisor.stage2(copy.deepcopy(search), compiles=compiles, shortcut=False)
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="the N of the N-worker run (default: default_workers())")
    parser.add_argument("--compiles", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--depth", type=int, default=1024)
    parser.add_argument("--no-cluster", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    data = copy.deepcopy(SEED_LAYOUT)
    data["model"]["options"].update(layers=args.layers, depth=args.depth)
    search = advisor.stage1(parse_layout(data), "v5litepod-8")
    workers = args.workers or default_workers()
    print(f"case: MLP {args.layers} layers x {args.depth} on v5litepod-8, {args.compiles} shortlisted + own; {os.cpu_count()} cores")
    rows = []
    for label, count in (("1 worker", 1), (f"{workers} local workers", workers)):
        POOL.configure(count)
        seconds, done = run(search, args.compiles)
        rows.append((label, seconds, done.compiles, sorted({c.compiled_on for c in done.candidates if c.verified})))
    POOL.configure(None)
    if not args.no_cluster:
        try:
            from ray.cluster_utils import Cluster
        except ImportError:
            rows.append(("two-node Ray cluster", None, 0, ["skipped: pip install -r requirements-ray.txt"]))
        else:
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2**20})
            cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20)
            cluster.wait_for_nodes()
            try:
                POOL.connect(cluster.address)
                seconds, done = run(search, args.compiles)
                rows.append(
                    ("two-node Ray cluster", seconds, done.compiles, sorted({c.compiled_on[:8] for c in done.candidates if c.verified}))
                )
            finally:
                POOL.connect(None)
                cluster.shutdown()
    base = rows[0][1]
    print(f"{'run':<24}{'stage 2 wall':>14}{'ratio to 1 worker':>20}{'compiles':>10}  compiled on")
    for label, seconds, compiles, places in rows:
        wall = f"{seconds:.1f} s" if seconds is not None else "-"
        ratio = f"{seconds / base:.2f}" if seconds is not None else "-"
        print(f"{label:<24}{wall:>14}{ratio:>20}{compiles:>10}  {', '.join(places)}")


if __name__ == "__main__":
    main()
