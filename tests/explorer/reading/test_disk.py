"""The traced model on disk: a second run skips the trace; corrupt or stale files are traced again."""

import json
import multiprocessing

import pytest

from explorer import reading as abstract
from explorer import caches
from explorer.reading import activations, disk as trace_cache, trace as tracing
from explorer.analysis.analyzer import analyze, report_to_dict
from explorer.layout import parse_layout

LAYOUT = {
    "name": "c",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["hidden", "model"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 32, "scan": True}},
}


@pytest.fixture
def cache(tmp_path, monkeypatch, cleared):
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_a_second_run_reads_the_disk_and_does_not_trace(cache, monkeypatch):
    first = report_to_dict(analyze(parse_layout(LAYOUT)))
    assert len(list(cache.glob("traces/*.json"))) == 1
    caches.clear()  # what a new process sees: nothing in memory
    monkeypatch.setattr(tracing, "trace", lambda *a, **k: pytest.fail("traced although the disk had it"))
    monkeypatch.setattr(activations, "read", lambda *a, **k: pytest.fail("traced although the disk had it"))
    assert report_to_dict(analyze(parse_layout(LAYOUT))) == first


def test_the_state_tree_is_traced_again_on_demand_after_a_disk_hit(cache):
    analyze(parse_layout(LAYOUT))
    caches.clear()  # what a new process sees: nothing in memory
    model = abstract.abstract_model(parse_layout(LAYOUT).model, frozenset({"batch", "hidden"}), ("data", "model"))
    import jax

    assert len(jax.tree_util.tree_leaves(abstract.live(model).state)) == len(model.state_arrays)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 1, "entries": [{"names": [], "model": {}}]}', "\x00\xff"])
def test_a_corrupt_file_is_traced_again(cache, content):
    expected = report_to_dict(analyze(parse_layout(LAYOUT)))
    (path,) = cache.glob("traces/*.json")
    path.write_bytes(content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content)
    caches.clear()  # what a new process sees: nothing in memory
    assert report_to_dict(analyze(parse_layout(LAYOUT))) == expected
    assert json.loads(path.read_text())["format"] == trace_cache.FORMAT  # rewritten whole


def test_other_versions_use_another_file(cache, monkeypatch):
    analyze(parse_layout(LAYOUT))
    caches.clear()  # what a new process sees: nothing in memory
    monkeypatch.setattr(trace_cache, "_versions", lambda: ["0.0.0"])
    analyze(parse_layout(LAYOUT))
    assert len(list(cache.glob("traces/*.json"))) == 2


def _analyze_in_child(folder: str) -> int:
    import os

    os.environ[trace_cache.CACHE_ENV] = folder
    from explorer.hardware import devices

    devices.configure(8)
    return len(analyze(parse_layout(LAYOUT)).arrays)


def test_concurrent_writers_leave_one_whole_file(cache):
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        counts = pool.map(_analyze_in_child, [str(cache)] * 3)
    assert len(set(counts)) == 1
    (path,) = cache.glob("traces/*.json")
    assert json.loads(path.read_text())["entries"]
    assert not list(cache.glob("traces/.writing-*"))


def test_off_switches_the_disk_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv(trace_cache.CACHE_ENV, "off")
    assert trace_cache.cache_dir() is None
    monkeypatch.delenv(trace_cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert trace_cache.cache_dir() == tmp_path / "partition-explorer"


def test_a_disk_hit_imports_no_flax(cache):
    """A second run reads the model without Flax, optax or the models' code: most of a warm run is importing them."""
    import subprocess
    import sys

    analyze(parse_layout(LAYOUT))
    script = (
        "import json, sys\n"
        "from explorer.hardware import devices\n"
        "devices.configure(8)\n"
        "from explorer.analysis.analyzer import analyze\n"
        "from explorer.layout import parse_layout\n"
        f"report = analyze(parse_layout(json.loads({json.dumps(json.dumps(LAYOUT))})))\n"
        "print(json.dumps([len(report.arrays), sorted({m.split('.')[0] for m in sys.modules} & {'flax', 'optax', 'pandas'}),"
        " sorted(m for m in sys.modules if m.startswith('explorer.models.') and m != 'explorer.models.options'"
        " and m != 'explorer.models.base')]))\n"
    )
    env = {**__import__("os").environ, trace_cache.CACHE_ENV: str(cache)}
    files = {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    count, heavy, models = json.loads(done.stdout.strip().splitlines()[-1])
    assert count == len(analyze(parse_layout(LAYOUT)).arrays)
    assert heavy == [] and models == []
    # a hit only reads: rewriting what it read (the received activations) cost a warm run a file write
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()} == files
