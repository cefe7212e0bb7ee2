"""Explicit axes in a real Chromium: a model written for them, opened on Auto axes, fixed with one button.

The vendored Flax Gemma example (a user factory, allow-listed for this module's own server) sets
shardings in its values' types, so on an Auto mesh the sidebar says it needs Explicit axes and offers
a button; after it the Layout page lists every value with its type, and the link carries the types.
"""

import os
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import (
    EXCEPTION,
    MAIN,
    RERUN_TIMEOUT_MS,
    SIDEBAR,
    assert_no_exception,
    click_button,
    key_selector,
    new_page,
    open_app,
    screenshot,
    server_log,
    sidebar_errors,
    streamlit_server,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

FACTORY = "tests.external.factories:make_flax_gemma"
GEMMA_LINK = f"/?name=gemma&mesh=2x4&axes=data,model&rules=&model={FACTORY}&options="
VALUES = key_selector("values_table")
COUNT = re.compile(r"^([\d,]+) value\(s\) in ([\d,]+) place\(s\); ([\d,]+) imply communication\.$")
SIZES = ((1024, 768), (1440, 900))


@pytest.fixture(scope="module")
def explicit_app_url():
    """A server of its own: the shared one does not allow-list Gemma's factory."""
    previous = os.environ.get("EXPLORER_ALLOWED_FACTORIES")
    os.environ["EXPLORER_ALLOWED_FACTORIES"] = FACTORY
    try:
        with streamlit_server() as url:
            yield url
            assert "Traceback" not in server_log(url)
    finally:
        if previous is None:
            os.environ.pop("EXPLORER_ALLOWED_FACTORIES")
        else:
            os.environ["EXPLORER_ALLOWED_FACTORIES"] = previous


def values_count(page: Page) -> tuple[int, int]:
    """(values, places) from the caption under the search box."""
    caption = page.locator(f"{MAIN} [data-testid='stCaptionContainer']").filter(has_text=COUNT)
    expect(caption).to_have_count(1)
    match = COUNT.match(caption.inner_text().strip())
    return int(match[1].replace(",", "")), int(match[2].replace(",", ""))


def value_types(page: Page) -> list[str]:
    """The "type" column of the values table, from glide's accessible table (the rows in view)."""
    return page.evaluate(
        """(table) => {
            const header = [...document.querySelectorAll(table + ' th')].map((th) => th.textContent.trim());
            const column = header.indexOf('type');
            return [...document.querySelectorAll(table + ' td[data-testid^="glide-cell-' + column + '-"]')]
                .map((cell) => cell.textContent);
        }""",
        VALUES,
    )


def expect_values_view(page: Page) -> None:
    main = page.locator(MAIN)
    expect(main.get_by_role("heading", name="Values and their types")).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    expect(page.locator(f"{VALUES} [data-testid='stDataFrameResizable']")).to_be_visible()
    types = value_types(page)
    assert types, "the values table shows no type"
    assert any("@data" in t for t in types) and any("@model" in t for t in types), types


def shoot_at_sizes(page: Page, name: str, scroll_to: str | None = None) -> None:
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(800)
        if scroll_to:
            page.locator(scroll_to).scroll_into_view_if_needed()
            page.wait_for_timeout(300)
        screenshot(page, f"explicit-{name}-{width}x{height}")
    page.set_viewport_size({"width": 1600, "height": 2600})
    page.wait_for_timeout(300)


def test_model_needing_explicit_axes_is_fixed_with_one_button_and_shared(browser: Browser, explicit_app_url: str) -> None:
    page = new_page(browser)
    try:
        # (1) Gemma on Auto axes: the model section says it needs Explicit axes and offers the fix.
        open_app(page, explicit_app_url + GEMMA_LINK)
        expect(page.locator(f"{key_selector('mesh_explicit_axes')} [data-baseweb='tag']")).to_have_count(0)
        errors = sidebar_errors(page, "model")
        expect(errors).to_have_count(1)
        expect(errors).to_contain_text("needs a mesh with Explicit axes")
        button = page.locator(f"{key_selector('make_axes_explicit')} button")
        expect(button).to_have_text("Make the mesh's axes Explicit")
        expect(page.locator(MAIN).get_by_role("heading", name="Values and their types")).to_have_count(0)
        expect(page.locator(EXCEPTION)).to_have_count(0)
        assert_no_exception(page)
        shoot_at_sizes(page, "needs-axes", scroll_to=f"{key_selector('make_axes_explicit')}")

        # (2) One click makes both axes Explicit; (3) the Layout page lists every value with its type.
        click_button(page, "make_axes_explicit")
        expect(sidebar_errors(page)).to_have_count(0)
        expect(page.locator(key_selector("make_axes_explicit"))).to_have_count(0)
        expect(page.locator(f"{key_selector('mesh_explicit_axes')} [data-baseweb='tag']")).to_have_text(["data", "model"])
        expect_values_view(page)
        total, places = values_count(page)
        assert total > 0 and places > 0
        search = page.locator(f"{key_selector('values_search')} input")
        search.fill("attention")
        search.press("Enter")
        wait_for_rerun(page)
        found, found_places = values_count(page)
        assert 0 < found < total and found_places <= places, (found, total)
        assert_no_exception(page)
        shoot_at_sizes(page, "values", scroll_to=VALUES)

        # (4) The address bar follows the layout: it carries the mesh's axis types.
        page.wait_for_function("() => new URLSearchParams(window.location.search).get('types') === 'explicit,explicit'",
                               timeout=RERUN_TIMEOUT_MS)
        link = page.url
        params = dict(parse_qsl(urlsplit(link).query))
        assert params["types"] == "explicit,explicit" and params["model"] == FACTORY, params
        assert "types=explicit,explicit" in link, link

        # (5) The link reopens the layout in a fresh session: both axes Explicit, the values there.
        reopened = new_page(browser)
        try:
            open_app(reopened, link)
            expect(reopened.locator(f"{key_selector('mesh_explicit_axes')} [data-baseweb='tag']")).to_have_text(["data", "model"])
            expect(sidebar_errors(reopened)).to_have_count(0)
            expect_values_view(reopened)
            assert values_count(reopened) == (total, places)  # a fresh session: no search typed
            expect(reopened.locator(SIDEBAR)).not_to_contain_text("needs a mesh with Explicit axes")
            assert_no_exception(reopened)
            screenshot(reopened, "explicit-reopened")
        finally:
            reopened.context.close()
        assert_no_exception(page)
    finally:
        page.context.close()
