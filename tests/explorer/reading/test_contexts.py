"""The contexts a trace runs in (``explorer/reading/contexts.py``): a model JAX refuses is one ``ExplorerError`` naming
the model, the call and its line (Explicit axes) or the fix (a model written for Explicit axes on Auto axes); the
collector runs again after a trace and after a refused one."""

import gc

import pytest

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError, NeedsExplicitAxes
from explorer.layout import parse_layout
from explorer.reading import contexts
from tests import explicit_models
from tests.explicit_models import ALLOWED, CLASSES, EXTERNAL, explicit_layout as layout
from tests.explorer.reading.test_trace import EVERY_NAME, layout as transformer_layout


@pytest.fixture(autouse=True)
def allow(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ALLOWED)


def test_an_ambiguous_contraction_is_refused_naming_the_call_and_the_line():
    with pytest.raises(ExplorerError) as caught:
        analyze(layout(f"{CLASSES}:make_ambiguous_contraction", (2, 4), ("data", "model")))
    message = str(caught.value)
    line = next(i for i, text in enumerate(open(explicit_models.__file__).read().splitlines(), 1) if "the refused line" in text)
    assert f"explicit_models.py:{line}" in message
    assert "einsum" in message and "out_sharding=" in message
    assert "Contracting dimensions are sharded" in message  # JAX's own words, quoted after the explanation


def test_a_model_written_for_explicit_axes_on_an_auto_mesh_says_so():
    auto = parse_layout(
        {
            "name": "auto",
            "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
            "rules": [],
            "model": {"name": f"{EXTERNAL}:make_flax_gemma", "options": {}},
        }
    )
    with pytest.raises(NeedsExplicitAxes, match=r"needs a mesh with Explicit axes"):
        analyze(auto)


def test_the_garbage_collector_runs_again_after_a_trace_and_after_a_refused_one(fresh):
    assert gc.isenabled()
    analyze(transformer_layout(EVERY_NAME))
    assert gc.isenabled()
    with pytest.raises(ExplorerError):
        with contexts.tracing("broken"):
            assert not gc.isenabled()  # paused while tracing
            raise RuntimeError("the model's own code failed")
    assert gc.isenabled()
