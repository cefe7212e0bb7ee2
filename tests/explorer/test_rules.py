"""The rule resolver against Flax Linen's own, and its trace."""

import flax.linen as nn
import pytest
from jax.sharding import PartitionSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.errors import ExplorerError
from explorer.rules import PRESETS, preset_rules, resolve
from tests.small_models import SMALL_TRANSFORMER_OPTIONS

NAMES = ["batch", "embed", "hidden", "heads", "layer", None]
MESH_AXES = ["data", "model", "pipe"]

mesh_entry = st.one_of(
    st.none(),
    st.sampled_from(MESH_AXES),
    st.lists(st.sampled_from(MESH_AXES), min_size=1, max_size=3, unique=True).map(tuple),
)
rules_strategy = st.lists(st.tuples(st.sampled_from([n for n in NAMES if n]), mesh_entry), max_size=7)
names_strategy = st.lists(st.sampled_from(NAMES), max_size=4).filter(
    lambda names: len([n for n in names if n]) == len({n for n in names if n})
)


@settings(max_examples=400, deadline=None)
@given(names=names_strategy, rules=rules_strategy)
def test_spec_equals_flax_logical_to_mesh_axes(names, rules):
    expected = nn.logical_to_mesh_axes(tuple(names), tuple(rules))
    assert PartitionSpec(*resolve(tuple(names), rules).spec) == expected


def test_priority_first_free_rule_wins_and_later_is_fallback():
    rules = (("embed", "model"), ("hidden", "model"), ("hidden", "data"))
    result = resolve(("embed", "hidden"), rules)
    assert result.spec == ("model", "data")
    embed, hidden = result.dims
    assert embed.rule == 0 and embed.status == "sharded"
    assert hidden.rule == 2
    assert [(s.rule, s.reason) for s in hidden.skipped] == [(1, "mesh-axis-taken")]
    assert "mesh axis 'model' is taken by dim 0 'embed'" in hidden.skipped[0].detail


def test_second_rule_for_a_decided_dimension_is_skipped_as_already_decided():
    rules = (("batch", "data"), ("batch", "model"))
    result = resolve(("batch", "embed"), rules)
    assert result.spec == ("data", None)
    assert [(s.rule, s.reason) for s in result.dims[0].skipped] == [(1, "already-decided")]
    assert result.dims[1].status == "unmatched"


def test_multi_axis_rule_shards_over_the_product_and_blocks_both_axes():
    rules = (("batch", ("data", "model")), ("hidden", "model"), ("hidden", "pipe"))
    result = resolve(("batch", "hidden"), rules)
    assert result.spec == (("data", "model"), "pipe")
    assert result.dims[0].mesh_axes == ("data", "model")
    assert result.dims[1].skipped[0].reason == "mesh-axis-taken"


def test_three_d_mesh_rules():
    rules = (("layer", "pipe"), ("batch", "data"), ("hidden", "model"), ("embed", "data"))
    result = resolve(("layer", "embed", "hidden"), rules)
    assert result.spec == ("pipe", "data", "model")
    assert [d.rule for d in result.dims] == [0, 3, 2]


def test_replicate_rule_decides_and_blocks_later_rules():
    rules = (("hidden", None), ("hidden", "model"))
    result = resolve(("hidden",), rules)
    assert result.spec == (None,)
    assert result.dims[0].status == "replicated-by-rule"
    assert result.dims[0].skipped[0].reason == "already-decided"


def test_explanations_name_the_rule_and_why():
    rules = (("batch", "data"), ("embed", "data"))
    dims = resolve(("batch", "embed"), rules).dims
    assert dims[0].explain(rules) == "dim 0 'batch': sharded over data by rule 0 (batch, data)"
    assert "skipped rule 1 (embed, data): mesh axis 'data' is taken by dim 0 'batch'" in dims[1].explain(rules)


def test_unannotated_array_is_replicated_with_unnamed_dims():
    result = resolve(None, (("batch", "data"),), ndim=2)
    assert result.spec == (None, None)
    assert {d.status for d in result.dims} == {"unnamed"}


def test_duplicate_logical_names_are_refused_like_flax():
    with pytest.raises(ExplorerError, match="'batch' twice"):
        resolve(("batch", "batch"), ())


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_only_name_the_given_mesh_axes(preset):
    for _, mesh in preset_rules(preset, ("data", "model")):
        assert mesh in (None, "data", "model")


def test_flax_guide_preset_is_the_guides_rules():
    assert preset_rules("flax-guide", ("data", "model")) == (("batch", "data"), ("hidden", "model"))


def _layout(preset, mesh, axes, model):
    from explorer.analysis.analyzer import logical_names
    from explorer.layout import ModelSpec, parse_layout
    from explorer.models import validate_model

    names = logical_names(validate_model(ModelSpec(**model)))
    rules = [list(r) for r in preset_rules(preset, axes, names=names)]
    return parse_layout({"name": preset, "mesh": {"shape": mesh, "axes": axes}, "rules": rules, "model": model})


SMALL_TRANSFORMER = {
    "name": "transformer",
    "options": {
        **SMALL_TRANSFORMER_OPTIONS,
    },
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize(
    "model",
    [
        {"name": "mlp", "options": {}},
        {"name": "mlp", "options": {"scan": True, "depth": 64}},
        SMALL_TRANSFORMER,
        {"name": "transformer", "options": SMALL_TRANSFORMER["options"] | {"scan": True}},
    ],
    ids=["mlp", "mlp-scan", "transformer", "transformer-scan"],
)
def test_a_preset_written_for_a_model_leaves_no_rule_unused_and_no_name_unmatched(preset, model):
    from explorer.analysis.analyzer import analyze

    report = analyze(_layout(preset, [2, 4], ["data", "model"], model))
    assert not [w.message for w in report.warnings if w.code in ("rule-unused", "name-unmatched", "indivisible")]


def test_llama_7b_with_fsdp_and_tensor_parallel_on_16x16_is_clean():
    from explorer.analysis.analyzer import analyze
    from explorer.models import MODELS

    llama = {"name": "transformer", "options": dict(MODELS["transformer"].presets["llama2-7b"])}
    report = analyze(_layout("fsdp+tensor-parallel", [16, 16], ["data", "model"], llama))
    assert report.mesh.abstract and not [w.message for w in report.warnings if w.level != "info"]
