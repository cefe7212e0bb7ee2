"""One trace of a Linen model's init gives its state and its activations; a second only for names the probe lacked."""

import pytest

from explorer import abstract, tracing
from explorer.analysis import analyze
from explorer.layout import parse_layout

TRANSFORMER = {"batch": 8, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 4, "kv_heads": 4, "head_dim": 8,
               "mlp_dim": 64, "vocab": 128}
EVERY_NAME = [["batch", "data"], ["embed", None], ["heads", "model"], ["kv_heads", "model"], ["kv", None],
              ["mlp", "model"], ["vocab", "model"], ["length", None]]


def layout(rules, name="t"):
    return parse_layout({"name": name, "mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": rules,
                         "model": {"name": "transformer", "options": TRANSFORMER}})


@pytest.fixture
def traces(monkeypatch):
    """Counts the Linen init traces of a model nothing has traced yet (memory and disk empty)."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", "off")
    monkeypatch.setattr(abstract, "_registry", {})
    monkeypatch.setattr(tracing, "_stages", {})
    calls = []
    real = tracing._linen_trace

    def counted(built, names, mesh_axes):
        calls.append(frozenset(names))
        return real(built, names, mesh_axes)

    monkeypatch.setattr(tracing, "_linen_trace", counted)
    return calls


def test_rules_naming_every_parameter_name_trace_once(traces):
    report = analyze(layout(EVERY_NAME))
    assert len(traces) == 1
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]


def test_a_parameter_name_without_a_rule_is_still_seen_on_activations(traces):
    rules = [rule for rule in EVERY_NAME if rule[0] != "kv"]
    report = analyze(layout(rules))
    assert len(traces) == 2 and "kv" not in traces[0] and "kv" in traces[1]
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]
    analyze(layout(rules, name="again"))
    assert len(traces) == 2  # the second trace told every name apart: nothing is traced again


def test_no_parameter_read_or_initialiser_is_an_activation(traces):
    """Init constrains every parameter as it is made and read: none of that is the step's (ground truth checks the rest)."""
    one = analyze(layout(EVERY_NAME))
    activations = [(a.path, a.shape, a.logical_axes, a.runs_per_step) for a in one.arrays if a.kind == "activation"]
    assert len(activations) > 10
    assert all(a.shape != p.shape or a.logical_axes != p.logical_axes
               for a in one.arrays if a.kind == "activation" for p in one.arrays if p.kind == "param")
