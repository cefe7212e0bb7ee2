"""AppTest of the Layout page (app.py runs it by default): renders, reacts to rule edits, shows errors next to widgets."""

import json
import re
import sys

import pytest
from streamlit.testing.v1 import AppTest

from tests.explorer.models.test_maxtext import TINY, needs_maxtext
from tests.paths import APP

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"


@pytest.fixture
def app():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    return at


def plain(markdown: str) -> str:
    """Rendered text of Markdown that ``markdown_literal`` escaped (what a user reads)."""
    return re.sub(r"\\([\\`*_\[\]<>~$:|#.+=)-])", r"\1", markdown)


def selected_summary(at) -> str:
    return next(plain(m.value) for m in at.markdown if plain(m.value).startswith(f"**{at.session_state['selected_path']}**"))


def edit_rules(at, rules):
    """What the rules editor does on an edit: new rows, new editor key."""
    at.session_state["rules_base"] = rules
    at.session_state["rules_version"] = at.session_state["rules_version"] + 1
    at.run()


def test_default_layout_renders_the_guides_specs(app):
    assert not app.exception and not app.error
    assert app.selectbox(key="selected_path").value == KERNEL
    assert "P(None, 'model')" in selected_summary(app)
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["State / device — exact"] == "24.0 MiB"  # parameters, Adam state and inputs; activations not added
    assert (metrics["Parameters / device"], metrics["Optimizer state / device"]) == ("8.0 MiB", "16.0 MiB")
    assert not any(label.startswith("Total") for label in metrics)
    assert "seed-2x4" in app.markdown[0].value


def test_editing_a_rule_changes_the_spec_shown(app):
    edit_rules(app, [["batch", ["data"]], ["hidden", ["data"]]])
    assert not app.exception and not app.error
    assert "P(None, 'data')" in selected_summary(app)
    app.selectbox(key="selected_path").select("params/LogicalDotReluDot_0/W2").run()
    assert "P('data', None)" in selected_summary(app)


def test_applying_a_preset_changes_the_rules(app):
    app.text_input(key="mesh_axes_text").input("dp, tp").run()
    assert app.error  # the old rules name 'data' and 'model'
    app.selectbox(key="rules_preset").select("tensor-parallel").run()
    app.button(key="apply_preset").click().run()
    assert not app.exception and not app.error
    assert "P(None, 'tp')" in selected_summary(app)


def test_invalid_rule_shows_an_error_next_to_the_rules_and_no_exception(app):
    edit_rules(app, [["batch", ["data"]], ["hidden", ["tensor"]]])
    assert not app.exception
    errors = [plain(e.value) for e in app.sidebar.error]
    assert any("rules[1]" in e and "'tensor'" in e for e in errors), errors
    assert any("last valid" in w.value for w in app.warning)
    assert "P(None, 'model')" in selected_summary(app)  # the page keeps working on the last valid layout
    assert app.session_state["rules_base"][1] == ["hidden", ["tensor"]]  # the user's edit is kept


def test_invalid_mesh_shape_names_the_field(app):
    app.text_input(key="mesh_shape_text").input("2, x").run()
    assert not app.exception
    assert any("mesh.shape[1]" in plain(e.value) and "'x'" in plain(e.value) for e in app.sidebar.error)


def test_a_bad_size_beside_an_x_is_the_one_named(app):
    """Issue 45 item 8: ``2 x four`` said "'x' is not a positive whole number ... separated by ',' or 'x'"."""
    app.text_input(key="mesh_shape_text").input("2 x four").run()
    assert not app.exception
    errors = [plain(e.value) for e in app.sidebar.error if "Mesh › Shape" in plain(e.value)]
    assert len(errors) == 1 and "mesh.shape[1]: 'four' is not a positive whole number" in errors[0], errors
    assert "'x' is not" not in errors[0]


def test_every_invalid_field_is_named_where_it_was_typed(app):
    app.text_input(key="mesh_shape_text").input("2x-4").run()
    app.number_input(key="option::mlp::depth").set_value(0).run()
    app.number_input(key="option::mlp::batch").set_value(-1).run()
    assert not app.exception
    errors = [plain(e.value) for e in app.sidebar.error]
    assert errors[0].startswith("**Mesh › Shape** (you typed '2x-4'): mesh.shape[1]: -4 is not a positive whole number")
    assert "Allowed: positive whole numbers separated by ',' or 'x'" in errors[0]
    assert [e.split(": ")[1] for e in errors[1:]] == ["model.options.batch", "model.options.depth"]
    assert any("3 problems (mesh.shape[1], model.options.batch, model.options.depth)" in w.value for w in app.warning)


