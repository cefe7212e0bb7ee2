"""The server's compile pool: N at once, fair between sessions, memory admitted, Stop; real compiles match one by one.

The scheduling tests run the pool with a runner that holds each job until the test lets it go (the pool takes its
runner as a parameter); the compile tests run real compiles for an 8-chip v5e slice in child processes.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from explorer.compile.compile_pool import GIB, LOCAL, CompilePool, Job, default_workers, jobs_text
from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT
from explorer.compile.target_compile import compile_target
from explorer.hardware.targets import parse_target
from tests.explorer import small_mlp as small

TARGET = parse_target("v5litepod-8")


class Held:
    """A runner whose jobs run until ``release(name)``; records the order they started in."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def __call__(self, job):
        with self.lock:
            self.started.append(job.layout.name)
            gate = self.gates.setdefault(job.layout.name, threading.Event())
        while not gate.wait(0.02):
            if job.stop.is_set():
                from explorer.compile.target_compile import Stopped

                raise Stopped("stopped")
        return job.layout.name, False, LOCAL

    def release(self, name: str) -> None:
        with self.lock:
            self.gates.setdefault(name, threading.Event()).set()


def named(seed_dict, name: str):
    return small(seed_dict).model_copy(update={"name": name})


def until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_freed_slot_goes_to_the_session_with_fewest_running_and_positions_say_the_order(seed_dict):
    held = Held()
    pool = CompilePool(workers=2, memory=lambda: 64 * GIB, runner=held)
    a = [pool.submit("A", named(seed_dict, f"a{i}"), TARGET) for i in range(4)]
    b = pool.submit("B", named(seed_dict, "b0"), TARGET)
    until(lambda: len(held.started) == 2)
    assert held.started == ["a0", "a1"] and pool.running() == 2 and pool.waiting() == 3
    assert [pool.position(j) for j in (b, a[2], a[3])] == [0, 1, 2]  # B's one compile goes before A's third
    held.release("a0")
    until(lambda: len(held.started) == 3)
    assert held.started[2] == "b0"  # first come, first served would have started a2
    for name in ("a1", "a2", "a3", "b0"):
        held.release(name)
    until(lambda: all(j.done for j in a + [b]))
    assert held.started == ["a0", "a1", "b0", "a2", "a3"]
    assert [j.result for j in a] == ["a0", "a1", "a2", "a3"]


def test_a_compile_starts_only_where_host_memory_holds_it_and_one_always_may(seed_dict):
    held = Held()
    available = [2.5 * GIB]
    pool = CompilePool(workers=4, memory=lambda: available[0], runner=held)
    jobs = [pool.submit("A", named(seed_dict, f"m{i}"), TARGET) for i in range(3)]
    until(lambda: len(held.started) == 2)
    time.sleep(0.2)
    assert pool.running() == 2  # 4 workers, but 2.5 GiB holds two compiles expected at 1 GiB each
    jobs[0].peak_bytes = GIB  # the first has taken what it was expected to: MemAvailable now counts it
    available[0] = 1.5 * GIB
    held.release("m1")  # a slot frees: 1.5 GiB available, the running one may take nothing more
    until(lambda: len(held.started) == 3)
    for name in ("m0", "m2"):
        held.release(name)
    until(lambda: all(j.done for j in jobs))
    tight = CompilePool(workers=4, memory=lambda: 0, runner=Held())
    alone = tight.submit("A", named(seed_dict, "alone"), TARGET)
    until(lambda: alone.started is not None)  # nothing else runs: it starts whatever the memory says


def test_stop_drops_the_waiting_compiles_and_ends_the_running_ones(seed_dict, own_compile_cache):
    held = Held()
    pool = CompilePool(workers=1, memory=lambda: 64 * GIB, runner=held)
    outcomes = pool.compile_many(
        "A", [(named(seed_dict, "s0"), TARGET), (named(seed_dict, "s1"), TARGET)], should_stop=lambda: held.started == ["s0"]
    )
    assert [o.stopped for o in outcomes] == [True, True] and held.started == ["s0"]  # s1 never started
    assert pool.running() == 0 and pool.waiting() == 0


def test_the_default_is_the_cores_or_what_memory_holds_and_a_bad_number_is_named():
    assert default_workers(cores=16, available=4 * GIB) == 4
    assert default_workers(cores=2, available=64 * GIB) == 2
    assert default_workers(cores=8, available=GIB // 2) == 1
    with pytest.raises(ExplorerError, match=r"^--workers: 0 is not a number of compiles"):
        CompilePool().configure(0)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, seed_dict_module):
    """Two layouts compiled together in a pool of two (one cache), and each compiled alone in another cache."""
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    layouts = [small(seed_dict_module), small(seed_dict_module, depth=256)]
    saved = os.environ.get("EXPLORER_CACHE_DIR")
    try:
        os.environ["EXPLORER_CACHE_DIR"] = str(tmp_path_factory.mktemp("pool"))
        pool = CompilePool(workers=2)
        together = pool.compile_many("A", [(layout, TARGET) for layout in layouts])
        again = pool.compile_many("B", [(layout, TARGET) for layout in layouts])
        measured = pool.compile_bytes(layouts[0])
        os.environ["EXPLORER_CACHE_DIR"] = str(tmp_path_factory.mktemp("alone"))
        alone = [compile_target(layout, TARGET)[0] for layout in layouts]
    finally:
        os.environ.pop("EXPLORER_CACHE_DIR") if saved is None else os.environ.__setitem__("EXPLORER_CACHE_DIR", saved)
    return together, again, alone, measured


