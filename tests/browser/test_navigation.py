"""Moving between pages through the sidebar navigation keeps the layout being edited.

Streamlit ties a widget's identity to the page that draws it, so the sidebar's widgets
are new widgets on every page; the app carries their values (and the rules editor's
edits) over. Opening a page by its address restores the layout from the link instead:
that is tested in test_share.py.
"""

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    GRID,
    MAIN,
    assert_no_exception,
    edit_rule_axes,
    go_to_page,
    key_selector,
    expect_rule_rows,
    screenshot,
    selected_summary,
    server_log,
    set_text,
    shown_layout,
)

pytestmark = pytest.mark.browser

# (link, what shows once the page has drawn, whether its main area names the layout)
PAGES = [
    ("Timing", f"{key_selector('time_button')} button", True),
    ("Compare", f"{MAIN} h1", False),  # names layouts only once two are picked
    ("Layout", GRID, True),
]


def test_edits_survive_a_round_of_the_pages(page: Page, app_url: str) -> None:
    go_to_page(page, "Timing", PAGES[0][1])
    set_text(page, "timing_steps", "7")
    go_to_page(page, "Layout", GRID)
    set_text(page, "layout_name", "carried-over")
    set_text(page, "option::mlp::depth", "512")
    edit_rule_axes(page, 1, ["data"])
    expect(selected_summary(page)).to_contain_text("spec P(None, 'data')")
    edited = shown_layout(page)
    assert edited["name"] == "carried-over" and edited["model"]["options"]["depth"] == 512
    assert edited["rules"] == [["batch", "data"], ["hidden", "data"]]

    for link, ready, names_layout in PAGES:
        go_to_page(page, link, ready)
        assert shown_layout(page) == edited, link
        expect(page.locator(MAIN)).not_to_contain_text("is not valid")
        if names_layout:
            expect(page.locator(MAIN)).to_contain_text("carried-over")
        assert_no_exception(page)
        if link == "Timing":
            screenshot(page, "browser-navigation-timing")
    expect_rule_rows(page, [["0", "batch", "data"], ["1", "hidden", "data"]])
    expect(selected_summary(page)).to_contain_text("spec P(None, 'data')")
    expect(selected_summary(page)).to_contain_text("512")
    go_to_page(page, "Timing", PAGES[0][1])
    expect(page.locator(f"{key_selector('timing_steps')} input")).to_have_value("7")  # a page's own input too

    log = server_log(app_url)
    assert "Traceback" not in log and "Session State API" not in log, log


def test_a_deep_link_as_a_fresh_servers_first_request_runs_through_app_py(blank_page: Page) -> None:
    """The pages live in views/, not pages/: Streamlit would serve pages/ directly before app.py's navigation ran."""
    from tests.browser import RERUN_TIMEOUT_MS, streamlit_server

    with streamlit_server() as url:
        blank_page.goto(f"{url}/Timing")
        sidebar = blank_page.get_by_test_id("stSidebar")
        expect(sidebar).to_contain_text("Devices: 8 × cpu", timeout=RERUN_TIMEOUT_MS)
        expect(blank_page.get_by_test_id("stSidebarNav")).to_contain_text("Arrays")
        assert_no_exception(blank_page)
