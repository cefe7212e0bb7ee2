"""Sharing in a real Chromium: layouts travel by link (the address bar) and by JSON file.

A link carries the whole layout in readable query parameters; the page keeps the
address bar in step with the sidebar, so the address of any session reopens it.
"""

import json
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import (
    RERUN_TIMEOUT_MS,
    choose,
    assert_no_exception,
    grid_axis_titles,
    grid_labels,
    key_selector,
    main_errors,
    new_page,
    open_app,
    expect_rule_rows,
    screenshot,
    selected_summary,
    set_text,
    shown_layout,
    sidebar_errors,
    toggle_expander,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

# A 4 × 2 mesh with the seed's rules swapped and a small two-layer MLP.
SHARED_PARAMS = {
    "name": "shared-4x2",
    "mesh": "4x2",
    "axes": "data,model",
    "rules": "batch:model;hidden:data",
    "model": "mlp",
    "options": "batch:8;layers:2;depth:256;scan:false",
}
SHARED_LINK = "/?" + "&".join(f"{key}={value}" for key, value in SHARED_PARAMS.items())
SHARED_LAYOUT = {
    "name": "shared-4x2",
    "mesh": {"shape": [4, 2], "axes": ["data", "model"]},
    "rules": [["batch", "model"], ["hidden", "data"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": False}},
}
# The first kernel (256 × 256, embed × hidden) is P(None, 'data'): four column blocks, each on a model pair.
SHARED_LABELS = ["0,1", "2,3", "4,5", "6,7"]
SEED_RULES = [["0", "batch", "data"], ["1", "hidden", "model"]]
KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"  # the array the Layout page draws first
DOWNLOAD_LABEL = "Download layout (JSON)"


def address_params(page: Page) -> dict[str, str]:
    """The layout parameters the address bar carries now."""
    return dict(parse_qsl(urlsplit(page.url).query))


def expect_address(page: Page, params: dict[str, str], array: str = KERNEL) -> None:
    """Wait until the address bar carries exactly ``params`` and the selected ``array`` (Streamlit updates it after the rerun)."""
    params = {**params, "array": array}
    page.wait_for_function(
        """(expected) => {
            const actual = Object.fromEntries(new URLSearchParams(window.location.search));
            return JSON.stringify(actual, Object.keys(actual).sort()) === JSON.stringify(expected, Object.keys(expected).sort());
        }""",
        arg=params,
        timeout=RERUN_TIMEOUT_MS,
    )
    assert address_params(page) == params


def expect_shared_layout(page: Page, layers: int = 2, name: str = "shared-4x2") -> None:
    """The sidebar and the main area show SHARED_LAYOUT (with ``layers`` layers, named ``name``)."""
    expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value(name)
    expect(page.locator(f"{key_selector('mesh_shape_text')} input")).to_have_value("4, 2")
    expect(page.locator(f"{key_selector('mesh_axes_text')} input")).to_have_value("data, model")
    expect(page.locator(f"{key_selector('option::mlp::layers')} input")).to_have_value(str(layers))
    expect(page.locator(f"{key_selector('option::mlp::depth')} input")).to_have_value("256")
    expect_rule_rows(page, [["0", "batch", "model"], ["1", "hidden", "data"]])
    summary = selected_summary(page)
    expect(summary).to_contain_text("params/LogicalDotReluDot_0/Dense_0/kernel")
    expect(summary).to_contain_text("shape (256, 256)")
    expect(summary).to_contain_text("spec P(None, 'data')")
    expect(grid_labels(page)).to_have_text(SHARED_LABELS)
    assert grid_axis_titles(page) == ("dim 1 'hidden' · 256 → data", "dim 0 'embed' · 256 → replicated")
    expect(page.locator("[data-testid='stMain']")).to_contain_text(f"mlp (Flax Linen): {layers * 2 * 256 * 256:,} parameters")


def test_link_round_trip(browser: Browser, blank_page: Page, app_url: str) -> None:
    page = blank_page
    open_app(page, app_url + SHARED_LINK)
    expect_shared_layout(page)
    assert shown_layout(page) == SHARED_LAYOUT
    expect_address(page, SHARED_PARAMS)
    assert_no_exception(page)
    screenshot(page, "browser-share-link")

    set_text(page, "option::mlp::layers", "3")
    expect_shared_layout(page, layers=3)
    # edited since it was loaded: shared under a name that says so (issue 45), the sidebar's name untouched
    changed = {**SHARED_PARAMS, "name": "shared-4x2 (edited)", "options": "batch:8;layers:3;depth:256;scan:false"}
    expect_address(page, changed)

    toggle_expander(page, "Readable link")
    shown_link = page.locator(".st-key-share_link code").inner_text().strip()
    assert shown_link.startswith(app_url + "/?") and "&axes=data,model&" in shown_link, shown_link  # readable
    assert dict(parse_qsl(urlsplit(shown_link).query)) == {**changed, "array": KERNEL}
    toggle_expander(page, "Copy as code")  # the edited layout's script
    expect(page.locator(".st-key-copy_as_code code").first).to_contain_text("shared-4x2 (edited)", timeout=RERUN_TIMEOUT_MS)

    # One fresh context for what a teammate opens; each goto is a new Streamlit session in it.
    reopened = new_page(browser)
    try:
        for link in (page.url, shown_link):  # what the address bar carries, and the readable link the Share section shows
            open_app(reopened, link)
            expect_shared_layout(reopened, layers=3, name="shared-4x2 (edited)")
            assert shown_layout(reopened) == {**shown_layout(page), "name": "shared-4x2 (edited)"}
            assert shown_layout(reopened)["model"]["options"]["layers"] == 3
            expect_address(reopened, changed)
            assert_no_exception(reopened)
            screenshot(reopened, "browser-share-reopened")

        choose(page, "selected_path", "params/LogicalDotReluDot_1/W2")
        expect_address(page, changed, array="params/LogicalDotReluDot_1/W2")
        open_app(reopened, page.url)
        expect(selected_summary(reopened)).to_contain_text("params/LogicalDotReluDot_1/W2")
        assert_no_exception(reopened)
    finally:
        reopened.context.close()
    assert_no_exception(page)


def test_a_link_with_a_model_not_allowed_opens_the_rest_with_the_seeds_model(blank_page: Page, app_url: str) -> None:
    """Issue 45 item 7: one bad field loses only that field (here the model: the seed's instead), and one message says so."""
    page = blank_page
    open_app(page, app_url + "/?name=mine&mesh=2x4&axes=data,model&rules=batch:data;hidden:model&model=evil.module:run")
    errors = main_errors(page)
    expect(errors).to_have_count(1)
    expect(errors).to_contain_text(
        "The link opened without its model: model.name: 'evil.module:run' is a user factory that is not allow-listed"
    )
    expect(errors).to_contain_text("EXPLORER_ALLOWED_FACTORIES — the seed's model, mlp, instead. The rest of the layout is the link's.")
    expect(sidebar_errors(page)).to_have_count(0)
    expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value("mine")
    expect(page.locator(f"{key_selector('mesh_shape_text')} input")).to_have_value("2, 4")
    expect_rule_rows(page, SEED_RULES)
    expect(selected_summary(page)).to_contain_text("spec P(None, 'model')")
    expect(grid_labels(page)).to_have_text(["0,4", "1,5", "2,6", "3,7"])
    assert_no_exception(page)
    screenshot(page, "browser-share-mangled")


def test_download_then_upload_layout_file(blank_page: Page, app_url: str, tmp_path) -> None:
    page = blank_page
    open_app(page, app_url + SHARED_LINK)
    expect_shared_layout(page)

    with page.expect_download() as download_info:
        page.get_by_role("button", name=DOWNLOAD_LABEL, exact=True).click()
    download = download_info.value
    assert download.suggested_filename == "shared-4x2.json"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    downloaded = json.loads(path.read_text(encoding="utf-8"))
    assert downloaded == SHARED_LAYOUT
    assert downloaded == shown_layout(page)

    # Change the layout in the page: another name, another mesh shape, another layer count.
    set_text(page, "layout_name", "changed")
    set_text(page, "mesh_shape_text", "2, 4")
    set_text(page, "option::mlp::layers", "5")
    changed = shown_layout(page)
    assert changed["name"] == "changed" and changed["mesh"]["shape"] == [2, 4] and changed["model"]["options"]["layers"] == 5
    expect(grid_labels(page)).not_to_have_text(SHARED_LABELS)
    expect_address(page, {**SHARED_PARAMS, "name": "changed", "mesh": "2x4", "options": "batch:8;layers:5;depth:256;scan:false"})

    page.locator(f"{key_selector('upload_layout')} input[type='file']").set_input_files(path)
    wait_for_rerun(page)
    expect(page.get_by_test_id("stAlertContentSuccess")).to_contain_text("Loaded shared-4x2.json.")
    expect_shared_layout(page)
    assert shown_layout(page) == downloaded
    expect_address(page, SHARED_PARAMS)
    assert_no_exception(page)
    screenshot(page, "browser-share-uploaded")
