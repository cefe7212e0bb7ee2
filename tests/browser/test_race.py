"""The Compare page's race in a real Chromium: it shows its true stage, and Stop keeps the rounds finished."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    RUN_TIMEOUT_MS,
    assert_no_exception,
    expect_tables_fit,
    go_to_page,
    key_selector,
    screenshot,
    set_text,
    set_text_area,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

OTHER = "?name=data-only&mesh=2x4&axes=data,model&rules=batch:data&model=mlp&options=batch:8;layers:2;depth:256;scan:false"


def test_race_shows_its_stage_and_stops_keeping_finished_rounds(page: Page) -> None:
    go_to_page(page, "Compare", "h1")
    set_text_area(page, "compare_links", OTHER)  # raced against the current layout, the guide's
    set_text(page, "race_rounds", "50")
    set_text(page, "race_steps", "5")
    page.locator(f"{key_selector('race_button')} button").click()
    stage = page.get_by_text(re.compile(r"round \d+ of 50 · .+: (compiling|initialising|warming up|timing)…"))
    expect(stage.first).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_text(re.compile(r"round 2 of 50 · "))).to_be_visible(timeout=RUN_TIMEOUT_MS)
    screenshot(page, "browser-race-running")
    page.locator(f"{key_selector('race_stop')} button").first.click()
    wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
    expect(page.get_by_text(re.compile(r"Stopped after [1-9]\d* of 50 rounds"))).to_be_visible()
    expect(page.locator(".st-key-race_chart")).to_be_visible()
    assert_no_exception(page)
    screenshot(page, "browser-race-stopped")
    # At a laptop's size the arrays sharded differently show their spec in both layouts (the point of the page),
    # and the timings table its whole sentences.
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(500)
        expect_tables_fit(page, key_selector("spec_diff"))
        expect_tables_fit(page, key_selector("compare_timings"))
        page.locator(key_selector("spec_diff")).scroll_into_view_if_needed()
        screenshot(page, f"compare-{width}x{height}")
