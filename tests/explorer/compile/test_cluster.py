"""Compiles on a Ray cluster started here (a head that only coordinates, and two worker nodes of one CPU each): the advisor's results equal a local run's,
Stop reaches the remote compile, and a node killed mid-compile has its compile run again on the other.

Needs Ray (requirements-ray.txt, which requirements-dev.txt includes); skipped where it is not installed.
"""

from __future__ import annotations

import copy
import os
import subprocess

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from explorer import advisor  # noqa: E402
from explorer.compile.compile_pool import POOL, CompilePool  # noqa: E402
from explorer.layout import SEED_LAYOUT  # noqa: E402
from explorer.hardware.targets import parse_target  # noqa: E402
from tests.explorer import small_mlp as small  # noqa: E402
from tests.procfs import descends_from, wait_for  # noqa: E402

TARGET = parse_target("v5litepod-8")
CHILD = "explorer-ray-"  # in the command line of every compile child a task starts (explorer.compile.cluster)


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    # The head coordinates only (no CPUs: no compile runs there); the two workers compile, one CPU each. A driver joins
    # one of the three raylets on this host, whichever Ray picks: one of the workers is always not its own, so the
    # node-kill test can always kill a compiling node under the driver (Ray refuses to remove the driver's own node).
    started = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 80 * 2**20})
    workers = tuple(started.add_node(num_cpus=1, object_store_memory=80 * 2**20) for _ in range(2))
    started.wait_for_nodes()
    try:
        yield started, workers
    finally:
        POOL.connect(None)
        started.shutdown()


def children() -> int:
    return len(compile_children())


def compile_children() -> list[int]:
    """The compile children the tasks started on this host (their command line names their folder)."""
    return [int(pid) for pid in subprocess.run(["pgrep", "-f", CHILD], capture_output=True, text=True).stdout.split()]


def test_an_advisor_search_on_the_cluster_equals_the_local_one_and_says_where_each_compiled(cluster, tmp_path, monkeypatch):
    head, _ = cluster
    searched = advisor.stage1(small(copy.deepcopy(SEED_LAYOUT)), TARGET)
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "local"))
    POOL.configure(2)
    try:
        local = advisor.stage2(copy.deepcopy(searched), compiles=1)
        POOL.configure(None)
        POOL.connect(head.address)
        assert POOL.workers == 2  # the cluster's CPUs
        monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cluster"))
        remote = advisor.stage2(copy.deepcopy(searched), compiles=1)
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}  # the two workers
    finally:
        POOL.configure(None)
        POOL.connect(None)
    rows = lambda search: [{k: v for k, v in r.items() if k != "compiled_on"} for r in advisor.search_to_dict(search)["candidates"]]
    assert remote.compiles == local.compiles == 2 and not remote.failures
    assert rows(remote) == rows(local)
    assert {c.compiled_on for c in local.candidates if c.verified} == {"local"}
    places = {c.compiled_on for c in remote.candidates if c.verified}
    assert len(places) == 2 and all(len(p) == 56 for p in places)  # one task on each node (one CPU each): their ids
    assert places == nodes
    assert len(list((tmp_path / "cluster" / "compiles").glob("*.json"))) == 2  # the results came back into the cache


def test_stop_cancels_the_remote_compile_and_its_child(cluster, tmp_path, monkeypatch):
    head, _ = cluster
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    pool = CompilePool()
    pool.connect(head.address)
    try:
        (outcome,) = pool.compile_many("A", [(small(copy.deepcopy(SEED_LAYOUT), layers=8), TARGET)], should_stop=lambda: children() > 0)
    finally:
        pool.connect(None)
    assert outcome.stopped and outcome.result is None
    wait_for(lambda: children() == 0, 20, "the compile child ended with its task")


def test_a_node_killed_mid_compile_has_its_compile_run_again_on_the_other(cluster, tmp_path, monkeypatch):
    head, workers = cluster
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    pool = CompilePool()
    pool.connect(head.address)
    layouts = [small(copy.deepcopy(SEED_LAYOUT), depth=384, layers=6), small(copy.deepcopy(SEED_LAYOUT), depth=640, layers=6)]
    driver = ray._private.worker.global_worker.node.raylet_socket_name  # the raylet this process joined
    victim = next(w for w in workers if w.raylet_socket_name != driver)  # Ray refuses to remove the driver's own node
    raylet = victim.all_processes["raylet"][0].process.pid  # its workers, and their compile children, descend from it
    killed = []

    def kill_when_the_victim_compiles(_jobs) -> None:
        # As soon as a compile child runs on the victim node: not "when both run", which under a loaded machine's
        # scheduling (one task's worker still starting while the other's compile ends) could never be seen (CI run of
        # 2026-11-29). Both tasks are submitted at once and each node has one CPU, so one of them runs there.
        if not killed and any(descends_from(pid, raylet) for pid in compile_children()):
            head.remove_node(victim)  # that node's raylet and workers, its compile child with them
            killed.append(True)

    try:
        outcomes = pool.compile_many("A", [(layout, TARGET) for layout in layouts], on_progress=kill_when_the_victim_compiles)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}  # the workers left
    finally:
        pool.connect(None)
    assert killed
    assert all(o.result is not None and o.error is None for o in outcomes), [str(o.error) for o in outcomes]
    assert {o.compiled_on for o in outcomes} <= alive and len(alive) == 1  # both on the node still alive
