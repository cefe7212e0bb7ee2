"""One trace of a Linen model's init gives its state and its activations; the forward pass again only for names the probe lacked."""

import pytest

from explorer import reading as abstract
from explorer.reading import constraints as program, trace as tracing, under_layout
from explorer.analysis import analyze
from explorer.layout import parse_layout
from tests.test_ground_truth import CASES, CLASS_FACTORIES, EXTERNAL_FACTORIES

TRANSFORMER = {"batch": 8, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 4, "kv_heads": 4, "head_dim": 8,
               "mlp_dim": 64, "vocab": 128}
EVERY_NAME = [["batch", "data"], ["embed", None], ["heads", "model"], ["kv_heads", "model"], ["kv", None],
              ["mlp", "model"], ["vocab", "model"], ["length", None]]


def layout(rules, name="t"):
    return parse_layout({"name": name, "mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": rules,
                         "model": {"name": "transformer", "options": TRANSFORMER}})


@pytest.fixture
def fresh(monkeypatch):
    """Nothing traced yet, in memory or on disk."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", "off")
    monkeypatch.setattr(abstract, "_registry", {})
    monkeypatch.setattr(tracing, "_stages", {})


@pytest.fixture
def traces(fresh, monkeypatch):
    """Each trace, as "init" (a Linen init under the probe, with the forward pass in it), "forward" (the forward
    pass alone under the probe) or "layout" (the forward pass under the layout's mesh and rules)."""
    calls = []
    real_init, real_read, real_layout = tracing._linen_trace, program.constraints, under_layout._trace
    in_layout = []

    def init(*args):
        calls.append("init")
        return real_init(*args)

    def read(closed, input_invars, parameter_invars=(), parameter_outvars=()):
        if parameter_invars and not in_layout:
            calls.append("forward")
        return real_read(closed, input_invars, parameter_invars, parameter_outvars)

    def layout_trace(*args):
        calls.append("layout")
        in_layout.append(True)
        try:
            return real_layout(*args)
        finally:
            in_layout.pop()

    monkeypatch.setattr(tracing, "_linen_trace", init)
    monkeypatch.setattr(program, "constraints", read)
    monkeypatch.setattr(under_layout, "_trace", layout_trace)
    monkeypatch.setattr(under_layout, "_memory", {})
    return calls


def test_rules_naming_every_parameter_name_trace_once(traces):
    report = analyze(layout(EVERY_NAME))
    assert traces == ["init", "layout"]  # the probe once, then the forward pass under this layout's rules
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]


def test_a_parameter_name_without_a_rule_is_still_seen_on_activations(traces):
    rules = [rule for rule in EVERY_NAME if rule[0] != "kv"]
    report = analyze(layout(rules))
    assert traces == ["init", "forward", "layout"]
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]
    analyze(layout(rules, name="again"))
    assert traces == ["init", "forward", "layout"]  # every name told apart, these rules traced: nothing is traced again
    analyze(layout(rules[::-1], name="edited"))
    assert traces == ["init", "forward", "layout", "layout"]  # a rules edit: the forward pass under the new rules only


LINEN_CASES = ["guide-mlp-scan", "transformer-scan-3d", "partitioning-style", "repeated-scan", "bridged", "dead-in-call", "t5x-1d",
               "lm1b", "mu-transformer", "vit-scan-2x2x2"]


@pytest.mark.parametrize("name", LINEN_CASES)
def test_the_forward_pass_alone_lists_what_init_lists(name, traces, monkeypatch):
    """The two ways a Linen model's activations are read agree (ground truth checks the init's, case by case)."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", CLASS_FACTORIES + "," + EXTERNAL_FACTORIES)
    case = CASES[name]
    spec = parse_layout({"name": name, "mesh": case["mesh"], "rules": case["rules"], "model": case["model"]})
    key, axes = spec.model.key(), tuple(case["mesh"]["axes"])
    names = frozenset(rule[0] for rule in case["rules"])
    known = tracing.traced(key, names, axes).model  # learns every name the model carries
    monkeypatch.setattr(tracing, "_stages", {})
    traces.clear()
    init = tracing.traced(key, names | known.logical_names, axes).model
    forward = tracing.traced(key, names | known.logical_names | {"never_carried"}, axes).model
    assert traces == ["init", "forward"]

    def rows(model):
        return [(a.path, a.shape, a.logical_axes, a.runs_per_step, a.module) for a in model.activations + (model.output,)]

    assert rows(forward) == rows(init)


def test_no_parameter_read_or_initialiser_is_an_activation(traces):
    """Init constrains every parameter as it is made and read: none of that is the step's (ground truth checks the rest)."""
    one = analyze(layout(EVERY_NAME))
    activations = [(a.path, a.shape, a.logical_axes, a.runs_per_step) for a in one.arrays if a.kind == "activation"]
    assert len(activations) > 10
    assert all(a.shape != p.shape or a.logical_axes != p.logical_axes
               for a in one.arrays if a.kind == "activation" for p in one.arrays if p.kind == "param")


def test_another_size_of_a_model_traced_before_is_traced_once(traces, tmp_path, monkeypatch):
    """The names a model's parameters carried are remembered per model name: a new size needs no second trace."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    rules = [rule for rule in EVERY_NAME if rule[0] != "kv"]
    analyze(layout(rules))
    assert traces == ["init", "forward", "layout"]
    traces.clear()
    bigger = parse_layout({"name": "bigger", "mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": rules,
                           "model": {"name": "transformer", "options": {**TRANSFORMER, "layers": 3}}})
    report = analyze(bigger)
    assert traces == ["init", "layout"]
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_2/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]
