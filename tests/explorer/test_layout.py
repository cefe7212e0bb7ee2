"""Layout validation: one clear message naming the field and the value, per class of bad input."""

import dataclasses
import json
import sys

import pytest

from explorer import models
from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, Layout, layout_errors, load_layout_json, parse_layout


def refuse(data, field, *fragments):
    with pytest.raises(ExplorerError) as caught:
        parse_layout(data)
    error = caught.value
    assert error.field == field, str(error)
    for fragment in fragments:
        assert fragment in str(error), str(error)
    return error


def test_seed_layout_is_valid_and_filled_with_defaults(seed_dict):
    del seed_dict["model"]["options"]["scan"]
    layout = parse_layout(seed_dict)
    assert isinstance(layout, Layout)
    assert layout.model.options == {"batch": 8, "layers": 4, "depth": 1024, "scan": False}
    assert layout.rules_for_flax() == (("batch", "data"), ("hidden", "model"))


def test_shape_and_axes_length_mismatch(seed_dict):
    seed_dict["mesh"]["axes"] = ["data"]
    refuse(seed_dict, "mesh.axes", "['data']", "has 1 name but", "[2, 4] has 2 axes")


@pytest.mark.parametrize("size", [0, -4, 2.5, "4", True])
def test_mesh_sizes_must_be_positive_integers(seed_dict, size):
    seed_dict["mesh"]["shape"] = [2, size]
    error = refuse(seed_dict, "mesh.shape[1]")
    assert repr(size) in str(error)


@pytest.mark.parametrize(
    "part, message", [("shape", "mesh.shape: [] is empty; a mesh shape is sizes like [2, 4]"), ("axes", "mesh.axes: [] is empty; one name")]
)
def test_an_empty_mesh_shape_or_axes_says_so_in_plain_words(seed_dict, part, message):
    """An empty Shape box said "mesh.shape: [] tuple should have at least 1 item after validation, not 0" (pydantic's)."""
    seed_dict["mesh"][part] = []
    error = refuse(seed_dict, f"mesh.{part}")
    assert str(error).startswith(message) and "after validation" not in str(error)


def test_absurd_mesh_is_refused(seed_dict):
    seed_dict["mesh"]["shape"] = [1024, 1024]
    refuse(seed_dict, "mesh.shape", "1,048,576 devices", "65,536")


def test_duplicate_axis_names(seed_dict):
    seed_dict["mesh"]["axes"] = ["data", "data"]
    refuse(seed_dict, "mesh.axes", "names the axis 'data' twice")


@pytest.mark.parametrize("rule", [["batch"], ["batch", "data", "model"], "batch", 7])
def test_rule_that_is_not_a_pair(seed_dict, rule):
    seed_dict["rules"][1] = rule
    refuse(seed_dict, "rules[1]", "is not a [logical name, mesh axes] pair")


def test_rule_naming_a_missing_mesh_axis(seed_dict):
    seed_dict["rules"][1] = ["hidden", "tensor"]
    refuse(seed_dict, "rules[1]", "'tensor'", "['data', 'model'] lacks")


def test_rule_naming_a_mesh_axis_twice(seed_dict):
    seed_dict["rules"][0] = ["batch", ["data", "data"]]
    refuse(seed_dict, "rules[0]", "names a mesh axis twice")


def test_unknown_model(seed_dict):
    seed_dict["model"]["name"] = "resnet"
    refuse(seed_dict, "model.name", "'resnet'", "['mlp', 'nnx-guide', 'transformer']")


def test_unknown_model_option(seed_dict):
    seed_dict["model"]["options"]["width"] = 3
    refuse(seed_dict, "model.options.width", "not an option of model 'mlp'", "batch, layers, depth, scan")


@pytest.mark.parametrize("value", ["eight", 8.5, None, [8]])
def test_ill_typed_model_option(seed_dict, value):
    seed_dict["model"]["options"]["batch"] = value
    refuse(seed_dict, "model.options.batch", repr(value))


def refusing_build(options):
    raise AssertionError(f"built a model with {options}")


