"""The Arrays page in a real Chromium: the guide's matmul preset drawn, a live timing, screenshots at two sizes.

Screenshots (``screenshots/arrays-1024x768.png``, ``arrays-1440x900.png``, ``arrays-timed.png``)
are for a person to look at; the assertions read what the browser drew.
"""

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    GRID,
    MAIN,
    RERUN_TIMEOUT_MS,
    assert_no_exception,
    go_to_page,
    key_selector,
    screenshot,
    set_text,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

ARRAYS_READY = f"{key_selector('arrays_grid_out')} .js-plotly-plot"
OUTPUT_SPEC = key_selector("arrays_output_spec")


LIVE_CHART_OBSERVER = """() => {
    window.liveChartDrawn = false;
    const seen = () => document.querySelector("[class*='st-key-arrays_live_'] .js-plotly-plot") !== null;
    new MutationObserver(() => { if (seen()) window.liveChartDrawn = true; })
        .observe(document.body, {childList: true, subtree: true, attributes: true, attributeFilter: ["class"]});
}"""


def open_arrays(page: Page, url: str) -> None:
    """Open the page by its address."""
    page.goto(url)
    expect(page.locator(ARRAYS_READY)).to_be_visible(timeout=2 * RERUN_TIMEOUT_MS)
    wait_for_rerun(page)


@pytest.mark.parametrize("width,height", [(1024, 768), (1440, 900)])
def test_matmul_preset_at_two_sizes(blank_page, app_url, width, height):
    page = blank_page
    page.set_viewport_size({"width": width, "height": height})
    open_arrays(page, f"{app_url}/Arrays")
    expect(page.locator(OUTPUT_SPEC)).to_contain_text("XLA chose P('a', 'b')")
    for key in ("arrays_grid_0", "arrays_grid_1", "arrays_grid_out"):
        expect(page.locator(f"{key_selector(key)} .js-plotly-plot")).to_be_visible()
    # The output grid: 4 x 2 blocks, one device each, as the guide prints it.
    labels = page.locator(f"{key_selector('arrays_grid_out')} .annotation-text")
    expect(labels).to_have_count(8)
    assert labels.all_text_contents() == [str(d) for d in range(8)]
    expect(page.locator(MAIN)).to_contain_text("No collectives")
    address = parse_qs(urlparse(page.url).query)
    assert address["arrays"] == ["y:8192x8192:float32:a,-;z:8192x8192:float32:-,b"] and address["expr"] == ["jnp.dot(y, z)"]
    assert_no_exception(page)
    screenshot(page, f"arrays-{width}x{height}")
    page.locator(OUTPUT_SPEC).scroll_into_view_if_needed()
    screenshot(page, f"arrays-{width}x{height}-output")


def test_live_timing_and_a_round_trip_through_the_layout(page: Page, app_url: str):
    set_text(page, "layout_name", "kept-while-on-arrays")
    go_to_page(page, "Arrays", ARRAYS_READY)
    set_text(page, "op_shape_0", "512, 512")
    set_text(page, "op_shape_1", "512, 512")
    set_text(page, "op_steps", "4")
    # The live chart is there only while the timing runs, which can be over before a poll looks (and on a
    # loaded machine Streamlit may send only its last frame): an observer notes whether it was ever drawn.
    page.evaluate(LIVE_CHART_OBSERVER)
    page.locator(f"{key_selector('arrays_time_button')} button").click()
    expect(page.locator("[data-testid='stMetric']").first).to_be_visible(timeout=120_000)
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text("Speedup")
    assert page.evaluate("() => window.liveChartDrawn") is True, "no live chart was drawn while the timing ran"
    traces = page.evaluate(f'() => document.querySelector("{key_selector("arrays_times")} .js-plotly-plot").data.map(t => t.x.length)')
    assert traces == [4, 4]
    assert_no_exception(page)
    screenshot(page, "arrays-timed")
    page.locator("[data-testid='stExpander'] summary").filter(has_text="Readable link").click()
    link = page.locator(f"{key_selector('arrays_share_link')} code").text_content()
    assert link == f"{app_url}/Arrays?mesh=4x2&axes=a,b&arrays=y:512x512:float32:a,-;z:512x512:float32:-,b&expr=jnp.dot(y,%20z)"
    go_to_page(page, "Layout", GRID)
    expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value("kept-while-on-arrays")
    go_to_page(page, "Arrays", ARRAYS_READY)
    expect(page.locator(f"{key_selector('op_shape_0')} input")).to_have_value("512, 512")
    assert_no_exception(page)