def test_a_bad_shape_and_a_bad_axis_name_are_both_said_at_once(app):
    app.text_input(key="mesh_shape_text").input("3x").run()
    app.text_input(key="mesh_axes_text").input("data, **model**").run()
    assert not app.exception
    errors = [plain(e.value) for e in app.sidebar.error]
    assert any("mesh.shape[0]" in e and "'3x'" in e for e in errors), errors
    assert any("mesh.axes[1]" in e and "'**model**'" in e for e in errors), errors
    assert any("2 problems (mesh.shape[0], mesh.axes[1])" in w.value for w in app.warning)


def test_indivisible_dimension_is_flagged_next_to_the_rules(app):
    app.number_input(key="option::mlp::depth").set_value(1022).run()
    assert not app.exception
    assert any("do not divide evenly" in plain(e.value) and "1022" in plain(e.value) for e in app.sidebar.error)


def test_planned_mesh_is_marked_and_drawn(app):
    app.number_input(key="option::mlp::batch").set_value(16).run()
    app.text_input(key="mesh_shape_text").input("16x16").run()
    assert not app.exception and not app.error
    assert any("Planned mesh" in i.value for i in app.sidebar.info)
    assert "256 devices" in app.markdown[0].value


def test_transformer_size_preset_on_a_planned_mesh(app):
    app.text_input(key="mesh_shape_text").input("16, 16").run()
    app.selectbox(key="model_name").select("transformer").run()
    app.selectbox(key="size_preset::transformer").select("llama2-7b").run()
    app.selectbox(key="rules_preset").select("fsdp+tensor-parallel").run()
    app.button(key="apply_preset").click().run()
    assert not app.exception
    assert "6,738" in app.markdown[0].value  # Llama-2-7B's 6.74 B parameters
    app.selectbox(key="selected_path").select("params/block_0/attention/query").run()
    assert "P('data', 'model', None)" in selected_summary(app)


def sidebar_values(at) -> dict:
    return {w.key: w.value for w in [*at.sidebar.text_input, *at.sidebar.number_input] if w.key != "library_name"}


def test_switching_pages_keeps_the_sidebar(app):
    """A widget's identity includes its page; without carrying values over, Timing opened blank fields."""
    app.text_input(key="layout_name").input("mine").run()
    app.text_input(key="mesh_shape_text").input("4, 2").run()
    app.number_input(key="option::mlp::depth").set_value(512).run()
    typed = sidebar_values(app)
    assert typed["layout_name"] == "mine" and typed["option::mlp::depth"] == 512
    for page in ("views/1_Timing.py", "views/2_Compare.py", "views/0_Layout.py"):
        app.switch_page(page).run()
        assert not app.exception and not [w for w in app.warning if "not valid" in w.value], page
        assert sidebar_values(app) == typed, page
        assert app.session_state["last_valid_layout"]["mesh"]["shape"] == [4, 2], page


def test_a_page_switch_that_drops_the_sidebars_widgets_keeps_the_layout(app):
    """In a whole-suite run the NNX journey (tests/browser/test_nnx.py) reached Compare in the same session without
    its sidebar's values, and the seed was loaded as for a new session: on a page switch Streamlit's ScriptRunner
    clears, before the new page's script runs, the widgets the switching rerun does not name, and the address bar no
    longer carries the layout. Replayed here: a rerun that stored the values under the widgets' ids (``_compact_state``,
    the first thing every rerun does) and ended before the sidebar wrote them back, then a switch that names no widget
    and has an empty query. The kept widgets' ``persist_state`` makes Streamlit keep them (before: the seed, every
    page)."""
    from streamlit.proto.WidgetStates_pb2 import WidgetStates

    app.text_input(key="layout_name").input("mine").run()
    app.text_input(key="mesh_shape_text").input("4, 2").run()
    app.number_input(key="option::mlp::depth").set_value(512).run()
    typed = sidebar_values(app)
    for page in ("views/1_Timing.py", "views/2_Compare.py", "views/0_Layout.py"):
        app._session_state._state._compact_state()  # private: AppTest cannot interrupt a rerun
        app.switch_page(page)
        app.query_params = {}  # Streamlit's navigation leaves the address bar without the layout's query
        app._run(widget_state=WidgetStates())  # private: AppTest's run() always names every widget drawn
        assert not app.exception, page
        assert sidebar_values(app) == typed, page
        assert app.session_state["last_valid_layout"]["name"] == "mine", page


