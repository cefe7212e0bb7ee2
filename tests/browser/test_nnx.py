"""Flax NNX in a real Chromium: the NNX guide's model opened by link, timed, and compared with its Linen twin."""

import re

import pytest
from playwright.sync_api import Page, expect

from explorer.layout import parse_layout
from explorer.sharing.share import layout_to_query
from tests.browser import (
    MAIN,
    RERUN_TIMEOUT_MS,
    assert_no_exception,
    go_to_page,
    key_selector,
    open_app,
    screenshot,
    set_text_area,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

RUN_TIMEOUT_MS = 4 * RERUN_TIMEOUT_MS
NNX = parse_layout(
    {
        "name": "nnx-guide-2x4",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
        "rules": [],
        "model": {"name": "nnx-guide", "options": {"batch": 8, "layers": 2, "depth": 256, "logical": False}},
    }
)
LINEN = parse_layout(
    {
        "name": "linen-twin",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
        "rules": [["batch", "data"], ["hidden", "model"]],
        "model": {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": True}},
    }
)


def test_nnx_guide_model_is_shown_timed_and_compared(blank_page: Page, app_url: str) -> None:
    page = blank_page
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        open_app(page, app_url + "/" + layout_to_query(NNX))
        expect(page.locator(MAIN)).to_contain_text("Flax NNX")
        screenshot(page, f"browser-nnx-layout-{width}x{height}")
    page.set_viewport_size({"width": 1600, "height": 2600})

    go_to_page(page, "Timing", f"{key_selector('time_button')} button")
    expect(page.locator(MAIN)).to_contain_text("nnx-guide-2x4")
    page.locator(f"{key_selector('time_button')} button").click()
    median = page.get_by_test_id("stMetric").filter(has_text="Median step").get_by_test_id("stMetricValue")
    expect(median).to_have_text(re.compile(r"^\d+(\.\d+)? (s|ms|µs)$"), timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
    assert_no_exception(page)
    screenshot(page, "browser-nnx-timed")

    go_to_page(page, "Compare", f"{key_selector('compare_links')} textarea")
    # The current layout (the NNX one) is picked when the page opens: no click (the list's first option is "No
    # results" with an empty library, a library entry otherwise: neither is the current layout)
    expect(page.locator(key_selector("compare_sources"))).to_contain_text("Current layout (sidebar)")
    set_text_area(page, "compare_links", app_url + "/" + layout_to_query(LINEN))
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text("linen-twin")
    expect(page.locator(MAIN)).to_contain_text("nnx-guide-2x4")
    expect(page.locator(f"{key_selector('compare_memory')} .js-plotly-plot")).to_be_visible()
    assert_no_exception(page)
    screenshot(page, "browser-nnx-compare")
