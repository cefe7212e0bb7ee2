"""Stage 2 (``explorer/reading/trace.py``): a Linen model's state is traced once, as Flax's recipe does (init without a
mesh), then the forward pass under the layout tagged with the names (stage 4: that layout's activations, and their
names); a rules edit re-traces the forward pass under the new rules only, never the state. A mesh mixing Auto and
Explicit axes is refused for NNX before anything is traced."""

import re

import pytest

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.reading import trace as tracing
from explorer.layout import parse_layout
from tests.explicit_models import ALLOWED, CLASSES, explicit_layout

TRANSFORMER = {"batch": 8, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 4, "kv_heads": 4, "head_dim": 8, "mlp_dim": 64, "vocab": 128}
EVERY_NAME = [
    ["batch", "data"],
    ["embed", None],
    ["heads", "model"],
    ["kv_heads", "model"],
    ["kv", None],
    ["mlp", "model"],
    ["vocab", "model"],
    ["length", None],
]


def layout(rules, name="t"):
    return parse_layout(
        {
            "name": name,
            "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
            "rules": rules,
            "model": {"name": "transformer", "options": TRANSFORMER},
        }
    )


def test_a_first_analysis_traces_init_and_the_forward_pass(traces):
    report = analyze(layout(EVERY_NAME))
    assert traces == ["init", "forward"]  # the forward pass under the tagged layout gives its activations and names
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]


def test_a_parameter_name_without_a_rule_is_still_seen_on_activations(traces):
    rules = [rule for rule in EVERY_NAME if rule[0] != "kv"]
    report = analyze(layout(rules))
    assert traces == ["init", "forward"]
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]
    analyze(layout(rules, name="again"))
    assert traces == ["init", "forward"]  # every name told apart, these rules traced: nothing is traced again
    analyze(layout(rules[::-1], name="edited"))
    assert traces == ["init", "forward", "layout"]  # a rules edit: the forward pass under the new rules only
    analyze(layout(rules + [["never_carried", None]], name="new name"))
    assert traces == ["init", "forward", "layout", "forward"]  # a new name: the forward pass under the tagged layout


def test_a_mixed_mesh_is_refused_for_nnx_before_tracing(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ALLOWED)
    calls = []
    monkeypatch.setattr(tracing, "_typed_nnx_state", lambda *a: calls.append(a))
    mixed = explicit_layout(f"{CLASSES}:make_type_over_metadata", (2, 4), ("data", "model"), types=["auto", "explicit"])
    with pytest.raises(ExplorerError, match=re.escape("Mesh must have all axes as Explicit or all axes as Auto")) as caught:
        analyze(mixed)
    assert caught.value.field == "mesh.axis_types" and not calls
