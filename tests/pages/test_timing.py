"""AppTest of the Timing page: a small layout timed to completion, and the planned-mesh refusal."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.pages.test_app import plain
from tests.paths import APP

DURATION = r"\d+(\.\d+)? (s|ms|µs)"  # formats.human_seconds: 252 ms, 31.9 s, 63.2 µs (never 31921.14 ms)
from ui.live_timing import JOB


def time_it(page: AppTest) -> None:
    """Press Time train step and let the timing, which runs in a thread of its own while the page redraws it, end; then
    the page's next run shows its result (as the live drawing's last redraw does in a browser)."""
    page.button(key="time_button").click().run()
    assert not page.exception
    assert page.session_state[JOB].done.wait(300)
    page.run()


@pytest.fixture
def page():
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page("views/1_Timing.py")
    at.run()
    assert not at.exception
    return at


def test_times_a_small_layout_to_completion(page):
    page.number_input(key="option::mlp::depth").set_value(256).run()
    page.number_input(key="timing_steps").set_value(3).run()
    time_it(page)
    assert not page.exception and not page.error
    metrics = {m.label: m.value for m in page.metric}
    assert re.fullmatch(DURATION, metrics["Median step"]) and metrics["Compile"].endswith(" s")
    assert any("3 timed steps" in c.value for c in page.caption)
    assert any("arguments match the analysis exactly" in c.value for c in page.caption)
    assert "all-reduce" in next(d.value for d in page.dataframe if "op" in d.value.columns)["op"].tolist()
    # measured, predicted and the bound side by side: on simulated CPU devices the slots say why they are empty
    expected = page.table[0].value.set_index("step")
    assert expected.loc["measured", "measured / it"] == "1.00x" and re.fullmatch(DURATION, expected.loc["measured", "seconds"])
    assert expected.loc["predicted", "seconds"] == "—" and "simulated CPU devices" in expected.loc["predicted", "what it is"]
    assert metrics["MFU"] == "—"
    assert any(c.value.startswith("peak in use (memory_stats): not available") for c in page.caption)
    # item 4, and one name per figure: on XLA's CPU backend memory_analysis()'s peak leaves out the temporaries, so the
    # page says it is not the most bytes live at once and names the buffer assignment's fullest point, the breakdown's
    [relation] = [plain(c.value) for c in page.caption if "not the most bytes live at one moment" in c.value]
    assert relation.startswith("memory_analysis()'s peak (") and "XLA's buffer assignment holds " in relation
    # what fills the memory at the compiled step's peak: the headline adding up to XLA's total, the buffers largest first
    assert any(plain(c.value).startswith("Peak: ") and "XLA's total" in c.value for c in page.caption)
    buffers = next(d.value for d in page.dataframe if list(d.value.columns[:3]) == ["size", "unpadded", "kind"])
    assert "optimizer state" in set(buffers["kind"])
    time_it(page)  # issue 18 item 6: the second timing says its compile was cached
    metrics = {m.label: m.value for m in page.metric}
    assert metrics["Compile"] == "cached"


def test_planned_mesh_is_refused_with_a_link_to_the_analysis(page):
    page.text_input(key="mesh_shape_text").input("16, 16").run()
    assert not page.exception
    assert any("planned mesh but not timed" in e.value for e in page.error)
    assert page.button(key="time_button").disabled


def test_an_indivisible_layout_shows_the_layout_pages_message_and_a_disabled_button(page):
    page.number_input(key="option::mlp::batch").set_value(3).run()
    assert not page.exception
    rules_message = [e.value for e in page.sidebar.error if "has size 3" in e.value]
    main_message = [e.value for e in page.main.error if "has size 3" in e.value]
    assert rules_message and main_message == rules_message
    assert page.button(key="time_button").disabled
    page.number_input(key="option::mlp::batch").set_value(4).run()
    assert not page.button(key="time_button").disabled


def test_times_a_small_layout_in_two_local_processes(page):
    page.number_input(key="option::mlp::depth").set_value(256).run()
    assert page.selectbox(key="timing_processes").options == ["1", "2", "4"]
    page.number_input(key="timing_steps").set_value(3).run()
    page.selectbox(key="timing_processes").set_value(2).run()
    time_it(page)
    assert not page.exception and not page.error
    assert any("In 2 processes × 4 devices (jax.distributed" in c.value for c in page.caption)
    assert any("3 timed steps" in c.value for c in page.caption)
    assert "all-reduce" in next(d.value for d in page.dataframe if "op" in d.value.columns)["op"].tolist()


def test_only_process_counts_that_divide_the_mesh_are_offered(page):
    page.text_input(key="mesh_shape_text").input("2, 3").run()
    assert not page.exception
    assert page.selectbox(key="timing_processes").options == ["1", "2"]  # 4 does not divide 6 devices


def test_on_an_accelerator_the_note_names_the_device_and_its_memory(page, monkeypatch):
    from explorer.compile import compiled
    from tests.explorer.timing.test_timing import FakeGpu

    monkeypatch.setattr(compiled, "timing_device", lambda: FakeGpu({"bytes_limit": 16 * 2**30}))
    page.run()
    assert not page.exception
    notes = [c.value for c in page.caption if c.value.startswith("Memory needed on each NVIDIA H200")]
    assert notes and "of its 16.0 GiB (JAX's limit)" in notes[0]
    assert not any("simulated devices" in c.value and "Host memory" in c.value for c in page.caption)


def test_a_stopped_timing_is_shown_whole_and_marked(page, seed_dict):
    """What Stop leaves (issue 45 item 2): the stopped run's figures as a finished run's, marked stopped."""
    from explorer.layout import parse_layout
    from explorer.timing.timing import time_layout
    from ui.state import TIMING_RESULTS

    seed = parse_layout(seed_dict)
    result = time_layout(seed, steps=40, warmup=0, should_stop=lambda: True)
    page.session_state[TIMING_RESULTS] = {seed.key: result}
    page.run()
    assert not page.exception
    assert "Stopped after 1 of 40 steps: every figure here is of the 1 step that ran." in [i.value for i in page.info]
    metrics = {m.label: m.value for m in page.metric}
    # the step compiled here, or by a test before this one in the same worker (the process's compile cache)
    assert re.fullmatch(DURATION, metrics["Median step"]) and metrics["Compile"] == (
        "cached" if result.cached else f"{result.compile_s:.2f} s"
    )
    assert "all-reduce" in next(d.value for d in page.dataframe if "op" in d.value.columns)["op"].tolist()


@pytest.mark.parametrize(
    "key, label, value, bounds", [("timing_steps", "Timed steps", 5000, "1 to 1,000"), ("timing_warmup", "Warm-up steps", -1, "0 to 100")]
)
def test_a_count_out_of_range_is_named_under_the_row_and_kept(page, key, label, value, bounds):
    """The boxes had Streamlit's bounds: 5000 turned the box red, kept 20 underneath, and Time train step would time 20."""
    page.number_input(key=key).set_value(value).run()
    assert not page.exception
    assert [e.value.replace("\\", "") for e in page.error] == [f"{label}: {value} must be a whole number from {bounds}"]  # escaped Markdown
    assert page.number_input(key=key).value == value  # what was typed stays in the box
    assert page.button(key="time_button").disabled
