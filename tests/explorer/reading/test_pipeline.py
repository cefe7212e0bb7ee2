"""One layout's path through ``analysis.analyze`` enters each reading module once, in stage order (docs/architecture.md):
the entry, the caches (memory, then the disk), then the stages build, trace, state, activations, resolve. Recorded with
``sys.setprofile``: a module is *entered* when a frame of its code starts while none of its frames runs (a call from
outside it; JAX or Flax calling back into code it is running, such as a traced forward function, is not an entry).
The helpers the stages call (``constraints.py``, ``types.py``, ``auto_regions.py``, ``contexts.py``) are entered only while the entry or a
stage runs; ``arrays.py`` (the plain data, read by the analysis too) and ``collector.py`` (the collector paused by the
analysis too) are left out."""

import collections
import sys
from pathlib import Path

import pytest

import explorer.reading
from explorer.analysis import analyzer as analysis
from explorer.layout import SEED_LAYOUT, parse_layout
from tests.explicit_models import ALLOWED, CLASSES, explicit_layout as layout

READING = str(Path(explorer.reading.__file__).parent) + "/"
STAGE_ORDER = ["__init__", "memory", "disk", "build", "trace", "state", "activations", "resolve"]
HELPERS = {"constraints", "types", "contexts", "auto_regions"}
LEFT_OUT = {"arrays", "collector"}
EXPLICIT = {
    "name": "explicit",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
    "rules": [],
    "model": {"name": "tests.explicit_models:make_type_over_metadata", "options": {}},
}


def entries(run) -> tuple[list[str], list[str]]:
    """The reading modules entered while ``run()`` runs, in order (a module's import is not an entry), and the helpers
    entered while neither the entry nor a stage was running."""
    depth: collections.Counter = collections.Counter()
    order, stray, importing = [], [], []

    def profile(frame, event, arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if not code.co_filename.startswith(READING):
            return
        if code.co_name == "<module>":  # a module's import (its class bodies too) is not an entry
            importing.append(True) if event == "call" else importing.pop()
            return
        if importing:
            return
        name = Path(code.co_filename).stem
        if event == "return":
            depth[name] -= 1
            return
        if depth[name] == 0:
            order.append(name)
            if name in HELPERS and not any(depth[m] for m in STAGE_ORDER):
                stray.append(name)
        depth[name] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return [m for m in order if m not in HELPERS | LEFT_OUT], stray


@pytest.fixture
def empty_cache(cleared, monkeypatch, tmp_path):
    """Nothing read yet: memory cleared, an empty disk cache."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("data", [SEED_LAYOUT, EXPLICIT], ids=["auto-seed", "explicit"])
def test_one_analysis_enters_each_reading_module_once_in_stage_order(data, empty_cache, monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", EXPLICIT["model"]["name"])
    layout = parse_layout(data)
    order, stray = entries(lambda: analysis.analyze(layout))
    assert order == STAGE_ORDER and not stray
    again, _ = entries(lambda: analysis.analyze(layout))
    assert again == ["__init__", "memory"]  # read again: memory answers


def test_a_rule_edit_enters_the_forward_stages_only(empty_cache):
    analysis.analyze(parse_layout(SEED_LAYOUT))
    edited = parse_layout({**SEED_LAYOUT, "rules": [["batch", "data"], ["hidden", None]]})
    order, stray = entries(lambda: analysis.analyze(edited))
    assert order == ["__init__", "memory", "disk", "activations", "resolve"] and not stray  # the state is kept


def test_two_meshes_of_one_shape_with_other_axis_names_are_read_apart(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ALLOWED)
    """The typed reading is cached per model, mesh shape, axis names, types and rules: renaming an axis re-reads."""
    from explorer.analysis.analyzer import model_of

    rules = [("hidden", "model"), ("embed", None), ("batch", None)]  # no rule names the first axis
    first = layout(f"{CLASSES}:make_ruled_only", (2, 4), ("data", "model"), rules)
    renamed = layout(f"{CLASSES}:make_ruled_only", (2, 4), ("rows", "model"), rules)
    assert analysis.analyze(first).array("kernel").spec == (None, "model") == analysis.analyze(renamed).array("kernel").spec
    assert model_of(first).mesh_axes == ("data", "model") and model_of(renamed).mesh_axes == ("rows", "model")
