"""Issue 18 in a real Chromium: the journeys where a user got stuck, walked as the user walks them.

Load a layout from the team library, then edit the mesh; upload a layout file; open the
address bar's link in a fresh browser and compare every field, the target included; compile
for a target on a layout JAX refuses; watch a compile's stage without opening anything; apply
every preset to every built-in model and size; type an expression Markdown would eat.

The server gets its own library folder and compile cache, so nothing is shared with other tests.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Page, expect

from explorer.sharing import library
from explorer.layout import parse_layout
from explorer.sharing.share import layout_to_params
from tests.browser import (
    MAIN,
    RERUN_TIMEOUT_MS,
    RUN_TIMEOUT_MS,
    SIDEBAR,
    assert_no_exception,
    checked_server,
    choose,
    click_button,
    expect_rule_rows,
    key_selector,
    new_page,
    open_app,
    screenshot,
    set_text,
    shown_layout,
    sidebar_errors,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"
# Another team's layout: other mesh axes than the seed's, other rules, a smaller model, and a target.
TEAM = {
    "name": "team-fsdp",
    "mesh": {"shape": [4, 2], "axes": ["fsdp", "tensor"]},
    "rules": [["batch", "fsdp"], ["hidden", "tensor"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": False}},
    "target": "v5litepod-8",
}
TEAM_ROWS = [["0", "batch", "fsdp"], ["1", "hidden", "tensor"]]


@pytest.fixture(scope="module")
def journey_server(tmp_path_factory):
    folders = {"EXPLORER_LIBRARY": tmp_path_factory.mktemp("library"), "EXPLORER_CACHE_DIR": tmp_path_factory.mktemp("cache")}
    with checked_server(**{key: str(value) for key, value in folders.items()}) as url:
        library.save("team-fsdp", parse_layout(TEAM))  # in the server's library folder, before any test opens a page
        yield url


def address(page: Page) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(page.url).query))


def expect_address(page: Page, layout: dict) -> None:
    """The address bar carries exactly ``layout`` (and the array drawn): what a teammate gets from it."""
    expected = {**layout_to_params(parse_layout(layout)), "array": KERNEL}
    page.wait_for_function(
        """(expected) => {
            const actual = Object.fromEntries(new URLSearchParams(window.location.search));
            return JSON.stringify(actual, Object.keys(actual).sort()) === JSON.stringify(expected, Object.keys(expected).sort());
        }""",
        arg=expected,
        timeout=RERUN_TIMEOUT_MS,
    )


def target_shown(page: Page) -> str:
    return page.locator(f"{key_selector('target_choice')} input").input_value()


def expect_team_layout(page: Page, layout: dict) -> None:
    """Every field of the sidebar shows ``layout``, nothing of the one before; no message blocks the next edit."""
    expect_rule_rows(page, TEAM_ROWS)
    assert shown_layout(page) == {k: v for k, v in layout.items() if k != "target"}
    expect(page.locator(f"{key_selector('target_choice')} input")).to_have_value(layout["target"])
    expect(sidebar_errors(page)).to_have_count(0)
    expect(page.locator(MAIN)).not_to_contain_text("shows the last valid layout")


def test_load_from_the_library_then_edit_the_mesh_then_share_the_address(browser, blank_page, journey_server):
    """Item 1 and item 6: a load replaces every field and the address bar; the address reopens it, target included."""
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, journey_server)
    set_text(page, "option::mlp::layers", "3")  # some work on the seed first
    choose(page, "library_choice", "team-fsdp")
    click_button(page, "library_load")
    expect_team_layout(page, TEAM)
    expect_address(page, TEAM)
    set_text(page, "mesh_shape_text", "2, 4")  # the next edit is not blocked by the old rules
    edited = {**TEAM, "mesh": {"shape": [2, 4], "axes": ["fsdp", "tensor"]}}
    expect_team_layout(page, edited)
    shared = {**edited, "name": "team-fsdp (edited)"}  # issue 45: a link to an edited layout says it was edited
    expect_address(page, shared)
    expect(page.locator(MAIN)).to_contain_text("team-fsdp (edited)")
    screenshot(page, "journey-library-loaded")
    reopened = new_page(browser, {"width": 1440, "height": 900})
    try:
        open_app(reopened, page.url)  # what a teammate does with the address bar's link
        expect_team_layout(reopened, shared)
        assert shown_layout(reopened) == {**shown_layout(page), "name": "team-fsdp (edited)"}
        assert target_shown(reopened) == target_shown(page)
        assert_no_exception(reopened)
    finally:
        reopened.context.close()
    assert_no_exception(page)


def test_upload_a_layout_file_replaces_the_whole_layout(blank_page, journey_server, tmp_path):
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, journey_server)
    path = tmp_path / "team.json"
    path.write_text(json.dumps(TEAM))
    expect(page.locator(key_selector("upload_layout"))).to_contain_text("1MB per file")  # item 10: not "200MB"
    page.locator(f"{key_selector('upload_layout')} input[type='file']").set_input_files(str(path))
    wait_for_rerun(page)
    expect_team_layout(page, TEAM)
    expect_address(page, TEAM)
    assert_no_exception(page)


def test_compile_for_a_target_on_a_layout_jax_refuses(blank_page, journey_server):
    """Item 2: the NNX guide (batch 8) on 16x16 gets the Timing page's message and a disabled button, before any compile."""
    page = blank_page
    page.set_viewport_size({"width": 1024, "height": 768})
    open_app(page, journey_server + "/?name=nnx-16x16&mesh=16x16&axes=data,model&rules=&model=nnx-guide&options=batch:8")
    choose(page, "target_choice", "v5litepod-256")
    refusal = page.locator(key_selector("target_refused"))
    expect(refusal).to_contain_text("do not divide evenly")
    expect(refusal).to_contain_text("has size 8")
    expect(page.locator(f"{key_selector('target_compile_button')} button")).to_be_disabled()
    expect(page.locator(key_selector("target_state_verdict"))).to_contain_text("of the 16.0 GiB HBM per chip")
    expect(page.locator(key_selector("target_stop_button"))).to_have_count(0)
    screenshot(page, "journey-compile-refused-1024x768")
    assert_no_exception(page)