@pytest.fixture(scope="module")
def seed_dict_module():
    return copy.deepcopy(SEED_LAYOUT)


def test_compiles_run_together_give_what_each_gives_alone_and_come_back_from_the_cache(compiled):
    together, again, alone, measured = compiled
    for outcome, single in zip(together, alone):
        assert outcome.error is None and not outcome.cached and outcome.compiled_on == "local"
        assert outcome.result.memory == single.memory and outcome.result.collectives == single.collectives
        assert outcome.result.flops == single.flops
    assert [o.compiled_on for o in again] == ["cache", "cache"] and all(o.cached for o in again)
    assert [o.result.memory for o in again] == [o.result.memory for o in together]
    assert 100 * 2**20 < measured < 8 * GIB  # the child's peak, read while it ran, is now what a compile of this model expects


def test_a_target_the_layout_does_not_fit_is_an_outcome_with_its_error_not_a_compile(seed_dict):
    pool = CompilePool(workers=1, runner=Held())
    (outcome,) = pool.compile_many("A", [(small(seed_dict), parse_target("v5litepod-4"))])
    assert outcome.error is not None and "v5litepod-4" in str(outcome.error) and pool.running() == 0


def test_an_advise_killed_mid_run_then_asked_again_reuses_every_compile_it_finished(seed_dict, tmp_path):
    """A server or command killed during the advisor's stage 2: what it compiled is whole in the cache (written
    atomically), and the same search asked again takes those from the cache and compiles only the rest."""
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(small(seed_dict).to_dict()))
    cache = tmp_path / "cache"
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(cache), ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    command = [sys.executable, "-m", "explorer", "advise", str(layout), "--target", "v5litepod-8", "--compiles", "3", "--workers", "1"]
    first = subprocess.Popen(command + ["--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        until(lambda: len(list((cache / "compiles").glob("*.json"))) >= 1 if (cache / "compiles").exists() else False, 120)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the whole group: the command and its compile child, mid-compile
        first.wait()
    kept = sorted((cache / "compiles").glob("*.json"))
    assert kept and not list((cache / "compiles").glob("*.tmp"))  # nothing half-written left as an entry
    for path in kept:
        json.loads(path.read_text())  # each whole
    rerun = subprocess.run(command[:-1] + ["2", "--json"], env=env, capture_output=True, text=True, timeout=300)  # 2 at once
    assert rerun.returncode == 0, rerun.stderr
    search = json.loads(rerun.stdout)
    assert search["cached_compiles"] == len(kept) and search["compiles"] == 4  # 3 shortlisted and the own layout
    assert sorted(c["compiled_on"] for c in search["candidates"] if c["compiled_on"]).count("cache") == len(kept)


def test_without_ray_a_cluster_is_one_message_naming_the_address_and_the_install_line(tmp_path, seed_dict):
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(small(seed_dict).to_dict()))
    no_ray = "import sys; sys.modules['ray'] = None; from explorer.__main__ import run; sys.argv[0] = 'explorer'; run()"
    for extra, env in ((["--cluster", "10.0.0.9:6379"], {}), ([], {"EXPLORER_CLUSTER": "10.0.0.9:6379"})):
        done = subprocess.run(
            [sys.executable, "-c", no_ray, "advise", str(layout), "--target", "v5litepod-8", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, **env),
        )
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().splitlines() == [
            "error: --cluster: '10.0.0.9:6379' needs Ray, an optional extra that is not installed here: "
            "pip install -r requirements-ray.txt (docs/cluster.md)"
        ]
    bad = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", str(layout), "--target", "v5litepod-8", "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --workers: 0 is not a number of compiles at once between 1 and 64"


def test_compile_with_several_targets_is_a_sweep_each_result_or_error_in_order(tmp_path, seed_dict, own_compile_cache):
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(small(seed_dict).to_dict()))
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "cache"), ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    command = [sys.executable, "-m", "explorer", "compile", str(layout), "--target", "v5litepod-4", "--target", "v5litepod-8"]
    done = subprocess.run(command + ["--workers", "2", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2  # one target failed: said in its place, the other compiled
    refused, compiled = json.loads(done.stdout)
    assert refused["target"] == "v5litepod-4" and "8 devices" in refused["error"] and "v5litepod-4" in refused["error"]
    single = compile_target(small(seed_dict), TARGET)  # the cache the sweep filled is another: a compile of its own
    assert compiled["cached"] is False and compiled["memory"] == single[0].to_json()["memory"]


def test_a_sessions_compiles_are_one_line_what_each_one_does_and_whether_the_rest_wait(seed_dict):
    """Issue 55: the advisor's progress said "waiting: 0 compile(s) before yours" every second, alternating with the
    running compile's stage, then nothing for minutes. Now one line: each running compile and its stage in words, and
    whether the rest wait for a worker, without a duration (the caller adds the time, so the line changes only when
    something happens)."""
    pool = CompilePool(workers=1, memory=lambda: 64 * GIB, runner=Held())
    a, b = Job("s", named(seed_dict, "a"), TARGET, GIB), Job("s", named(seed_dict, "b"), TARGET, GIB)
    a.stage, b.stage = "compile", "trace"
    assert jobs_text([a], pool=pool) == "a: XLA compiling"
    assert jobs_text([a, b], pool=pool) == "a: XLA compiling; b: tracing the train step"
    assert jobs_text([a], 0, pool) == "a: XLA compiling; the rest wait for a free worker (0 running in this server, up to 1 at once)"
    assert (
        jobs_text([], 2, pool)
        == "waiting for a free worker (0 running in this server, up to 1 at once, 2 compiles of other sessions first)"
    )