def test_options_of_a_model_not_selected_are_kept(app):
    app.selectbox(key="model_name").select("transformer").run()
    app.number_input(key="option::transformer::layers").set_value(3).run()
    app.selectbox(key="model_name").select("mlp").run()
    app.selectbox(key="model_name").select("transformer").run()
    assert app.number_input(key="option::transformer::layers").value == 3
    assert not app.exception


def test_a_bad_device_count_is_a_message_not_a_traceback(monkeypatch):
    monkeypatch.setenv("EXPLORER_CPU_DEVICES", "lots")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert [plain(e.value) for e in at.error] == [
        "The app cannot start: EXPLORER_CPU_DEVICES: 'lots' is not a whole number of CPU devices. "
        "Fix the environment variable and restart the app."
    ]


def test_drawn_dimensions_follow_a_rule_edit(app):
    """Scanned kernels are (layer, embed, hidden); sharding 'layer' too makes it the drawn row dimension."""
    app.checkbox(key="option::mlp::scan").check().run()
    app.selectbox(key="selected_path").select("params/ScanLogicalDotReluDot_0/Dense_0/kernel").run()
    rows = lambda: next(s for s in app.selectbox if s.label == "Rows").value  # noqa: E731
    assert rows() == 1
    edit_rules(app, [["batch", ["data"]], ["hidden", ["model"]], ["layer", ["data"]]])
    assert not app.exception
    assert "P('data', None, 'model')" in selected_summary(app)
    assert rows() == 0


def test_a_layout_name_is_shown_as_typed_and_cannot_be_empty(app):
    app.text_input(key="layout_name").input("<b>hi</b> **bold**").run()
    assert not app.exception
    assert app.markdown[0].value.startswith(r"**\<b\>hi\</b\> \*\*bold\*\*** · mesh")
    app.text_input(key="layout_name").input("").run()
    assert not app.exception
    assert [plain(e.value) for e in app.sidebar.error] == [
        "**Layout name** (you typed nothing): name: '' string should have at least 1 character. Allowed: 1 to 120 characters."
    ]


def test_an_option_out_of_bounds_is_named_next_to_the_model(app):
    app.number_input(key="option::mlp::depth").set_value(0).run()
    assert not app.exception
    errors = [plain(e.value) for e in app.sidebar.error]
    assert errors == ["**Model › Options**: model.options.depth: 0 input should be greater than or equal to 1."], errors
    assert app.number_input(key="option::mlp::depth").value == 0  # what the user typed stays


