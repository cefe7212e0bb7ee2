"""Planning for a TPU slice in a real Chromium: pick a target, compile for it, read the verdict and the roofline.

The server gets its own empty compile cache, so the compile really runs (the guide's
MLP on an 8-chip v5e slice: a few seconds in a child process).
"""

import re

import pytest
from playwright.sync_api import expect

from tests.browser import (
    MAIN,
    assert_no_exception,
    checked_server,
    choose,
    expect_tables_fit,
    key_selector,
    open_app,
    screenshot,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

COMPILE_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def target_app_url(tmp_path_factory):
    with checked_server(EXPLORER_CACHE_DIR=str(tmp_path_factory.mktemp("compile-cache"))) as url:
        yield url


def test_compile_for_a_slice_shows_the_verdict_and_the_roofline(blank_page, target_app_url):
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, target_app_url)
    choose(page, "target_choice", "v5litepod-16")
    expect(page.locator(f"{MAIN} [data-testid='stAlertContentError']").first).to_contain_text("has 16 chips but the mesh needs 8 devices")
    choose(page, "target_choice", "v5litepod-8")
    button = page.locator(f"{key_selector('target_compile_button')} button")
    expect(button).to_have_text("Compile for v5litepod-8")
    button.click()
    verdict = page.locator(key_selector("target_verdict"))
    expect(verdict).to_contain_text(
        re.compile(r"Fits: XLA's peak is [\d.,]+ MiB of the 16\.0 GiB HBM per chip"), timeout=COMPILE_TIMEOUT_MS
    )
    wait_for_rerun(page)
    roofline = page.locator(f"{key_selector('target_roofline')} .js-plotly-plot")
    expect(roofline).to_be_visible()
    expect(roofline.locator(".bars .point")).to_have_count(3)
    expect(roofline.locator(".gtitle")).to_contain_text(re.compile(r"Step ≥ [\d.]+ ms\s*(compute|memory|collective)-bound"))
    expect(page.locator(MAIN)).to_contain_text("a lower bound on the step, not a measurement")
    headline = page.get_by_test_id("stMetric").filter(has_text="XLA peak / device")
    expect(headline).to_be_visible()
    verdict.scroll_into_view_if_needed()
    screenshot(page, "target-1440x900")
    page.set_viewport_size({"width": 1024, "height": 768})
    page.wait_for_timeout(800)
    expect_tables_fit(page, key_selector("target_collectives"))  # "time ≥" was cut at 1024
    verdict.scroll_into_view_if_needed()
    screenshot(page, "target-1024x768")
    page.locator(key_selector("target_collectives")).scroll_into_view_if_needed()
    screenshot(page, "target-collectives-1024x768")
    assert_no_exception(page)


def test_stop_ends_a_running_compile(blank_page, target_app_url):
    """A 12-layer transformer takes long enough to compile to be stopped while the child process runs."""
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    query = (
        "?name=stop-me&mesh=2x4&axes=data,model&rules=batch:data;mlp:model;heads:model"
        "&model=transformer&options=layers:12;d_model:512;mlp_dim:2048;scan:false"
    )
    open_app(page, target_app_url + "/" + query)
    choose(page, "target_choice", "v5litepod-8")
    page.locator(f"{key_selector('target_compile_button')} button").click()
    expect(page.locator(MAIN)).to_contain_text(re.compile(r"(trace|lower|compile)\*?\*? · [\d.]+ s elapsed"), timeout=COMPILE_TIMEOUT_MS)
    page.locator(f"{key_selector('target_stop_button')} button").first.click()
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text("The last compile was stopped.")
    expect(page.locator(key_selector("target_verdict"))).to_have_count(0)
    assert_no_exception(page)
