"""Explicit axes through ``analyze`` (``explorer/reading/types.py`` reads every value's type; the stages' Explicit
branch the state's): every spec from its value's type, checked against ``tests/ground_truth_explicit.py`` (JAX and
Flax alone), on real models written for Explicit axes and small ones; the axis types in files, links and the command
line."""

import json
import re

import pytest

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from tests import explicit_models, ground_truth_explicit as truth
from tests.explicit_models import ALLOWED, CLASSES, EXTERNAL, explicit_layout as layout
from tests.external import factories


@pytest.fixture(autouse=True)
def allow(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ALLOWED)


# (factory, options, mesh shape, axes, rules, the inputs' specs as the ground truth types them)
CASES = {
    "gemma-2x4": (f"{EXTERNAL}:make_flax_gemma", {}, (2, 4), ("data", "model"), (), [(), (), ()]),
    "gemma-2x2x2": (
        f"{EXTERNAL}:make_flax_gemma",
        {"fsdp_axis": "fsdp", "tensor_axis": "model"},
        (2, 2, 2),
        ("data", "fsdp", "model"),
        (),
        [(), (), ()],
    ),
    "siglip-2x4": (f"{EXTERNAL}:make_bonsai_siglip", {}, (2, 4), ("data", "model"), (), [()]),
    "siglip-2x2x2": (
        f"{EXTERNAL}:make_bonsai_siglip",
        {"fsdp_axis": "fsdp", "tp_axis": "model"},
        (2, 2, 2),
        ("data", "fsdp", "model"),
        (),
        [()],
    ),
    "qwen3-2x4": (f"{EXTERNAL}:make_bonsai_qwen3", {}, (2, 4), ("data", "model"), (), [(), ()]),
    "type-over-metadata": (f"{CLASSES}:make_type_over_metadata", {}, (2, 4), ("data", "model"), (), [("data", None)]),
    "reshard-contract": (f"{CLASSES}:make_reshard_and_contract", {}, (2, 4), ("data", "model"), (("batch", "data"),), [("data", None)]),
    "logical": (
        f"{CLASSES}:make_logical_on_explicit",
        {},
        (2, 4),
        ("data", "model"),
        (("batch", "data"), ("embed", None), ("hidden", "model")),
        [("data", None)],
    ),
    "scanned": (f"{CLASSES}:make_scanned_layers", {"layers": 3}, (2, 4), ("data", "model"), (), [("data", None)]),
}


def _built(factory: str, options: dict):
    module, name = factory.split(":")
    source = factories if module == EXTERNAL else explicit_models
    return getattr(source, name)(**options)


def _spec(entries) -> tuple:
    return truth.normal(entries, len(entries))


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_specs_are_the_types_flax_builds(case):
    factory, options, shape, axes, rules, _ = CASES[case]
    report = analyze(layout(factory, shape, axes, rules, options))
    builder, _, _ = _built(factory, options)
    params, optimizer = truth.state_specs(builder, truth.mesh(shape, axes), rules)
    shown = {a.path: _spec(a.spec) for a in report.arrays if a.kind in ("param", "opt_state")}
    expected = params | optimizer
    assert set(shown) == set(expected)
    assert shown == expected
    materialised = truth.materialised_specs(builder, truth.mesh(shape, axes), rules)
    assert {p: s for p, s in shown.items() if p in materialised} == materialised


