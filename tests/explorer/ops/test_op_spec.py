"""Op specs: bad input named by field and value, spec text as a person types it, the presets and the example files."""

from __future__ import annotations

import json

import pytest

from explorer.ops import op_spec
from explorer.errors import ExplorerError
from explorer.ops.op_spec import PRESETS, parse_op
from tests.paths import ROOT


@pytest.mark.parametrize(
    "data,field",
    [
        ({"arrays": {"a": {"shape": [4], "spec": ["z"]}}}, r"arrays\.a\.spec\[0\]: 'z'"),
        ({"arrays": {"a": {"shape": [4], "dtype": "float64"}}}, r"arrays\.a\.dtype: 'float64'"),
        ({"arrays": {"a": {"shape": [4, 0]}}}, r"arrays\.a\.shape: \[4, 0\]"),
        ({"arrays": {"jnp": {"shape": [4]}}, "expr": "jnp"}, r"arrays\['jnp'\]: 'jnp'"),
        ({"arrays": {"a": {"shape": [4], "spec": ["x", "y"]}}}, r"arrays\.a\.spec: \['x', 'y'\] has 2 entries"),
        ({"arrays": {"a": {"shape": [4, 4], "spec": [["x", "y"], "y"]}}}, r"arrays\.a\.spec\[1\]: 'y' is used by two"),
        ({"out_spec": ["q"]}, r"out_spec\[0\]: 'q'"),
        ({"extra": 1}, r"extra: 1 is not a field"),
        ({"arrays": {}}, r"arrays: \{\}"),
    ],
)
def test_bad_specs_name_the_field_and_value(data, field):
    base = {"mesh": {"shape": [4, 2], "axes": ["x", "y"]}, "arrays": {"a": {"shape": [4]}}, "expr": "a"}
    with pytest.raises(ExplorerError, match=field):
        parse_op(base | data)


@pytest.mark.parametrize(
    "text,spec",
    [
        ("a, None", ["a", None]),
        ("P('a', None)", ["a", None]),
        ("(x, y), -", [["x", "y"], None]),
        ("x*y", [["x", "y"]]),
        ("", []),
        ("P()", []),
        ("P(('x', 'y'),)", [["x", "y"]]),
        ("-, y", [None, "y"]),
    ],
)
def test_spec_text_as_typed(text, spec):
    assert op_spec.parse_spec_text("f", text) == spec
    assert op_spec.parse_spec_text("f", op_spec.spec_input_text(op_spec.ArraySpec(shape=[1] * len(spec), spec=spec).spec)) == spec


@pytest.mark.parametrize("text", ["a, (b", "a b", "a, , b", "x)"])
def test_bad_spec_text_is_named(text):
    with pytest.raises(ExplorerError, match=r"^f: "):
        op_spec.parse_spec_text("f", text)


def test_the_example_ops_folder_holds_the_presets():
    folder = ROOT / "examples" / "ops"
    found = {json.dumps(json.loads(path.read_text()), sort_keys=True) for path in folder.glob("*.json")}
    assert found == {json.dumps(data, sort_keys=True) for _, data in PRESETS.values()}
