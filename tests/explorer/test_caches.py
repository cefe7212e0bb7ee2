"""explorer/caches.py: one clear empties every cache the explorer keeps, and the next analysis traces again."""

import pytest

from explorer.analysis import analyzer as analysis
from explorer import caches
from explorer.compile import compiled
from explorer.plots import grid
from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.reading import constraints as program, disk, memory, trace as tracing

AUTO = {
    "name": "auto",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["hidden", "model"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 1, "depth": 32}},
}
EXPLICIT = {
    "name": "explicit",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
    "rules": [],
    "model": {"name": "tests.explicit_models:make_type_over_metadata", "options": {}},
}


@pytest.fixture
def traces(monkeypatch, cleared):
    """Each trace of a Linen model, as tests/explorer/reading/test_trace.py counts them: "init" (the state) and "forward" (the forward
    pass whose constraints are read)."""
    calls = []
    real_init, real_read = tracing._linen_state, program.constraints

    def init(*args):
        calls.append("init")
        return real_init(*args)

    def read(closed, input_invars, parameter_invars=()):
        calls.append("forward")
        return real_read(closed, input_invars, parameter_invars)

    monkeypatch.setattr(tracing, "_linen_state", init)
    monkeypatch.setattr(program, "constraints", read)
    return calls


def sizes() -> dict[str, int]:
    """How many entries each cache holds: the reading's registries and every registered ``lru_cache``."""
    found = {registry.name: len(registry) for registry in caches.registries()}
    found.update({f"{f.__module__}.{f.__name__}": f.cache_info().currsize for f in caches.registered()})
    return found


def test_clear_empties_every_cache(seed_dict, monkeypatch, cleared):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", EXPLICIT["model"]["name"])
    report = analyze(parse_layout(AUTO))
    analyze(parse_layout(EXPLICIT))
    grid.mesh_figure(report.mesh)
    compiled.compile_step(parse_layout(seed_dict))
    every = {
        "reading.memory.models",
        "reading.memory.received",
        "reading.memory.stages",
        "reading.memory.typed",
        "explorer.meshes.jax_mesh",
        "explorer.meshes._mesh_info_cached",
        "explorer.plots.grid._mesh_figure",
        "compiled.steps",
    }
    assert {name for name, size in sizes().items() if size} >= every
    assert {analysis.jax_mesh, grid._sharding_grid, grid._binned_colorscale} <= set(caches.registered())
    assert set(memory.REGISTRIES.values()) | {compiled._steps} <= set(caches.registries())

    caches.clear()

    assert sizes() == dict.fromkeys(sizes(), 0)


def test_an_analysis_after_a_clear_traces_again(traces, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", "off")
    analyze(parse_layout(AUTO))
    assert traces == ["init", "forward"]
    analyze(parse_layout({**AUTO, "name": "again"}))
    assert traces == ["init", "forward"]  # kept in memory
    caches.clear()
    analyze(parse_layout(AUTO))
    assert traces == ["init", "forward"] * 2


def test_clear_with_disk_removes_the_files_kept_on_disk(traces, tmp_path, monkeypatch):
    monkeypatch.setenv(disk.CACHE_ENV, str(tmp_path))
    analyze(parse_layout(AUTO))
    caches.clear()
    analyze(parse_layout(AUTO))
    assert traces == ["init", "forward"]  # memory cleared, the disk kept it
    assert list(tmp_path.glob("traces/*.json")) and list(tmp_path.glob("resolved/*.json"))
    (tmp_path / "compiles").mkdir()
    (tmp_path / "compiles" / "a.json").write_text("{}")
    (tmp_path / "mine.txt").write_text("not the explorer's")

    caches.clear(disk=True)

    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    analyze(parse_layout(AUTO))
    assert traces == ["init", "forward"] * 2