def test_model_too_large_is_refused_before_any_trace(seed_dict, monkeypatch):
    """What a page does with a draft: validate, then analyze. A refused model is never built or traced."""
    monkeypatch.setitem(models.MODELS, "mlp", dataclasses.replace(models.MODELS["mlp"], builder=f"{__name__}:refusing_build"))
    with pytest.raises(AssertionError, match="built a model"):  # the stand-in is what analysis would build
        analyze(parse_layout({**seed_dict, "model": {"name": "mlp", "options": {"layers": 5, "depth": 48}}}))
    seed_dict["model"]["options"]["layers"] = 1_000_000_000
    with pytest.raises(ExplorerError) as caught:
        analyze(parse_layout(seed_dict))
    assert caught.value.field == "model.options.layers"
    assert "1000000000" in str(caught.value) and "less than or equal to 512" in str(caught.value)


def test_transformer_heads_must_group_kv_heads(seed_dict):
    seed_dict["model"] = {"name": "transformer", "options": {"heads": 6, "kv_heads": 4}}
    refuse(seed_dict, "model.options.kv_heads", "4 must divide heads (6) evenly")


def test_factory_not_allow_listed_is_refused_without_import(seed_dict, monkeypatch):
    monkeypatch.delenv(models.ALLOW_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "tests.factory_module", raising=False)
    seed_dict["model"] = {"name": "tests.factory_module:make_model", "options": {}}
    refuse(seed_dict, "model.name", "not allow-listed", models.ALLOW_ENV)
    assert "tests.factory_module" not in sys.modules


def test_missing_and_extra_fields(seed_dict):
    del seed_dict["mesh"]
    refuse(seed_dict, "mesh", "is missing")
    refuse({**json.loads(json.dumps(seed_dict)), "mesh": {"shape": [1], "axes": ["a"]}, "colour": 1}, "colour")


def test_bad_json_names_the_file_and_problem():
    with pytest.raises(ExplorerError, match="not valid JSON"):
        load_layout_json("{not json")


def test_layout_round_trips_through_its_file_form(seed_dict):
    layout = parse_layout(seed_dict)
    assert load_layout_json(layout.to_json()) == layout


def test_every_invalid_field_is_reported_at_once(seed_dict):
    seed_dict["name"] = ""
    seed_dict["mesh"]["shape"] = [2, "x-4"]
    seed_dict["rules"] = [["batch", "data"], ["hidden", "tensor"]]  # checked against the axes, whatever the shape
    seed_dict["model"]["options"].update(batch=0, depth="wide")
    errors = layout_errors(seed_dict)
    assert [e.field for e in errors] == ["name", "mesh.shape[1]", "rules[1]", "model.options.batch", "model.options.depth"]
    assert "'x-4' is not a positive whole number" in str(errors[1])
    with pytest.raises(ExplorerError) as caught:
        parse_layout(seed_dict)
    assert str(caught.value) in [str(e) for e in errors]
    assert layout_errors(SEED_LAYOUT) == ()


def test_mesh_dcn_says_how_many_slices_each_axis_spans_and_old_files_stay_valid():
    data = json.loads(json.dumps(SEED_LAYOUT))
    assert parse_layout(data).mesh.dcn is None and "dcn" not in parse_layout(data).to_dict()["mesh"]
    data["mesh"]["dcn"] = [2, 1]
    layout = parse_layout(data)
    assert layout.mesh.dcn == (2, 1) and layout.to_dict()["mesh"]["dcn"] == [2, 1] and parse_layout(layout.to_dict()) == layout


@pytest.mark.parametrize(
    "dcn, field, says",
    [
        ([3, 1], "mesh.dcn", "spreads axis 'data' (2) over 3 slices; 3 does not divide 2"),
        ([2], "mesh.dcn", "has 1 entry but the mesh has 2 axes"),
        ([0, 1], "mesh.dcn[0]", "is not a positive whole number of slices"),
        ([True, 1], "mesh.dcn[0]", "is not a positive whole number of slices"),
        ("2x1", "mesh.dcn", "is not a list"),
    ],
)
def test_a_bad_mesh_dcn_is_refused_naming_the_field_and_value(dcn, field, says):
    data = json.loads(json.dumps(SEED_LAYOUT))
    data["mesh"]["dcn"] = dcn
    with pytest.raises(ExplorerError) as error:
        parse_layout(data)
    assert error.value.field == field and says in str(error.value)
