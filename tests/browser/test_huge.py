"""The largest planned mesh (256 x 256) in a real Chromium: the page draws and stays interactive.

The drawn kernel is cut into 65,536 blocks over 65,536 hypothetical devices. Waits are
generous and configurable (``EXPLORER_BROWSER_HUGE_WAIT_S``, default 180 s): the test
is about the page finishing and answering at all, not about speed; the server time of
a rerun is measured in ``benchmarks/huge_mesh.py``.
"""

import os

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    GRID,
    assert_no_exception,
    key_selector,
    screenshot,
    selected_summary,
    set_text,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

WAIT_MS = int(float(os.environ.get("EXPLORER_BROWSER_HUGE_WAIT_S", "180")) * 1000)
HUGE_LINK = (
    "/?name=huge&mesh=256x256&axes=data,model&rules=batch:data;embed:data;hidden:model"
    "&model=mlp&options=batch:256;layers:2;depth:1024;scan:false"
)
MESH = ".st-key-mesh_figure"


def answers(page: Page) -> None:
    """The page's main thread runs a script promptly: it is not stuck drawing."""
    page.wait_for_function("() => document.readyState === 'complete'", timeout=WAIT_MS)


def test_a_256x256_planned_mesh_draws_and_stays_interactive(blank_page: Page, app_url: str) -> None:
    page = blank_page
    page.goto(app_url + HUGE_LINK)
    expect(selected_summary(page)).to_contain_text("spec P('data', 'model')", timeout=WAIT_MS)
    for figure in (GRID, MESH):
        expect(page.locator(f"{figure} .heatmaplayer image, {figure} .hm image").first).to_be_attached(timeout=WAIT_MS)
    wait_for_rerun(page, timeout_ms=WAIT_MS)
    expect(page.locator("[data-testid='stMain']")).to_contain_text("65,536 devices")
    assert page.locator(f"{GRID} .annotation-text").count() == 0  # no per-block labels at this size
    answers(page)
    screenshot(page, "browser-huge-256x256")

    # Interact: filter the array table, then pick another array; each rerun finishes and the page answers.
    set_text(page, "array_search", "W2")
    expect(page.locator("[data-testid='stMain']")).to_contain_text("of", timeout=WAIT_MS)
    page.locator(key_selector("selected_path")).click()
    page.keyboard.type("LogicalDotReluDot_1/W2")
    page.get_by_role("option").filter(has_text="LogicalDotReluDot_1/W2").first.click()
    wait_for_rerun(page, timeout_ms=WAIT_MS)
    expect(selected_summary(page)).to_contain_text("LogicalDotReluDot_1/W2", timeout=WAIT_MS)
    expect(selected_summary(page)).to_contain_text("spec P('model', 'data')")
    answers(page)
    assert_no_exception(page)
    screenshot(page, "browser-huge-256x256-w2")