def test_a_compile_shows_its_stage_and_time_without_a_click_and_the_whole_time_at_the_end(blank_page, journey_server):
    """Item 5: a verdict before compiling (the exact state against HBM), the stage in sight while it runs, the whole time after."""
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, journey_server)
    choose(page, "target_choice", "v5litepod-8")
    expect(page.locator(key_selector("target_state_verdict"))).to_contain_text(
        re.compile(
            r"The state alone \(parameters, optimizer state, inputs; exact\) takes [\d.,]+ MiB of the 15\.8 GiB XLA lets a program use of the 16\.0 GiB HBM per chip"
        )
    )
    page.locator(f"{key_selector('target_compile_button')} button").click()
    label = page.locator(f"{MAIN} [data-testid='stExpander'] summary").filter(has_text="Compiling for v5litepod-8")
    expect(label).to_contain_text(re.compile(r"Compiling for v5litepod-8: \w+ · \d+ s elapsed"), timeout=RUN_TIMEOUT_MS)
    done = page.locator(f"{MAIN} [data-testid='stExpander'] summary").filter(has_text="Compiled for v5litepod-8 in")
    expect(done).to_contain_text(re.compile(r"in [\d.]+ s \(everything, from the click\)"), timeout=RUN_TIMEOUT_MS)
    expect(page.locator(key_selector("target_state_verdict"))).to_have_count(0)  # XLA's verdict took its place
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text(re.compile(r"Lowering and compiling took [\d.]+ s of the [\d.]+ s from the click"))
    assert_no_exception(page)


# Every preset on every built-in model and size is checked without a browser (tests/explorer/analysis/test_presets.py, the
# same fit_preset and analyze the page calls); here, the page's wiring on one combination of each kind: a Linen
# model, the logical NNX guide (its embed rule) and GPT-2 small under tensor parallelism (its vocabulary left
# unsharded, and said so).
PAGE_COMBINATIONS = [("mlp", None, "flax-guide"), ("nnx-guide", "logical", "fsdp"), ("transformer", "gpt2-small", "tensor-parallel")]


def test_presets_applied_on_the_page_give_layouts_jax_accepts_and_say_what_they_left(blank_page, journey_server):
    """Item 3: no preset leaves a refused dimension (GPT-2's vocabulary over 4, the logical NNX guide's embed)."""
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, journey_server)
    noted = set()
    for model, size, preset in PAGE_COMBINATIONS:
        if page.locator(f"{key_selector('model_name')} input").input_value().split(":")[0] != model:
            choose(page, "model_name", model)
        if size == "logical":
            page.locator(f"{key_selector('option::nnx-guide::logical')} label").click()
            wait_for_rerun(page)
        elif size is not None:
            choose(page, "size_preset::transformer", size)
        choose(page, "rules_preset", preset)
        click_button(page, "apply_preset")
        refused = page.locator(f"{SIDEBAR} [data-testid='stAlertContentError']")
        assert refused.count() == 0, f"{model} {size} {preset}: {refused.all_inner_texts()}"
        expect(page.locator(f"{MAIN} {key_selector('warnings')} [data-testid='stAlertContentError']")).to_have_count(0)
        if "left unsharded" in " ".join(page.locator(key_selector("preset_notes")).all_inner_texts()):
            noted.add((size, preset))
    # said where it happened: GPT-2's vocabulary (50257) over the model axis of 4
    assert noted == {("gpt2-small", "tensor-parallel")}, noted
    assert_no_exception(page)


def test_an_expression_markdown_would_eat_is_shown_as_typed(blank_page, journey_server):
    """Item 7: ``__import__('os')`` is refused as '__import__', not as a bold 'import'."""
    page = blank_page
    page.set_viewport_size({"width": 1024, "height": 768})
    page.goto(journey_server + "/Arrays")
    expect(page.locator(f"{key_selector('op_expr')} input")).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    wait_for_rerun(page)
    set_text(page, "op_expr", "__import__('os')")
    message = page.locator(key_selector("arrays_messages"))
    expect(message).to_contain_text("'__import__' is refused")
    expect(message.locator("strong")).to_have_count(0)
    expect(page.locator(f"{MAIN} .js-plotly-plot").first).to_be_visible()  # the valid arrays' grids stay
    screenshot(page, "journey-arrays-refused-1024x768")
    assert_no_exception(page)
