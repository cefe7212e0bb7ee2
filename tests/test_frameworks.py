"""Linen and NNX semantics, the NNX guide reproduced, and what each annotation style shows."""

import subprocess
import sys

import pytest
from flax.core import spmd as core_spmd
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec

from explorer.analysis.analyzer import analyze, report_to_dict
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.rules import resolve
from explorer.timing.timing import time_layout
from tests.class_models import ALL as CLASS_FACTORIES
from tests.paths import ROOT

MESH = {"shape": [2, 4], "axes": ["data", "model"]}
GUIDE_RULES = [["batch", "data"], ["hidden", "model"], ["embed", None]]


def layout(model, options=None, rules=(), mesh=MESH):
    return parse_layout({"name": "t", "mesh": mesh, "rules": [list(r) for r in rules], "model": {"name": model, "options": options or {}}})


@pytest.fixture
def allow_classes(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", CLASS_FACTORIES)


# --- the NNX guide -------------------------------------------------------------------------


def test_nnx_guide_specs_as_the_guide_prints_them():
    report = analyze(layout("nnx-guide", {"depth": 1024, "layers": 2}))
    assert report.framework == "nnx"
    kernel, w2 = report.array("layers/dot1/kernel"), report.array("layers/w2")
    assert PartitionSpec(*kernel.spec) == PartitionSpec(None, None, "model")  # print(...dot1.kernel.sharding.spec)
    assert kernel.shape == (2, 1024, 1024) and kernel.shard_shape == (2, 1024, 256)
    assert PartitionSpec(*w2.spec) == PartitionSpec(None, "model", None)
    assert PartitionSpec(*report.array("inputs/x").spec) == PartitionSpec("data", None)
    activation = report.array("activations/DotReluDot.__call__/0")
    assert PartitionSpec(*activation.spec) == PartitionSpec("data", "model") and activation.runs_per_step == 2
    assert [a.path for a in report.arrays if a.kind == "opt_state"] == [
        "opt_state/0/count",
        "opt_state/0/mu/layers/dot1/kernel",
        "opt_state/0/mu/layers/w2",
        "opt_state/0/nu/layers/dot1/kernel",
        "opt_state/0/nu/layers/w2",
        "step",
    ]


def test_nnx_guide_logical_model_with_the_guides_rules():
    report = analyze(layout("nnx-guide", {"depth": 1024, "logical": True}, GUIDE_RULES))
    # the guide's asserts: kernel P(None, None, 'model'), w2 P(None, 'model', None), output P('data', None)
    assert PartitionSpec(*report.array("layers/dot1/kernel").spec) == PartitionSpec(None, None, "model")
    assert PartitionSpec(*report.array("layers/w2").spec) == PartitionSpec(None, "model", None)
    assert PartitionSpec(*report.array("activations/LogicalDotReluDot.__call__/0").spec) == PartitionSpec("data", None)
    trace = report.array("layers/dot1/kernel").trace
    assert [d.status for d in trace] == ["unnamed", "replicated-by-rule", "sharded"]


def test_nnx_model_trains_in_the_timing_loop():
    result = time_layout(layout("nnx-guide", {"depth": 64, "layers": 2}), steps=2, warmup=1)
    assert result.step_s.median > 0
    assert result.memory["argument_bytes"] == result.estimate["argument_bytes"]


# --- NNX rule semantics, compared with Flax's own function --------------------------------

NAMES = st.sampled_from(["batch", "embed", "hidden", "mlp", "data", "model"])
TARGETS = st.sampled_from([None, "data", "model", ("data", "model")])


@settings(max_examples=300, deadline=None)
@given(
    names=st.lists(st.one_of(st.none(), NAMES), min_size=1, max_size=4),
    rules=st.lists(st.tuples(NAMES, TARGETS), max_size=6),
)
def test_nnx_resolution_is_flaxs_from_sharding_rules(names, rules):
    if len({n for n in names if n}) != len([n for n in names if n]):
        return  # Flax refuses a name twice in one annotation
    expected = core_spmd.from_sharding_rules(tuple(names), tuple(rules))
    got = resolve(tuple(names), tuple(rules), semantics="nnx").spec
    normal = lambda spec: tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec)
    assert normal(got) == normal(expected)


def test_nnx_last_duplicate_rule_wins_and_the_trace_says_so():
    rules = (("hidden", "data"), ("embed", None), ("hidden", "model"))
    result = resolve(("embed", "hidden"), rules, semantics="nnx")
    assert result.spec == (None, "model")
    assert "NNX: rule 2 overrides rule 0 (hidden, data)" in result.dims[1].explain(rules)
    assert resolve(("embed", "hidden"), rules, semantics="linen").spec == (None, "data")


def test_nnx_unmatched_name_is_a_mesh_axis_name_and_an_unknown_one_is_an_error(allow_classes):
    report = analyze(layout("tests.class_models:make_nnx_logical", rules=[["embed", "data"]]))
    down = report.array("down")
    assert down.trace[0].status == "passed-through" and down.trace[0].mesh_axes == ("mlp",)
    errors = [w for w in report.warnings if w.code == "unknown-mesh-axis"]
    assert errors and all("'mlp'" in w.message for w in errors)
    assert PartitionSpec(*down.spec) == PartitionSpec(None, "data")  # drawn without the refused axis