def test_library_actions_answer_in_the_library_section(app, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    app.text_input(key="library_name").input("team seed").run()
    app.button(key="library_save").click().run()
    assert [s.value for s in app.sidebar.success] == ["Saved 'team seed'."]
    assert not app.main.success
    app.button(key="library_save").click().run()  # the same name again
    assert not app.exception
    assert any("team seed" in e.value and "exists" in e.value for e in app.sidebar.error), [plain(e.value) for e in app.sidebar.error]
    assert not app.main.error


def test_a_layout_saved_to_the_library_is_the_current_layout_by_its_new_name(app, tmp_path, monkeypatch):
    """Issue 55 item 9: after an edit and a save under a new name, the page still said "seed-2x4 (edited)"; now the layout
    on the page is the one saved, by the name it was saved under, not edited, and its link carries that name."""
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    app.number_input(key="option::mlp::depth").set_value(512).run()
    assert any("**seed-2x4** (edited)" in m.value for m in app.markdown)
    app.text_input(key="library_name").input("team fsdp").run()
    app.button(key="library_save").click().run()
    assert not app.exception and [s.value for s in app.sidebar.success] == ["Saved 'team fsdp'."]
    assert app.text_input(key="layout_name").value == "team fsdp"
    assert not any("(edited)" in m.value for m in app.markdown), [m.value for m in app.markdown if "edited" in m.value]
    assert app.query_params["name"] == "team fsdp" and app.number_input(key="option::mlp::depth").value == 512
    app.number_input(key="option::mlp::depth").set_value(256).run()  # edited again: said again, under the new name
    assert any("**team fsdp** (edited)" in m.value for m in app.markdown)


def test_a_library_name_too_long_is_refused_with_the_librarys_own_limit(app, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    app.text_input(key="library_name").input("x" * 130).run()
    app.button(key="library_save").click().run()
    assert not app.exception
    errors = [e.value for e in app.sidebar.error]
    assert len(errors) == 1 and "1-64 letters" in errors[0] and "120" not in errors[0], errors


def test_after_a_timing_xlas_peak_is_the_memory_headline(app, seed_dict):
    from explorer.layout import parse_layout
    from explorer.formats import human_bytes
    from explorer.timing.timing import time_layout
    from ui.state import TIMING_RESULTS

    import dataclasses

    seed = parse_layout(seed_dict)
    result = time_layout(seed, steps=1, warmup=0)
    # The donated step's peak is the state and a few temporaries (24.0 MiB either way at this precision): a peak of
    # XLA's that no analysis figure has tells the headline's source apart.
    result = dataclasses.replace(result, memory=result.memory | {"peak_bytes": 123 * 2**20})
    app.session_state[TIMING_RESULTS] = {seed.key: result}
    app.run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert list(metrics)[0] == "XLA peak / device"
    assert metrics["XLA peak / device"] == human_bytes(123 * 2**20) == "123.0 MiB" != metrics["State / device — exact"]


LOADED = {
    "name": "team fsdp",
    "mesh": {"shape": [4, 2], "axes": ["fsdp", "tensor"]},
    "rules": [["batch", "fsdp"], ["hidden", "tensor"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": False}},
    "target": "v5litepod-8",
}


def test_loading_from_the_library_replaces_the_whole_layout(app, tmp_path, monkeypatch):
    """Issue 18 item 1: after a load, the rules, the target and the address bar are the loaded layout's, not a mix."""
    from explorer.sharing import library
    from explorer.layout import parse_layout
    from explorer.sharing.share import layout_to_params

    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    library.save("team fsdp", parse_layout(LOADED))
    app.number_input(key="option::mlp::depth").set_value(512).run()  # an edit of the old layout, then the load
    app.selectbox(key="library_choice").select("team fsdp").run()
    app.button(key="library_load").click().run()
    assert not app.exception
    assert not app.sidebar.error, [plain(e.value) for e in app.sidebar.error]
    assert not [w for w in app.main.warning if "last valid layout" in w.value]
    assert app.session_state["rules_base"] == [["batch", ["fsdp"]], ["hidden", ["tensor"]]]
    assert app.session_state["target_choice"] == "v5litepod-8"
    assert app.number_input(key="option::mlp::depth").value == 256
    assert dict(app.query_params) == layout_to_params(parse_layout(LOADED)) | {"array": "params/LogicalDotReluDot_0/Dense_0/kernel"}
    app.text_input(key="mesh_shape_text").input("2, 4").run()  # and the next edit is not blocked
    assert not app.sidebar.error and "team fsdp** (edited)" in app.markdown[0].value


def test_a_preset_leaves_what_the_mesh_does_not_divide_unsharded_and_says_so(app):
    """Issue 18 item 3: fsdp+tensor-parallel on GPT-2 (vocab 50257) on a tensor axis of 2 gives a layout JAX accepts."""
    app.text_input(key="mesh_shape_text").input("4, 2").run()
    app.text_input(key="mesh_axes_text").input("fsdp, tensor").run()
    app.selectbox(key="model_name").select("transformer").run()
    app.selectbox(key="size_preset::transformer").select("gpt2-small").run()
    offer = [i.value for i in app.sidebar.info if "were written for" in i.value]
    assert offer and "'mlp'" in plain(offer[0]) and "'transformer'" in plain(offer[0])
    app.button(key="rules_offer_button").click().run()
    assert not app.exception
    assert not app.sidebar.error, [plain(e.value) for e in app.sidebar.error]
    assert ["vocab", []] in app.session_state["rules_base"] and ["mlp", ["tensor"]] in app.session_state["rules_base"]
    notes = [plain(i.value) for i in app.sidebar.info if "left unsharded" in i.value]
    assert notes and "'vocab' left unsharded: params/embedding dim 0 has size 50257" in notes[0]
    assert not [i for i in app.sidebar.info if "were written for" in i.value]  # the offer is taken


def test_a_preset_for_the_logical_nnx_guide_names_embed(app):
    app.selectbox(key="model_name").select("nnx-guide").run()
    app.checkbox(key="option::nnx-guide::logical").check().run()
    app.selectbox(key="rules_preset").select("tensor-parallel").run()
    app.button(key="apply_preset").click().run()
    assert not app.exception and not app.sidebar.error, [plain(e.value) for e in app.sidebar.error]
    assert "embed" in [logical for logical, _ in app.session_state["rules_base"]]
    assert not [w for w in app.main.error]


def test_compile_for_a_target_is_refused_on_a_layout_jax_refuses(app):
    """Issue 18 item 2: the NNX guide (batch 8) on 16x16: the Timing page's message, the button disabled; item 5: the state verdict."""
    app.selectbox(key="model_name").select("nnx-guide").run()
    app.text_input(key="mesh_shape_text").input("16, 16").run()
    app.selectbox(key="target_choice").select("v5litepod-256").run()
    assert not app.exception
    assert app.button(key="target_compile_button").disabled
    refusal = [plain(e.value) for e in app.main.error if "do not divide evenly" in e.value]
    assert refusal and "has size 8" in refusal[0], [plain(e.value) for e in app.main.error]
    state = [plain(i.value) for i in app.main.info if "The state alone" in i.value]
    assert state and "of the 16.0 GiB HBM per chip" in state[0] and "compile for it" in state[0]
    assert re.search(r"HBM per chip \(0\.\d+%\)", state[0]), state[0]  # a small share is not rounded to 0%


def test_on_a_gpu_the_state_is_set_against_the_memory_the_verdict_uses_with_the_whole_memory_beside_it(app):
    """Issue 38: the blue box measured the state against 79.1 GiB while the verdict used JAX's 59.3 GiB, with no word."""
    app.selectbox(key="target_choice").select("h100:1x8").run()
    assert not app.exception
    state = [plain(i.value) for i in app.main.info if "The state alone" in i.value]
    assert state and "of the 59.3 GiB JAX lets one process use per GPU (75% of its 79.1 GiB)" in state[0], state


def test_a_state_larger_than_the_chips_hbm_does_not_fit_before_any_compile(app):
    app.selectbox(key="model_name").select("transformer").run()
    app.selectbox(key="size_preset::transformer").select("llama2-7b").run()
    app.text_input(key="mesh_shape_text").input("2, 2").run()
    app.selectbox(key="target_choice").select("v5litepod-4").run()
    assert not app.exception
    verdict = [plain(e.value) for e in app.main.error if "Does not fit" in e.value]
    assert verdict and "the state alone (parameters, optimizer state, inputs) is" in verdict[0] and "HBM" in verdict[0]


def test_a_links_array_the_layout_lacks_is_said():
    """Issue 18 item 8: ``?array=does/not/exist`` is not ignored silently."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"mesh": "2x4", "axes": "data,model", "rules": "batch:data", "model": "mlp", "array": "does/not/exist"})
    at.run()
    assert not at.exception
    said = [plain(w.value) for w in at.main.warning if "does/not/exist" in plain(w.value)]
    assert said and "which this layout does not have" in said[0] and KERNEL in said[0]
    at.run()  # said once, not on every rerun
    assert not [w for w in at.main.warning if "does/not/exist" in plain(w.value)]


def test_a_link_with_several_problems_names_them_all():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"mesh": "2xfour", "axes": "data,model", "rules": "batch", "model": "mlp"})
    at.run()
    assert not at.exception
    message = plain(next(e.value for e in list(at.sidebar.error) + list(at.main.error) if "opened without" in e.value))
    assert message.startswith("The link opened without its mesh and rules:") and "'2xfour'" in message and "'batch'" in message


def test_a_links_factory_options_the_factory_refuses_are_a_message(monkeypatch):
    """Issue 17 item 9: options a factory refuses (an unexpected keyword) are an ordinary, escaped message naming them;
    the page shows the last valid layout and keeps running."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.factory_module:make_model")
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(
        {"mesh": "2x4", "axes": "data,model", "rules": "batch:data", "model": "tests.factory_module:make_model", "options": "__bogus__:1"}
    )
    at.run()
    assert not at.exception
    shown = [plain(e.value) for e in list(at.sidebar.error) + list(at.main.error)]
    refused = [text for text in shown if "were refused by tests.factory_module:make_model" in text]
    assert refused and "__bogus__" in refused[0] and "unexpected keyword argument" in refused[0]
    assert any("This page shows the last valid layout" in plain(w.value) for w in at.main.warning)


def test_a_step_link_opens_like_a_layout(monkeypatch):
    """Your own step (issue 52): a link naming the model ``step`` and its allow-listed factory opens on the Layout page
    with the factory and its options in the sidebar, the step's arguments listed with their own specs, and the address
    bar naming the factory."""
    factory = "examples.steps.ema_step:make_step"
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", factory)
    from explorer.layout import parse_layout
    from explorer.sharing.share import layout_to_params

    link = layout_to_params(
        parse_layout({"mesh": {"shape": [8], "axes": ["data"]}, "model": {"name": "step", "options": {"factory": factory, "width": 256}}})
    )
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(link)
    at.run()
    assert not at.exception
    assert at.session_state["step_factory_text"] == factory and json.loads(at.session_state["factory_options_text"]) == {"width": 256}
    assert at.session_state["last_valid_layout"]["model"] == {"name": "step", "options": {"factory": factory, "width": 256}}
    assert "examples.steps.ema_step" in at.query_params["options"] and at.query_params["model"] == "step"
    table = next(frame.value for frame in at.main.dataframe if "array" in frame.value.columns)
    rows = {row["array"]: row for row in table.to_dict("records")}
    assert "P('data', None)" in str(rows["args/0/params/layers/0/w"].values()) and len(rows) == 31


def test_a_link_that_cannot_be_opened_is_kept_verbatim_under_share_until_dismissed():
    """The address bar carries the layout shown (the seed): the link the user was sent is not lost, and a value
    with Markdown in it is shown as typed."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"mesh": "2x4", "axes": "data,model", "rules": "batch:data;hidden:**bogus**", "model": "mlp"})
    at.run()
    assert not at.exception
    kept = [c.value for c in at.sidebar.code if "bogus" in c.value]
    assert kept and "rules=batch:data;hidden:**bogus**" in kept[0] and "mesh=2x4" in kept[0]
    assert "bogus" not in str(dict(at.query_params))  # the address bar is the seed's, which is what the page shows
    said = [plain(e.value) for e in at.main.error if "opened without its rules" in e.value]
    assert said and said[0].endswith(
        "lacks — the rule is left out. The rest of the layout is the link's. The link you opened is kept under Share, to copy and fix."
    ), said
    at.run()  # still there after another rerun
    assert [c for c in at.sidebar.code if "bogus" in c.value]
    at.button(key="dismiss_refused_link").click().run()
    assert not at.exception and not [c for c in at.sidebar.code if "bogus" in c.value]


def test_the_arrays_table_shows_what_the_layout_decides_and_keeps_every_other_column_one_click_away(app):
    """At 1024 px beside the sidebar: the path shortened to its leaf, spec, shard and bytes in view; every other
    column hidden, offered in the table's Show/hide columns menu (none left out)."""
    import json

    table = next(d for d in app.dataframe if "path" in d.value.columns)
    order = list(table.proto.column_order)
    config = json.loads(table.proto.columns)
    hidden = sorted(c for c, entry in config.items() if entry.get("hidden") and c in order)  # not the index
    assert order[:4] == ["array", "spec", "shard shape", "bytes/device"]
    assert sorted(order) == sorted(table.value.columns)  # no column left out
    assert hidden == sorted(set(order) - {"array", "spec", "shard shape", "bytes/device"})
    assert "params/Logi…Dot_0/Dense_0/kernel" in set(table.value["array"])  # the leaf and the layer's number kept
    # bytes as a person reads them (issue 55: "721420288"), the exact count one click away
    assert "1.0 MiB" in set(table.value["bytes/device"]) and all(b.endswith(("B", "iB")) for b in table.value["bytes/device"])
    assert "bytes (exact)" in hidden and (table.value["bytes (exact)"] > 0).all()


def test_a_new_rule_row_starts_empty_not_none(app):
    """Issue 38: a double-click on the rules grid's empty row made a row showing `None`; a new row now starts with an empty
    name and no axes (ignored until filled in), and its mesh cell takes a typed axis as well as a picked one."""
    import json

    editor = next(d for d in app.sidebar.dataframe if "mesh axes" in d.value.columns)
    config = json.loads(editor.proto.columns)
    assert config["logical name"]["default"] == "" and config["mesh axes"]["default"] == []
    assert config["mesh axes"]["type_config"]["accept_new_options"] is True


def test_the_explicit_examples_rule_trace_speaks_of_the_semantics_of_the_call_not_of_nnx(app):
    """Issue 45 item 13: the Linen transformer's "Why this spec" said "NNX applies the rules to Variable metadata only"."""
    app.selectbox(key="example_layout").select("Transformer, Explicit axes").run()
    assert not app.exception
    [said] = [plain(c.value) for c in app.main.caption if c.value.startswith("Explicit axes: the spec shown")]
    assert "Linen's calls" in said and "NNX" not in said, said


def test_the_explicit_example_opens_the_transformer_with_its_values_view(app):
    app.selectbox(key="example_layout").select("Transformer, Explicit axes").run()
    assert not app.exception and not app.error
    # one warning, a true one: the embedding lookup under auto_axes replicates the whole table (activations/Transformer/0)
    [warning] = [plain(w.value) for w in app.warning]
    assert warning.startswith("**Largest fully replicated arrays**") and "- activations/Transformer/0 (1.0 MiB)" in warning
    assert app.session_state["mesh_explicit_axes"] == ["data", "model"] and app.session_state["model_name"] == "transformer"
    assert app.session_state["layout_name"] == "transformer-explicit-2x4"
    assert app.selectbox(key="example_layout").value is None  # the pick clears itself: the layout is the user's now
    assert "Values and their types" in [h.value for h in app.subheader]
    assert any(re.fullmatch(r"[\d,]+ value\(s\) in [\d,]+ place\(s\); [\d,]+ imply communication\.", c.value) for c in app.caption)


def test_a_model_refused_on_explicit_axes_says_why_and_the_fix_in_the_main_area(app):
    app.multiselect(key="mesh_explicit_axes").set_value(["data", "model"]).run()
    app.selectbox(key="model_name").select("nnx-guide").run()
    assert not app.exception
    main = [plain(e.value) for e in app.main.error]
    assert len(main) == 1 and main[0].startswith("**Refused on Explicit axes.** model: 'nnx-guide' is the Flax NNX guide's code")
    assert "Fix: make every mesh axis Auto" in main[0] and not main[0].endswith("..")
    sidebar = [plain(e.value) for e in app.sidebar.error]
    assert any("nnx-guide" in e and "Fix:" in e for e in sidebar) and not any(e.endswith("..") for e in sidebar)
    app.button(key="make_axes_auto_main").click().run()
    assert not app.exception and not app.error and app.session_state["mesh_explicit_axes"] == []


def test_an_error_that_ends_with_a_period_gets_no_second_one():
    def page():
        import streamlit as st

        from explorer.errors import ExplorerError
        from ui.current import describe

        st.markdown(describe(ExplorerError("model", "m", "is not found in mesh: ('data', 'model').")))
        st.markdown(describe(ExplorerError("model", "m", "has no period")))

    at = AppTest.from_function(page).run()
    assert not at.exception
    assert [plain(m.value)[-12:] for m in at.markdown] == ["', 'model').", "s no period."]


def test_on_several_slices_the_layout_page_says_which_axes_cross_the_dcn_and_its_traffic(app, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    app.selectbox(key="target_choice").select("2xv5litepod-4").run()
    assert not app.exception
    app.button(key="target_compile_button").click().run()
    assert not app.exception and not app.main.error, [plain(e.value) for e in app.main.error]
    placed = [plain(c.value) for c in app.main.caption if "Placed on 2 slices" in c.value]
    assert placed and "data (2): across 2 slices over the DCN" in placed[0] and "Across the DCN: " in placed[0], placed
    assert [plain(s.value) for s in app.main.success if "Fits" in s.value]


def test_the_slices_each_axis_spans_are_kept_from_a_link_and_edited_in_the_mesh_section():
    """A link's ``dcn`` (mesh.dcn) fills the Mesh section's "Slices per axis" and stays in the layout and the address
    bar; an edit changes the layout, and a split the mesh cannot hold is refused there, naming the field and value."""
    at = AppTest.from_file(APP, default_timeout=120)
    link = {"mesh": "4x2", "axes": "data,model", "rules": "batch:data;hidden:model", "model": "mlp", "target": "2xv5litepod-4"}
    at.query_params.update(link | {"dcn": "2x1"})
    at.run()
    assert not at.exception and not at.error
    assert at.sidebar.text_input(key="mesh_dcn_text").value == "2, 1"
    assert at.query_params["dcn"] == "2x1" and at.session_state["last_valid_layout"]["mesh"]["dcn"] == [2, 1]
    at.text_input(key="mesh_dcn_text").input("1, 2").run()
    assert not at.exception and not at.error
    assert at.query_params["dcn"] == "1x2" and at.session_state["last_valid_layout"]["mesh"]["dcn"] == [1, 2]
    at.text_input(key="mesh_dcn_text").input("3, 1").run()
    refused = [plain(e.value) for e in at.sidebar.error if "mesh.dcn" in plain(e.value)]
    assert refused and "[3, 1]" in refused[0] and "3 does not divide 4" in refused[0], refused
    assert at.session_state["mesh_dcn_text"] == "3, 1"  # the typed value is kept to fix
    assert at.session_state["last_valid_layout"]["mesh"]["dcn"] == [1, 2]


def test_the_slices_per_axis_are_offered_only_for_a_target_of_several_slices():
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(
        {"mesh": "4x2", "axes": "data,model", "rules": "batch:data;hidden:model", "model": "mlp", "target": "v5litepod-8"}
    )
    at.run()
    assert not at.exception and not at.error
    assert not [t for t in at.sidebar.text_input if t.key == "mesh_dcn_text"]
    assert "dcn" not in at.query_params


def test_a_maxtext_config_without_maxtext_says_the_install_line_and_keeps_the_keys(app, monkeypatch):
    """The Model selector's MaxText kind: the keys as KEY=VALUE lines; without MaxText installed, "Use MaxText's mesh"
    says the install line in one message, the page keeps running and the keys typed stay, on every page."""
    monkeypatch.setitem(sys.modules, "maxtext", None)  # an import of it raises ImportError, installed or not
    monkeypatch.setitem(sys.modules, "maxtext.configs", None)
    monkeypatch.setitem(sys.modules, "maxtext.configs.pyconfig", None)
    app.selectbox(key="model_name").select("maxtext").run()
    keys = "model_name=llama2-7b\nici_fsdp_parallelism=8\ncompile_topology=v5e-8"
    app.text_area(key="maxtext_keys_text").input(keys).run()
    app.button(key="maxtext_apply").click().run()
    assert not app.exception
    errors = [plain(e.value) for e in app.error]
    assert sum("pip install --no-deps -r requirements-maxtext.txt" in e for e in errors) == 1, errors
    assert app.text_area(key="maxtext_keys_text").value == keys
    for page in ("views/2_Compare.py", "views/0_Layout.py"):  # kept across pages (Compare once opened them empty)
        app.switch_page(page).run()
        assert not app.exception and app.text_area(key="maxtext_keys_text").value == keys, page
    app.text_area(key="maxtext_keys_text").input("per_device_batch_size").run()  # not KEY=VALUE: one message naming it
    assert not app.exception
    assert any("'per_device_batch_size' is not KEY=VALUE" in plain(e.value) for e in app.error)


@needs_maxtext
def test_a_maxtext_config_typed_in_the_app_is_the_compile_the_command_line_cached(app):
    """Issue 55 item 8: the app's "Compile for v5e-8" of a MaxText config compiled again (270 s) what
    ``explorer compile --maxtext ... --target v5e-8`` had just compiled. The command line's options held
    compile_topology_num_slices=1 (``--target`` writes it), the app's keys left it to base.yml's -1 (a batch of -8
    sequences); the options' normal form writes it for both, so both are one layout and one compile cache entry."""
    from explorer.__main__ import _layout_of, parse_arguments
    from explorer.compile.compile_cache import cache_key
    from explorer.hardware.targets import parse_target
    from explorer.layout import parse_layout

    cli = _layout_of(parse_arguments(["compile", "--maxtext", *TINY, "--target", "v5e-8"]), "v5e-8")
    app.selectbox(key="model_name").select("maxtext").run()
    app.text_area(key="maxtext_keys_text").input("\n".join([*TINY, "compile_topology=v5e-8"])).run()
    app.button(key="maxtext_apply").click().run()
    assert not app.exception
    shown = parse_layout(app.session_state["last_valid_layout"])
    assert shown.model.name == "maxtext" and shown.target == "v5e-8"
    assert shown.model.options == cli.model.options
    target = parse_target("v5e-8")
    assert cache_key(shown, target) == cache_key(cli, target)


def test_a_pipelines_heading_counts_its_stages_and_microbatches_and_names_repeats_only_for_a_circular_one():
    """Issue 55 item 9: the heading read "Pipeline: 2 stages × 2 microbatches × 1 repeats"."""
    at = AppTest.from_file(APP, default_timeout=180)
    options = "batch:8;seq_len:8;layers:4;d_model:16;heads:2;kv_heads:2;head_dim:8;mlp_dim:32;vocab:64"
    link = {"mesh": "2x4", "axes": "stage,data", "rules": "stage:stage;batch:data", "model": "transformer"}
    at.query_params.update(link | {"options": options + ";pipeline_stages:2;pipeline_microbatches:2"})
    at.run()
    assert not at.exception
    assert [e.label for e in at.expander if e.label.startswith("Pipeline")] == ["Pipeline: 2 stages × 2 microbatches"]
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(link | {"options": options + ";pipeline_stages:2;pipeline_microbatches:2;pipeline_repeats:2"})
    at.run()
    assert not at.exception
    assert [e.label for e in at.expander if e.label.startswith("Pipeline")] == ["Pipeline: 2 stages × 2 microbatches × 2 repeats"]


def test_the_team_server_does_not_watch_its_source_files():
    """``streamlit run app.py`` in the checkout reads ``.streamlit/config.toml``: no file watcher (its re-walks of the
    checkout, ``.venv`` included, cost a browser test's server 53 s of CPU against 6 s of serving)."""
    import os

    from streamlit import config

    before = os.getcwd()
    os.chdir(os.path.dirname(APP))
    try:
        config.get_config_options(force_reparse=True)
        assert config.get_option("server.fileWatcherType") == "none"
    finally:
        os.chdir(before)
        config.get_config_options(force_reparse=True)
