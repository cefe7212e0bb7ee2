"""AppTest of the Arrays page: the guide's matmul preset, the other presets, a bad expression, a planned mesh, a timing."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from explorer.ops.op_spec import PRESETS
from tests.pages.test_app import plain
from tests.paths import APP


@pytest.fixture
def page():
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page("views/3_Arrays.py")
    at.run()
    assert not at.exception
    return at


def output_line(at) -> str:
    return next(m.value for m in at.markdown if "chose" in m.value)


def test_matmul_preset_shows_xlas_choice_and_no_collectives(page):
    assert not page.exception and not page.error
    assert page.text_input(key="op_expr").value == "jnp.dot(y, z)"
    assert "**XLA chose `P('a', 'b')`** for the float32[8192, 8192] result" in output_line(page)
    assert any("No collectives" in s.value for s in page.success)
    assert page.query_params["arrays"] == "y:8192x8192:float32:a,-;z:8192x8192:float32:-,b"  # shareable: the address carries it
    assert any(m.value == "**Devices:** 8 × cpu (simulated)" for m in page.sidebar.markdown)  # as the other pages say it


@pytest.mark.parametrize(
    "preset,chosen",
    [
        ("sin of a 4x2-sharded array", "P('x', 'y')"),
        ("constrain to a 2x4 spec", "P('y', 'x')"),
        ("constrain to replicated", "P(None, None)"),
    ],
)
def test_presets_load(page, preset, chosen):
    page.selectbox(key="op_preset_choice").select(preset).run()
    page.button(key="arrays_load_preset").click().run()
    assert not page.exception and not page.error
    assert f"`{chosen}`" in output_line(page)
    assert page.text_input(key="op_expr").value == PRESETS[preset][1]["expr"]


def test_a_refused_expression_is_a_message_not_a_traceback(page):
    page.text_input(key="op_expr").input("__import__('os').system('true')").run()
    assert not page.exception
    assert [plain(e.value) for e in page.error] == [
        "expr: '__import__' is refused: not an allowed function; allowed: jnp.sin, jnp.cos, jnp.exp, jnp.tanh, jnp.dot, "
        "jnp.matmul, jnp.transpose, jnp.sum, jnp.mean, jnp.max, jnp.reshape, jax.nn.relu"
    ]


def test_a_planned_mesh_is_analyzed_and_cannot_be_timed(page):
    page.text_input(key="op_mesh_shape").input("16, 16").run()
    assert not page.exception and not page.error
    assert "JAX's type-level propagation chose `P('a', 'b')`" in output_line(page)
    assert any("cannot be timed" in i.value for i in page.info)
    assert not [b for b in page.button if b.key == "arrays_time_button"]


def test_an_op_link_opens_the_op_and_a_bad_one_says_why():
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"mesh": "2x4", "axes": "p,q", "arrays": "w:64x32:bfloat16:q,p", "expr": "jnp.tanh(w).T", "out": ""})
    at.switch_page("views/3_Arrays.py")
    at.run()
    assert not at.exception and not at.error
    assert at.text_input(key="op_spec_0").value == "q, p" and at.checkbox(key="op_constrain").value
    assert "`P(None, None)`" in output_line(at)
    bad = AppTest.from_file(APP, default_timeout=300)
    bad.query_params.update({"mesh": "2x4", "axes": "p,q", "arrays": "w:64:float32:-", "expr": "w.__class__"})
    bad.switch_page("views/3_Arrays.py")
    bad.run()
    assert not bad.exception
    assert any("could not be opened" in plain(e.value) and "'w.__class__' is refused" in plain(e.value) for e in bad.error)
    assert bad.text_input(key="op_expr").value == "jnp.dot(y, z)"
    kept = [c.value for c in bad.sidebar.code if "__class__" in c.value]  # the link sent is not lost
    assert kept and "expr=w.__class__" in kept[0] and "arrays=w:64:float32:-" in kept[0]


def test_the_layouts_mesh_can_be_used(page):
    page.radio(key="op_mesh_source").set_value("the layout's mesh (Layout page sidebar)").run()
    assert not page.exception
    assert any("arrays.y.spec[0]: 'a' is not an axis of the mesh ['data', 'model']" in plain(e.value) for e in page.error)
    page.text_input(key="op_spec_0").input("data, None").run()
    page.text_input(key="op_spec_1").input("None, model").run()
    assert "`P('data', 'model')`" in output_line(page)


def test_times_a_small_matmul_to_completion(page):
    page.text_input(key="op_shape_0").input("128, 128").run()
    page.text_input(key="op_shape_1").input("128, 128").run()
    page.number_input(key="op_steps").set_value(3).run()
    page.button(key="arrays_time_button").click().run()
    assert not page.exception and not page.error
    metrics = {m.label: m.value for m in page.metric}
    assert re.fullmatch(r"\d+(\.\d+)? (s|ms|µs)", metrics["Sharded (8 devices), median"]) and metrics["Speedup"].endswith("×")


def test_a_stopped_timing_keeps_its_calls(page):
    from explorer.ops.op_spec import MATMUL_PRESET, parse_op
    from explorer.ops.ops import op_key

    key = op_key(parse_op(PRESETS[MATMUL_PRESET][1]))
    page.session_state["arrays_partial"] = {"key": key, "samples": {"sharded": [1.5, 1.25], "single": []}}
    page.run()
    assert not page.exception
    assert any("Stopped after 2 sharded and 0 one-device call(s)." == i.value for i in page.info)


def test_a_planned_mesh_where_jax_cannot_decide_says_why(page):
    page.text_input(key="op_mesh_shape").input("16, 16").run()
    page.text_input(key="op_spec_0").input("None, a").run()
    page.text_input(key="op_spec_1").input("a, None").run()
    assert not page.exception and not page.error
    assert any(i.value.startswith("No sharding known.") and "cannot decide" in i.value for i in page.info)


@pytest.mark.parametrize("expr,quoted", [("__import__('os')", "'__import__'"), ("y.__class__", "'y.__class__'")])
def test_a_refused_expression_is_quoted_verbatim(page, expr, quoted):
    """Issue 18 item 7: Markdown never eats what the user typed (``**import**`` in bold, ``y.class``)."""
    page.text_input(key="op_expr").input(expr).run()
    assert not page.exception
    message = page.get("error")[0].value
    assert quoted in plain(message), message
    assert "__" not in message  # every underscore escaped, so none starts emphasis


def test_a_bad_expression_keeps_the_grids_of_valid_arrays(page):
    """Issue 18 item 9: an error in the op leaves the valid arrays' grids on screen."""
    page.text_input(key="op_expr").input("jnp.dot(y, ").run()
    assert not page.exception and page.error
    assert len(page.get("plotly_chart")) == 2  # y and z, each alone
