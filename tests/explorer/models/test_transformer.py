"""The built-in transformer on a mesh of Explicit axes (explorer/models/transformer.py), against JAX and Flax alone.

On Explicit axes it writes its shardings as models written for them do (``out_sharding=`` from the layout's rules,
``reshard`` where a weight is gathered); every parameter's, optimizer leaf's and activation's sharding the report
shows is checked against ``tests/ground_truth_explicit.py`` (no explorer code). On Auto axes it is the model it was:
``tests/test_ground_truth.py`` checks that path.
"""

import pytest

from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.models import build_model
from explorer.analysis.presets import EXAMPLES, example_layout
from tests import ground_truth_explicit as truth
from tests.paths import ROOT
from tests.small_models import SMALL_TRANSFORMER_OPTIONS

# FSDP and tensor parallelism: 'embed' on data gathers the norms' scales and the position table (reshards), 'heads'
# and 'kv_heads' (grouped-query: 8 and 4) on model.
RULES = [["batch", "data"], ["mlp", "model"], ["heads", "model"], ["kv_heads", "model"], ["vocab", "model"], ["embed", "data"]]
OPTIONS = {**SMALL_TRANSFORMER_OPTIONS, "gated_mlp": True}
SHAPE, AXES = (2, 4), ("data", "model")
INPUT_SPECS = [("data", None)]  # the tokens: ('batch', 'length') under RULES


@pytest.fixture(scope="module")
def layout():
    return parse_layout(
        {
            "name": "transformer-explicit",
            "mesh": {"shape": list(SHAPE), "axes": list(AXES), "axis_types": ["explicit", "explicit"]},
            "rules": RULES,
            "model": {"name": "transformer", "options": OPTIONS},
        }
    )


@pytest.fixture(scope="module")
def report(layout):
    return analyze(layout)


@pytest.fixture(scope="module")
def built(layout):
    return build_model(layout.model)


def _rules():
    return tuple((name, axes) for name, axes in RULES)


def _spec(entries) -> tuple:
    return truth.normal(entries, len(entries))


def test_every_state_leaf_is_the_type_flax_builds_and_the_sharding_it_materialises(report, built):
    the_mesh = truth.mesh(SHAPE, AXES)
    expected = truth.linen_state_specs(built.module, built.inputs, the_mesh, INPUT_SPECS, _rules())
    shown = {a.path: _spec(a.spec) for a in report.arrays if a.kind in ("param", "opt_state")}
    assert shown == expected
    assert shown["params/block_0/attention/query"] == ("data", "model", None)  # FSDP: embed on data
    assert shown["params/embedding"] == ("model", "data")
    materialised, output = truth.linen_materialised(built.module, built.inputs, the_mesh, INPUT_SPECS, _rules())
    assert materialised == expected
    assert _spec(report.array("activations/output").spec) == output == ("data", None, "model")


def test_every_activation_row_is_a_sharding_the_forward_pass_sets(report, built):
    rows = [(a.shape, _spec(a.spec), a.runs_per_step) for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    expected = truth.linen_forward_rows(built.module, built.inputs, truth.mesh(SHAPE, AXES), INPUT_SPECS, _rules())
    assert rows == expected
    specs = {a.module.removeprefix("Transformer/block_0/"): _spec(a.spec) for a in report.arrays if a.kind == "activation"}
    assert specs["attention/bte,ehd->bthd"] == ("data", None, "model", None)  # the rules' (batch, length, heads, kv)
    assert specs["mlp/wi_0"] == specs["mlp/wi_1"] == ("data", None, "model") and specs["mlp/wo"] == ("data", None, None)
    gathered = [v for v in report.values if v.op == "reshard" and v.communication]
    assert {v.function for v in gathered} == {"RMSNorm.__call__", "Transformer.__call__"}  # the scales, the positions


def test_the_example_opens_the_transformer_on_explicit_axes_and_its_file_is_the_same_layout():
    from explorer.layout import load_layout_file

    example = example_layout("Transformer, Explicit axes")
    assert example.mesh.types == ("explicit", "explicit") and example.model.name == "transformer"
    assert load_layout_file(str(ROOT / "layouts" / "transformer-explicit-2x4.json")) == example
    assert load_layout_file(str(ROOT / "layouts" / "seed-2x4.json")) == example_layout("Flax guide's MLP, Auto axes")
    assert set(EXAMPLES) == {"Flax guide's MLP, Auto axes", "Transformer, Explicit axes"}
