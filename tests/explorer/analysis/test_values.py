"""The per-value view's plain-data side (``explorer/analysis/values.py``): search, grouping, the spec as JAX prints it, JSON.
The values themselves are read from real programs in ``tests/explorer/reading/test_types.py``."""

from jax.sharding import PartitionSpec

from explorer.reading import TypedValue
from explorer.analysis.values import grouped, matching, spec_text, value_to_dict


def _value(
    index,
    op="dot_general",
    spec=("data", "model"),
    unreduced=(),
    reduced=(),
    source="model.py:12",
    function="Mlp.__call__",
    communication="",
):
    return TypedValue(
        index, op, (8, 64), "float32", spec, unreduced, reduced, "f32[8@data,64@model]", source, function, "", 1, False, communication
    )


def test_the_spec_is_printed_as_jax_prints_it_unreduced_and_reduced_axes_included():
    assert spec_text(_value(0)) == repr(PartitionSpec("data", "model"))
    partial = _value(0, spec=("data", None), unreduced=("model",))
    assert spec_text(partial) == repr(PartitionSpec("data", None, unreduced={"model"}))
    assert "unreduced={'model'}" in spec_text(partial)
    assert spec_text(_value(0, spec=(None,), reduced=("data",))) == repr(PartitionSpec(None, reduced={"data"}))


def test_a_search_matches_every_word_anywhere_and_communication_only_keeps_the_marked_values():
    values = [
        _value(0),
        _value(1, op="reshard", communication="reshard P('data',) -> P('model',)"),
        _value(2, spec=("data", None), unreduced=("model",), source="attn.py:40", function="Attention.__call__"),
    ]
    assert [v.index for v in matching(values, "MLP dot")] == [0]
    assert [v.index for v in matching(values, "unreduced")] == [2]  # the printed spec is searched too
    assert [v.index for v in matching(values, "")] == [0, 1, 2]
    assert [v.index for v in matching(values, "", communication_only=True)] == [1]


def test_values_are_grouped_by_where_they_were_computed_in_order_of_first_appearance():
    values = [
        _value(0),
        _value(1, source="attn.py:40", function="Attention.__call__"),
        _value(2),
        _value(3, communication="contraction over a dimension both operands shard: all-reduce over 'model'"),
    ]
    groups = grouped(values)
    assert [len(g.values) for g in groups] == [3, 1]
    assert groups[0].where == values[0].where and groups[0].communicating == 1


def test_a_value_in_json_writes_tuples_of_axes_as_lists():
    data = value_to_dict(_value(5, spec=(("data", "model"), None), unreduced=("x",)))
    assert data["spec"] == [["data", "model"], None] and data["unreduced"] == ["x"] and data["index"] == 5
    assert data["shape"] == [8, 64] and data["type"] == "f32[8@data,64@model]" and data["runs_per_step"] == 1
