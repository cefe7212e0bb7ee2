"""AppTest: the Target box takes any target name typed into it, and a link with one bad field keeps the rest (issue 45)."""

import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.test_app import plain
from tests.paths import APP

LINK = {"name": "planned", "mesh": "4x2", "axes": "data,model", "rules": "batch:data;hidden:model", "model": "mlp"}


@pytest.fixture
def app():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    return at


def type_target(at, name: str) -> None:
    """What typing a name and Enter sends: a value outside the options (AppTest's selectbox looks its value up in its options,
    so the typed one is added there first, as the browser's box does on Enter; tests/browser/test_target_names.py types)."""
    box = at.selectbox(key="target_choice")
    box.options.append(name)
    box.set_value(name).run()


def sidebar_errors(at) -> list[str]:
    return [plain(e.value) for e in at.sidebar.error]


@pytest.mark.parametrize(
    "name, mesh, says",
    [("v5e:4x4", "4x4", "16 × TPU v5 lite"), ("h100:3x8", "3x8", "3 hosts × 8"), ("v5e-256", "16x16", "256 × TPU v5 lite")],
)
def test_a_name_typed_into_the_target_box_is_planned_for(app, name, mesh, says):
    """Issue 45 item 1: the README's v5e:4x4 gave "No results": typing filtered out the free-text entry."""
    app.text_input(key="mesh_shape_text").input(mesh).run()
    type_target(app, name)
    assert not app.exception and not [e for e in sidebar_errors(app) if e.startswith("target")]
    assert any(says in c.value for c in app.sidebar.caption), [c.value for c in app.sidebar.caption]
    assert app.button(key="target_compile_button").label == f"Compile for {name}"
    assert app.query_params["target"] == name  # the link carries what was typed


def test_a_bad_target_name_is_one_short_message_under_the_box_naming_it(app):
    type_target(app, "tpu-v9-garbage")
    assert not app.exception
    errors = sidebar_errors(app)
    assert len(errors) == 1 and errors[0].startswith("target: 'tpu-v9-garbage' is not a TPU slice name or a GPU cluster")
    assert len(errors[0]) < 200 and "v5p-16384" not in errors[0]  # not the wall of every TPU type: one short line
    assert [e.label for e in app.sidebar.expander if e.label == "Every form and listed name"]
    assert app.session_state["target_choice"] == "tpu-v9-garbage"  # what was typed is kept, to fix


def test_a_link_with_a_bad_target_opens_the_rest_of_the_layout_and_names_the_field():
    """Issue 45 item 7: ``&target=tpu-v9-garbage`` threw the whole layout away for the seed's."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(LINK | {"target": "tpu-v9-garbage"})
    at.run()
    assert not at.exception
    assert at.text_input(key="mesh_shape_text").value == "4, 2" and at.text_input(key="layout_name").value == "planned"
    said = [plain(e.value) for e in list(at.main.error) + list(at.sidebar.error) if "tpu-v9-garbage" in e.value]
    assert len(said) == 1 and said[0].startswith("The link opened without its target: target: 'tpu-v9-garbage' is not a TPU"), said
    assert "every form) — this process's devices instead. The rest" in said[0] and "The rest of the layout is the link's" in said[0]
    assert at.selectbox(key="target_choice").value == "this process's devices"


def test_a_link_with_a_bad_rule_keeps_the_other_rules_and_the_target():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(LINK | {"rules": "batch:data;hidden:nope", "target": "v5litepod-8"})
    at.run()
    assert not at.exception
    assert at.text_input(key="mesh_shape_text").value == "4, 2" and at.selectbox(key="target_choice").value == "v5litepod-8"
    said = [plain(e.value) for e in at.main.error if "could not" in e.value or "opened without" in e.value]
    assert len(said) == 1 and "without its rules: rules[1]: ['hidden', 'nope'] names mesh axis 'nope'" in said[0], said
    assert "lacks — the rule is left out." in said[0]
    assert at.session_state["rules_shown"] == [["batch", ["data"]]], at.session_state["rules_shown"]