@pytest.mark.parametrize("case", sorted(CASES))
def test_activation_rows_are_the_jaxprs_sharding_equations(case):
    factory, options, shape, axes, rules, input_specs = CASES[case]
    report = analyze(layout(factory, shape, axes, rules, options))
    builder, inputs, _ = _built(factory, options)
    the_mesh = truth.mesh(shape, axes)
    rows = [(a.shape, _spec(a.spec), a.runs_per_step) for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    expected = truth.forward_rows(builder, inputs, the_mesh, input_specs, rules)
    assert rows == expected
    assert rows, "every model here sets some sharding in its forward pass"
    output = report.array("activations/output")
    assert _spec(output.spec) == truth.forward_output_spec(builder, inputs, the_mesh, input_specs, rules)


def test_a_reshard_and_a_contraction_are_marked_as_communication():
    report = analyze(layout(f"{CLASSES}:make_reshard_and_contract", (2, 4), ("data", "model"), [("batch", "data")]))
    marked = [v for v in report.values if v.communication]
    assert [v.op for v in marked] == ["dot_general", "reshard"]
    assert marked[0].communication.endswith("reduce-scatter over 'model'")
    assert marked[1].communication == "reshard P('data', 'model') -> P('data', None)"
    lines = {v.op: v.source for v in report.values if v.sets_sharding}
    source = open(explicit_models.__file__).read().splitlines()
    assert "reshard(y" in source[int(lines["reshard"].split(":")[1]) - 1]
    assert all(v.source.startswith("explicit_models.py:") for v in marked)


def test_logical_rules_resolve_variable_metadata_and_call_time_out_sharding_takes_mesh_axes():
    rules = [("batch", "data"), ("embed", None), ("hidden", "model")]
    report = analyze(layout(f"{CLASSES}:make_logical_on_explicit", (2, 4), ("data", "model"), rules))
    kernel = report.array("kernel")
    assert kernel.logical_axes == ("embed", "hidden") and kernel.spec == (None, "model")
    assert [d.rule for d in kernel.trace] == [1, 2]
    swapped = analyze(
        layout(f"{CLASSES}:make_logical_on_explicit", (2, 4), ("data", "model"), [("batch", "data"), ("embed", "model"), ("hidden", None)])
    )
    assert swapped.array("kernel").spec == ("model", None)
    assert swapped.array("inputs/x").spec == ("data", None)
    row = next(a for a in swapped.arrays if a.kind == "activation" and a.path != "activations/output")
    assert row.spec == ("data", "model")  # the call's out_sharding, whatever the rules say


def test_scanned_layers_run_once_per_layer():
    report = analyze(layout(f"{CLASSES}:make_scanned_layers", (2, 4), ("data", "model"), options={"layers": 5}))
    rows = [a for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    assert [a.runs_per_step for a in rows] == [5, 5]
    assert report.totals.activation_bytes == sum(a.bytes_per_device * 5 for a in rows)


def test_the_values_view_holds_every_value_with_its_type():
    report = analyze(layout(f"{EXTERNAL}:make_flax_gemma", (2, 4), ("data", "model")))
    assert len(report.values) > 100
    assert all(re.fullmatch(r"[a-z0-9]+\[[^\]]*\].*", v.type_text) for v in report.values)
    assert any("@data" in v.type_text and "@model" in v.type_text for v in report.values)
    assert json.dumps([v.type_text for v in report.values])  # plain data


# --- a layout's axis types, everywhere it goes ------------------------------------------------------------------


def test_axis_types_default_to_auto_and_old_files_keep_their_meaning(seed_dict):
    from explorer.layout import parse_layout as parse

    old = parse(seed_dict)
    assert old.mesh.types == ("auto", "auto") and not old.mesh.explicit and "axis_types" not in old.to_dict()["mesh"]
    seed_dict["mesh"]["axis_types"] = ["auto", "auto"]
    assert parse(seed_dict) == old  # one spelling per meaning
    seed_dict["mesh"]["axis_types"] = ["explicit", "auto"]
    mixed = parse(seed_dict)
    assert mixed.mesh.mixed and mixed.to_dict()["mesh"]["axis_types"] == ["explicit", "auto"]


@pytest.mark.parametrize(
    "types, field, quoted, fragment",
    [
        (["explicit"], "mesh.axis_types", "['explicit']", "has 1 entry but the mesh has 2 axes"),
        (["explicit", "manual"], "mesh.axis_types[1]", "'manual'", 'use "auto" or "explicit"'),
        ("explicit", "mesh.axis_types", "'explicit'", "is not a list"),
    ],
)
def test_bad_axis_types_name_the_field_and_the_value(seed_dict, types, field, quoted, fragment):
    seed_dict["mesh"]["axis_types"] = types
    with pytest.raises(ExplorerError) as caught:
        parse_layout(seed_dict)
    assert caught.value.field == field and str(caught.value).startswith(f"{field}: {quoted} ") and fragment in str(caught.value)


def test_links_files_code_and_yaml_carry_the_axis_types():
    from explorer.sharing import exports, share
    from explorer.layout import load_layout_json

    explicit = layout(f"{CLASSES}:make_type_over_metadata", (2, 4), ("data", "model"))
    query = share.layout_to_query(explicit)
    assert "types=explicit,explicit" in query and share.layout_from_link(query) == explicit
    assert load_layout_json(explicit.to_json()) == explicit
    assert "axis_types=(AxisType.Explicit,) * 2" in exports.python_snippet(explicit)
    assert "shard_mode: explicit" in exports.maxtext_yaml(explicit)
    mixed = layout(f"{CLASSES}:make_type_over_metadata", (2, 4), ("data", "model"), types=["auto", "explicit"])
    assert "axis_types=(AxisType.Auto, AxisType.Explicit)" in exports.python_snippet(mixed)
    assert share.layout_from_link(share.layout_to_query(mixed)) == mixed
    with pytest.raises(ExplorerError, match=r"mesh.axis_types\[0\]: 'sideways'"):
        share.layout_from_link(query.replace("types=explicit,explicit", "types=sideways,explicit"))


def test_the_command_line_prints_the_values_view_and_refuses_it_on_auto_axes(tmp_path, monkeypatch):
    import subprocess
    import sys

    path = tmp_path / "explicit.json"
    path.write_text(layout(f"{CLASSES}:make_reshard_and_contract", (2, 4), ("data", "model"), [("batch", "data")]).to_json())
    env = {**__import__("os").environ, "EXPLORER_ALLOWED_FACTORIES": ALLOWED}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "explorer", *args], capture_output=True, text=True, env=env, timeout=300)

    shown = run("analyze", str(path), "--values", "reshard ->")
    assert shown.returncode == 0, shown.stderr
    assert "reshard P('data', 'model') -> P('data', None)" in shown.stdout and "dot_general" not in shown.stdout
    data = json.loads(run("analyze", str(path), "--json", "--values").stdout)
    assert [v["op"] for v in data["values"] if v["communication"]] == ["dot_general", "reshard"]
    assert data["layout"]["mesh"]["axis_types"] == ["explicit", "explicit"]
    auto = tmp_path / "auto.json"
    auto.write_text(json.dumps({**json.loads(path.read_text()), "mesh": {"shape": [2, 4], "axes": ["data", "model"]}}))
    refused = run("analyze", str(auto), "--values")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