def test_nnx_mesh_axis_used_twice_is_an_error_naming_the_rule(allow_classes):
    report = analyze(layout("tests.class_models:make_nnx_logical", rules=[["embed", "model"], ["mlp", "model"]]))
    twice = [w for w in report.warnings if w.code == "mesh-axis-twice" and w.path == "up/kernel"]
    assert len(twice) == 1 and "rule 1 (mlp, model)" in twice[0].message and "'model'" in twice[0].message


def test_where_linen_and_nnx_disagree_is_warned():
    rules = [["batch", "data"], ["hidden", "data"], ["hidden", "model"]]
    report = analyze(layout("mlp", {"batch": 8, "layers": 1, "depth": 64}, rules))
    differ = [w for w in report.warnings if w.code == "semantics-differ"]
    assert len(differ) == 1 and "under NNX" in differ[0].message


# --- what each annotation style shows ------------------------------------------------------


def test_repeated_constraints_are_every_call(allow_classes):
    flat = analyze(layout("tests.class_models:make_repeated", rules=[["batch", "data"]]))
    assert len([a for a in flat.arrays if a.kind == "activation" and a.path != "activations/output"]) == 18
    scanned = analyze(layout("tests.class_models:make_repeated", {"scan": True}, [["batch", "data"]]))
    body = [a for a in scanned.arrays if a.kind == "activation" and a.path != "activations/output"]
    assert len(body) == 6 and {a.runs_per_step for a in body} == {3}
    per_instance = sum(a.bytes_per_device for a in body)
    assert scanned.totals.activation_bytes == 3 * per_instance


def test_constraints_on_parameters_are_not_activations(allow_classes):
    report = analyze(layout("tests.class_models:make_partitioning_style", rules=[["mlp", "model"]]))
    activations = [a for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    assert [a.logical_axes for a in activations] == [("batch", "mlp"), ("batch", "embed")]
    w1 = report.array("params/w1")
    assert w1.logical_axes == ("embed", "mlp") and PartitionSpec(*w1.spec) == PartitionSpec(None, "model")
    assert PartitionSpec(*report.array("opt_state/0/mu/w1").spec) == PartitionSpec(None, "model")


def test_mesh_axis_constraints_are_listed_as_fixed(allow_classes):
    report = analyze(layout("tests.class_models:make_mesh_axis_constraint", rules=[["batch", "model"]]))
    fixed = [a for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    assert len(fixed) == 1 and fixed[0].logical_axes == (("data",), ("model",))
    assert [d.status for d in fixed[0].trace] == ["fixed", "fixed"]
    assert "fixed to mesh axes" in fixed[0].note
    kernel = report.array("params/Dense_0/kernel")  # nn.with_partitioning names mesh axes
    assert PartitionSpec(*kernel.spec) == PartitionSpec(None, "model") and kernel.trace[1].status == "fixed"


def test_short_annotation_pads_to_the_rank(allow_classes):
    report = analyze(layout("tests.class_models:make_short_annotation", rules=[["heads", "model"]]))
    kernel = report.array("params/kernel")
    assert kernel.logical_axes == ("embed", "heads", None) and kernel.shard_shape == (32, 1, 8)
    assert kernel.bytes_per_device == 32 * 1 * 8 * 4
    row = next(a for a in report_to_dict(report)["arrays"] if a["path"] == "params/kernel")
    assert row["spec"] == [None, "model", None] and row["logical_axes"] == ["embed", "heads", None]


def test_a_failing_factory_is_one_message_exit_2(tmp_path, allow_classes):
    file = tmp_path / "layout.json"
    file.write_text(
        '{"mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": [],'
        ' "model": {"name": "tests.class_models:make_failing", "options": {"reason": "no weights"}}}'
    )
    result = subprocess.run(
        [sys.executable, "-m", "explorer", "analyze", str(file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "tests.class_models:make_failing" in result.stderr and "RuntimeError: no weights" in result.stderr


def test_an_nnx_bridge_inside_linen_follows_nnx_semantics_and_trains(allow_classes):
    """Flax creates a bridged NNX variable with NNX's semantics: 'embed' with no rule is a mesh axis, which JAX refuses."""
    missing = layout("tests.class_models:make_bridged", rules=[["batch", "data"], ["hidden", "model"]])
    report = analyze(missing)
    assert [w.path for w in report.warnings if w.code == "unknown-mesh-axis"][:1] == ["params/inner/w"]
    with pytest.raises(ExplorerError, match="'embed'"):
        time_layout(missing, steps=1)
    ruled = layout("tests.class_models:make_bridged", rules=[["batch", "data"], ["hidden", "model"], ["embed", None]])
    result = time_layout(ruled, steps=1, warmup=0)
    assert result.memory["argument_bytes"] == result.estimate["argument_bytes"]
