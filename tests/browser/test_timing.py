"""The Timing page in a real Chromium: the live step-time chart fills while the seed layout is timed.

The seed layout (the Flax guide's MLP on a 2 × 4 mesh) compiles in a few seconds and
takes a noticeable time per step on 8 simulated CPU devices, so 30 timed steps last
long enough to watch the chart grow. The page draws an empty chart keyed ``live_frame``
in one ``st.empty`` slot as soon as the run starts (the browser may skip drawing it), redraws it as a new plotly chart keyed
``live_<step>`` at most every 0.2 s, and removes it when the results are drawn.

Plotly's script is a 4.7 MB chunk the browser loads the first time a page draws a chart;
a CI run once saw the whole timing finish before that chunk arrived. So the test opens
the Layout page first (which draws charts) and goes to Timing through the navigation,
as a user does, and reads what the browser drew from a MutationObserver rather than by
polling from Python.
"""

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser import (
    dataframe_rows,
    MAIN,
    RUN_TIMEOUT_MS,
    ANSWER_TIMEOUT_MS,
    assert_no_exception,
    choose,
    expect_tables_fit,
    go_to_page,
    key_selector,
    screenshot,
    set_text,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

STEPS = 30
LIVE_PLOT = "[class*='st-key-live_'] .js-plotly-plot"
RESULTS = "[data-testid='stMetric']"

# Records every distinct drawing of the live chart: [data[0].x.length, drawn markers].
RECORD_LIVE_COUNTS = """(selector) => {
    window.__liveCounts = [];
    new MutationObserver(() => {
        const plot = document.querySelector(selector);
        if (!plot || !plot.data || !plot.data.length) return;  // a chart being replaced has no data for a moment
        const n = plot.data[0].x.length;
        const drawn = plot.querySelectorAll('.scatterlayer .point').length;
        const seen = window.__liveCounts;
        const last = seen[seen.length - 1];
        if (!last || last[0] !== n || last[1] !== drawn) seen.push([n, drawn]);
    }).observe(document.body, {childList: true, subtree: true, attributes: true});
}"""

PARTLY_FILLED = f"() => window.__liveCounts.some(([n]) => n > 0 && n < {STEPS}) || document.querySelector(`{RESULTS}`) !== null"


def metric_value(page: Page, label: str) -> Locator:
    metric = page.get_by_test_id("stMetric").filter(has=page.get_by_test_id("stMetricLabel").filter(has_text=re.compile(rf"^{label}$")))
    return metric.get_by_test_id("stMetricValue")


def table_under(page: Page, heading: str) -> list[list[str]]:
    """The cells, row by row, of the first dataframe after the subheading ``heading`` (the page stacks its sections)."""
    title = page.get_by_role("heading", name=heading, exact=True)
    expect(title).to_have_count(1)
    return dataframe_rows(title.locator("xpath=following::div[@data-testid='stDataFrame'][1]"))


def test_live_chart_fills_while_timing(page: Page) -> None:
    go_to_page(page, "Timing", f"{key_selector('time_button')} button")
    expect(page.locator(MAIN)).to_contain_text("seed-2x4")
    set_text(page, "timing_steps", str(STEPS))
    expect(page.locator(f"{key_selector('timing_steps')} input")).to_have_value(str(STEPS))
    page.evaluate(RECORD_LIVE_COUNTS, LIVE_PLOT)

    page.locator(f"{key_selector('time_button')} button").click()
    page.wait_for_function(PARTLY_FILLED, timeout=RUN_TIMEOUT_MS)
    screenshot(page, "browser-timing-running")
    expect(page.locator(RESULTS).first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)

    drawn = page.evaluate("window.__liveCounts")
    counts = [n for n, _ in drawn]
    # The page puts up an empty frame before compiling, but on a loaded machine (or with the
    # compile cached) the browser may coalesce it with the first filled drawing; what a user
    # must see is a chart that grows, not a particular first frame.
    assert counts and counts[0] < STEPS, f"the live chart was first drawn only when the run was over: {drawn}"
    assert counts == sorted(set(counts)), f"the live chart's point count went back or repeated: {drawn}"
    assert any(0 < n < STEPS for n in counts), f"the live chart was never drawn part-filled: {drawn}"
    # The last live drawing may be short of STEPS: the results replace the chart straight
    # after the last step, and the browser may skip drawing a chart that is already gone.
    assert counts[-1] <= STEPS, drawn
    expect(page.locator(LIVE_PLOT)).to_have_count(0)  # the live chart gives way to the results

    expect(page.get_by_test_id("stExpander").filter(has_text=f"Timed {STEPS} steps")).to_have_count(1)  # the status box
    expect(metric_value(page, "Median step")).to_have_text(re.compile(r"^\d+(\.\d+)? (s|ms|µs)$"))
    # another test on this server may have compiled the seed layout already: the page then says so
    expect(metric_value(page, "Compile")).to_have_text(re.compile(r"^(\d+\.\d\d s|cached)$"))
    final = page.locator(f"{key_selector('step_times')} .js-plotly-plot")
    assert final.evaluate("(plot) => plot.data[0].x.length") == STEPS
    expect(page.locator(MAIN)).to_contain_text(f"{STEPS} timed steps after 2 warm-up")

    memory = table_under(page, "Memory per device")
    assert [row[0] for row in memory] == ["arguments", "outputs", "temporaries", "aliased", "peak"], memory
    collectives = table_under(page, "Collectives XLA inserted")
    all_reduce = [row for row in collectives if row[0] == "all-reduce"]
    assert len(all_reduce) == 1 and int(all_reduce[0][1]) > 0, collectives
    assert_no_exception(page)
    screenshot(page, "browser-timing-done")
    for width, height in ((1024, 768), (1440, 900)):  # every table of the page whole beside the sidebar
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(500)
        expect_tables_fit(page, MAIN)
        screenshot(page, f"timing-{width}x{height}")


STREAMLIT_STOP = "[data-testid='stStatusWidget'] button"  # Streamlit's own Stop, in the header while a script runs


# Counts the moments Streamlit's own Stop is visible in the header (it ends a script run, not the timing).
RECORD_HEADER_STOP = """(selector) => {
    window.__headerStopSeen = 0;
    const look = () => {
        const shown = [...document.querySelectorAll(selector)].filter((b) => b.innerText.trim() === 'Stop' && b.offsetParent !== null);
        if (shown.length) window.__headerStopSeen += 1;
    };
    look();
    new MutationObserver(look).observe(document.body, {childList: true, subtree: true, attributes: true});
}"""


@pytest.mark.parametrize("processes", [1, 2])
def test_a_stopped_timing_keeps_every_figure_of_the_steps_it_ran(page: Page, processes: int) -> None:
    """Issue 45: Stop left only the median of the steps that ran. Now the run stops after its current step and the page
    shows the whole result for those steps, as for a finished run: median, p10/p90, compile, memory and collectives;
    in two local processes too (they agree on the step to stop after; nothing is killed).

    Issue 55: the page froze on "Running · step 13 of 60" after Stop, for minutes. The timing's script ran as long as
    the timing, and Streamlit's own Stop (in its header while a script runs) ended the script, not the timing, leaving
    the page as last drawn. Now the timing runs in its thread while the page redraws it in short runs; Streamlit's Stop
    is hidden while the page's own is there (on a loaded machine back-to-back redraws kept it in the header, where it
    stopped nothing), and the page's Stop gives the stopped run's figures on the same page within seconds.
    """
    page.set_viewport_size({"width": 1024, "height": 768})
    go_to_page(page, "Timing", f"{key_selector('time_button')} button")
    set_text(page, "timing_steps", "1000")
    expect(page.locator(f"{key_selector('timing_steps')} input")).to_have_value("1000")
    if processes > 1:
        choose(page, "timing_processes", str(processes))
    page.locator(f"{key_selector('time_button')} button").click()
    page.wait_for_function(
        "() => { const p = document.querySelector(`" + LIVE_PLOT + "`); return p && p.data && p.data[0].x.length >= 2; }",
        timeout=RUN_TIMEOUT_MS,
    )
    screenshot(page, f"timing-running-{processes}-processes-1024x768")
    page.evaluate(RECORD_HEADER_STOP, STREAMLIT_STOP)
    page.wait_for_timeout(2000)  # the timing's steps run: the page redraws them
    assert page.evaluate("window.__headerStopSeen") == 0, "Streamlit's own Stop was in the header while the timing ran"
    page.locator(f"{key_selector('stop_button')} button").first.click()
    stopped = page.locator(key_selector("timing_stopped"))
    expect(stopped).to_contain_text(
        re.compile(r"Stopped after \d+ of 1000 steps: every figure here is of the \d+ steps? that ran\."), timeout=ANSWER_TIMEOUT_MS
    )
    wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
    ran = int(re.search(r"Stopped after (\d+)", stopped.inner_text()).group(1))
    assert 2 <= ran < 1000, ran
    for label in ("Median step", "p10", "p90"):
        expect(metric_value(page, label)).to_have_text(re.compile(r"^\d+(\.\d+)? (s|ms|µs)$"))
    expect(metric_value(page, "Compile")).to_have_text(re.compile(r"^(\d+\.\d\d s|cached)$"))
    expect(page.locator(MAIN)).to_contain_text(f"{ran} timed steps after 2 warm-up")
    if processes > 1:
        expect(page.locator(MAIN)).to_contain_text(f"In {processes} processes × {8 // processes} devices (jax.distributed")
    chart = page.locator(f"{key_selector('step_times')} .js-plotly-plot")
    assert chart.evaluate("(p) => p.data[0].x.length") == ran
    assert chart.evaluate("(p) => p.layout.xaxis.range[1]") == ran + 0.5  # the steps that ran, not 1000
    memory = table_under(page, "Memory per device")
    assert [row[0] for row in memory] == ["arguments", "outputs", "temporaries", "aliased", "peak"], memory
    assert any(row[0] == "all-reduce" for row in table_under(page, "Collectives XLA inserted"))
    expect(page.locator(LIVE_PLOT)).to_have_count(0)
    assert_no_exception(page)
    screenshot(page, f"timing-stopped-{processes}-processes-1024x768")


def test_a_count_out_of_range_is_named_and_kept(page: Page) -> None:
    """Bad input walk: Warm-up steps 500 only turned the box red and kept 2 underneath; Time train step would time with 2."""
    page.set_viewport_size({"width": 1024, "height": 768})
    go_to_page(page, "Timing", f"{key_selector('time_button')} button")
    set_text(page, "timing_warmup", "500")
    message = page.locator(f"{key_selector('timing_messages')} [data-testid='stAlertContentError']")
    expect(message).to_have_count(1)
    expect(message).to_have_text("Warm-up steps: 500 must be a whole number from 0 to 100")
    expect(page.locator(f"{key_selector('timing_warmup')} input")).to_have_value("500")
    expect(page.locator(f"{key_selector('time_button')} button").first).to_be_disabled()
    assert_no_exception(page)
    screenshot(page, "timing-warmup-out-of-range-1024x768")
