"""The pages read at 1024x768 and 1440x900: metrics whole, legends off the bars, a first visit's sidebar.

A fresh browser context with nothing in localStorage is a first visit: the sidebar opens at
whatever width Streamlit gives it (300 px when the page config arrives after it mounts).
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import (
    EXCEPTION_WATCH,
    RERUN_TIMEOUT_MS,
    RUN_TIMEOUT_MS,
    SIDEBAR,
    assert_no_exception,
    click_button,
    go_to_page,
    grid_labels,
    key_selector,
    screenshot,
    set_text,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

SCREENS = [{"width": 1024, "height": 768}, {"width": 1440, "height": 900}]

# Every metric value shows whole: no ellipsis, nothing hidden by its box.
METRICS_WHOLE = """() => [...document.querySelectorAll('[data-testid="stMetricValue"]')].map((value) => {
    const inner = value.querySelector('div') || value;
    return {text: value.innerText, whole: inner.scrollWidth <= inner.clientWidth + 1 && value.scrollWidth <= value.clientWidth + 1};
})"""

# The legend of a Plotly chart sits entirely above its plot area (so it covers no bar).
LEGEND_CLEAR = """(selector) => {
    const chart = document.querySelector(selector + ' .js-plotly-plot');
    const legend = chart.querySelector('.legend').getBoundingClientRect();
    const plot = chart.querySelector('.draglayer .nsewdrag').getBoundingClientRect();  // the plot area
    return legend.bottom <= plot.top + 1;
}"""


def first_visit(browser: Browser, screen: dict) -> Page:
    context = browser.new_context(viewport=screen)  # no pinned sidebar width: what a new user gets
    context.add_init_script(EXCEPTION_WATCH)
    return context.new_page()


def expect_metrics_whole(page: Page, count: int) -> None:
    expect(page.get_by_test_id("stMetricValue")).to_have_count(count)
    metrics = page.evaluate(METRICS_WHOLE)
    assert all(m["whole"] for m in metrics), metrics


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s['width']}x{s['height']}")
def test_the_pages_read_on_common_screens(browser: Browser, app_url: str, screen: dict) -> None:
    page = first_visit(browser, screen)
    name = f"{screen['width']}x{screen['height']}"
    try:
        page.goto(app_url)
        expect(grid_labels(page).first).to_be_visible(timeout=RERUN_TIMEOUT_MS)
        wait_for_rerun(page)
        expect_metrics_whole(page, 5)
        assert page.evaluate(LEGEND_CLEAR, ".st-key-memory_bars")
        sidebar = page.locator(SIDEBAR).bounding_box()
        assert sidebar["width"] >= 300
        screenshot(page, f"screen-{name}-layout")

        set_text(page, "mesh_shape_text", "2x-4")  # every problem at once, each where it was typed
        errors = page.locator(f"{key_selector('mesh_messages')} [data-testid='stAlertContentError']")
        expect(errors).to_contain_text("(you typed '2x-4')")
        expect(errors).to_contain_text("mesh.shape[1]: -4 is not a positive whole number")
        screenshot(page, f"screen-{name}-error")
        set_text(page, "mesh_shape_text", "2, 4")

        go_to_page(page, "Timing", f"{key_selector('time_button')} button")
        expect(page.get_by_text("share its")).to_be_visible()  # simulated devices share this machine's cores
        set_text(page, "timing_steps", "3")
        click_button(page, "time_button")
        expect(page.get_by_test_id("stMetricValue").first).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
        expect_metrics_whole(page, 7)  # the MFU beside the step figures
        screenshot(page, f"screen-{name}-timing")

        go_to_page(page, "Compare", "h1")
        expect(page.get_by_text("Pick at least two layouts")).to_be_visible()
        screenshot(page, f"screen-{name}-compare")
        assert_no_exception(page)
    finally:
        page.context.close()
