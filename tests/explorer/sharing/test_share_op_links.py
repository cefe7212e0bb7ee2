"""Op links: readable, round-trip every spec, and mangled ones are refused with a message (fuzzed)."""

from urllib.parse import parse_qsl

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.errors import ExplorerError
from explorer.ops.op_spec import PRESETS, parse_op
from explorer.sharing.share import OP_PARAMS, is_op_link, op_to_query, params_to_op
from tests.explorer.ops.test_ops import random_ops


def from_query(query):
    return params_to_op(dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)))


def test_the_link_is_readable():
    op = parse_op(PRESETS["dot of row- and column-sharded"][1])
    assert op_to_query(op) == "?mesh=4x2&axes=a,b&arrays=y:8192x8192:float32:a,-;z:8192x8192:float32:-,b&expr=jnp.dot(y,%20z)"
    replicated = parse_op(PRESETS["constrain to replicated"][1])
    assert op_to_query(replicated).endswith("&expr=x%20%2B%201&out=")  # out= empty: P(); no out: XLA chooses


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_round_trip(preset):
    op = parse_op(PRESETS[preset][1])
    assert from_query(op_to_query(op)) == op


def test_odd_names_and_multi_axis_specs_round_trip():
    op = parse_op(
        {
            "mesh": {"shape": [2, 2, 2], "axes": ["data-1", "fsdp_2", "m"]},
            "arrays": {"x_1": {"shape": [8, 4, 2], "dtype": "bfloat16", "spec": [["data-1", "fsdp_2"], None, "m"]}, "s": {"shape": []}},
            "expr": "jnp.sum(x_1, axis=(0, 2)) * s + 1e-3",
            "out_spec": [["m", "data-1"]],
        }
    )
    query = op_to_query(op)
    assert "data-1*fsdp_2,-,m" in query and "out=m*data-1" in query
    assert from_query(query) == op


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_ops())
def test_random_ops_round_trip(data):
    op = parse_op(data)
    assert from_query(op_to_query(op)) == op


PIECES = st.sampled_from(list("ax1:;,-*()+ %._'\"[]{}=\\") + ["jnp.sin(a)", "__import__", "8192", "float32", "4x2", "a:8:float32:-"])
TEXT = st.lists(PIECES, max_size=12).map("".join) | st.text(max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(OP_PARAMS + ("model", "junk")), TEXT, max_size=6))
def test_mangled_links_only_ever_raise_explorer_error(params):
    try:
        params_to_op(params)
    except ExplorerError as error:
        assert str(error).split(":")[0]  # names a field
    assert is_op_link(params) == ("arrays" in params or "expr" in params)


@pytest.mark.parametrize(
    "query,message",
    [
        ("?mesh=4x2&axes=a,b&expr=a", "link: .* has no 'arrays' parameter"),
        ("?mesh=4x2&axes=a,b&arrays=a:8x8:float32&expr=a", "item 0: 'a:8x8:float32' is not name:shape:dtype:spec"),
        ("?mesh=4x2&axes=a,b&arrays=a:8xeight:float32:-&expr=a", "'8xeight' is not sizes"),
        ("?mesh=4x2&axes=a,b&arrays=a:8:float32:q&expr=a", r"arrays\.a\.spec\[0\]: 'q' is not an axis"),
        ("?mesh=4x2&axes=a,b&arrays=a:8:float32:-;a:8:float32:-&expr=a", "'a' names two arrays"),
        ("?mesh=4x2&axes=a,b&arrays=a:8:float32:-&expr=__import__('os')", "expr: '__import__' is refused"),
        ("?mesh=4x2&axes=a,b&arrays=a:8:float32:a*&expr=a", "empty mesh axis name"),
    ],
)
def test_bad_links_are_named(query, message):
    with pytest.raises(ExplorerError, match=message):
        from_query(query)
