"""Explicit axes in a real Chromium: a model written for them, opened on Auto axes, fixed with one button; and the
built-in transformer opened on Explicit axes from the sidebar's Examples, as a newcomer would, and shared.

The vendored Flax Gemma example (a user factory, allow-listed for this module's own server) sets
shardings in its values' types, so on an Auto mesh the sidebar says it needs Explicit axes and offers
a button; after it the Layout page lists every value with its type, and the link carries the types.
"""

import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser import (
    EXCEPTION,
    MAIN,
    RERUN_TIMEOUT_MS,
    assert_no_exception,
    checked_server,
    click_button,
    expect_tables_fit,
    key_selector,
    choose,
    new_page,
    open_app,
    rule_rows,
    screenshot,
    sidebar_errors,
    toggle_expander,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

FACTORY = "tests.external.factories:make_flax_gemma"
GEMMA_LINK = f"/?name=gemma&mesh=2x4&axes=data,model&rules=&model={FACTORY}&options="
VALUES_TITLE = "Values and their types"
EXPLICIT_TAGS = f"{key_selector('mesh_explicit_axes')} [data-tag] > span[title]"  # the multiselect's chips
COUNT = re.compile(r"^([\d,]+) value\(s\) in ([\d,]+) place\(s\); ([\d,]+) imply communication\.$")
SIZES = ((1024, 768), (1440, 900))


@pytest.fixture(scope="module")
def explicit_app_url():
    """A server of its own: the shared one does not allow-list Gemma's factory."""
    with checked_server(EXPLORER_ALLOWED_FACTORIES=FACTORY) as url:
        yield url


def values_count(page: Page) -> tuple[int, int]:
    """(values, places) from the caption under the search box."""
    caption = page.locator(f"{MAIN} [data-testid='stCaptionContainer']").filter(has_text=COUNT)
    expect(caption).to_have_count(1)
    match = COUNT.match(caption.inner_text().strip())
    return int(match[1].replace(",", "")), int(match[2].replace(",", ""))


def values_table(page: Page) -> Locator:
    """The values dataframe (in its keyed container: a dataframe without selection gets no st-key class)."""
    return page.locator(f"{key_selector('values_table')} [data-testid='stDataFrame']")


def value_types(page: Page) -> list[str]:
    """The "type" column of the values table, from glide's accessible table (the rows in view).

    Glide renders that table after the canvas, so each part is awaited before it is read.
    """
    table = values_table(page)
    header = table.locator("th").filter(has_text=re.compile(r"^\s*type\s*$"))
    expect(header).to_have_count(1, timeout=RERUN_TIMEOUT_MS)
    column = int(header.get_attribute("aria-colindex")) - 1
    cells = table.locator(f'td[data-testid^="glide-cell-{column}-"]')
    expect(cells.first).to_be_attached(timeout=RERUN_TIMEOUT_MS)
    return cells.all_text_contents()


def search_values(page: Page, text: str) -> None:
    """Type ``text`` in the values search and wait until the count under it has changed (the search applied: a rerun
    that has not yet drawn the filtered table was read by this test once, on a loaded machine)."""
    caption = page.locator(f"{MAIN} [data-testid='stCaptionContainer']").filter(has_text=COUNT)
    before = caption.inner_text().strip()
    search = page.locator(f"{key_selector('values_search')} input")
    search.fill(text)
    search.press("Enter")
    wait_for_rerun(page)
    expect(caption).not_to_have_text(before, timeout=RERUN_TIMEOUT_MS)


def expect_values_view(page: Page, search: str | None = None) -> None:
    """The values heading and table, its rows in view typed over both mesh axes (those matching ``search``, if given)."""
    expect(page.locator(MAIN).get_by_role("heading", name=VALUES_TITLE, exact=True)).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    expect(values_table(page)).to_be_visible()
    if search is not None:
        search_values(page, search)
    types = value_types(page)
    for _ in range(40):  # glide's accessible table follows its canvas: read again until it shows the filtered rows
        if any("@data" in t for t in types) and any("@model" in t for t in types):
            break
        page.wait_for_timeout(250)
        types = value_types(page)
    assert types, "the values table shows no type"
    assert any("@data" in t for t in types) and any("@model" in t for t in types), types


def shoot_at_sizes(page: Page, name: str, scroll_to: Locator | None = None, fits: str | None = None) -> None:
    """Screenshots at a laptop's and a desktop's size, ``scroll_to`` in view, the tables under ``fits`` with no sideways
    scroll at either; then back to the tall viewport."""
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(800)
        if fits is not None:
            expect_tables_fit(page, fits)
        if scroll_to is not None:
            scroll_to.scroll_into_view_if_needed()
            page.wait_for_timeout(300)
        screenshot(page, f"explicit-{name}-{width}x{height}")
    page.set_viewport_size({"width": 1600, "height": 2600})
    page.wait_for_timeout(300)


def test_model_needing_explicit_axes_is_fixed_with_one_button_and_shared(browser: Browser, blank_page: Page, explicit_app_url: str) -> None:
    page = blank_page
    # (1) Gemma on Auto axes: the model section says it needs Explicit axes and offers the fix.
    open_app(page, explicit_app_url + GEMMA_LINK)
    expect(page.locator(EXPLICIT_TAGS)).to_have_count(0)
    errors = sidebar_errors(page, "model")
    expect(errors).to_have_count(1)
    expect(errors).to_contain_text("needs a mesh with Explicit axes")
    button = page.locator(f"{key_selector('make_axes_explicit')} button")
    expect(button).to_have_text("Make the mesh's axes Explicit")
    expect(page.locator(MAIN).get_by_role("heading", name=VALUES_TITLE, exact=True)).to_have_count(0)
    # The main area shows the last valid layout; it offers the same fix, in view without scrolling the sidebar.
    expect(page.locator(MAIN)).to_contain_text("The layout in the sidebar has 1 problem (model)")
    expect(page.locator(f"{key_selector('make_axes_explicit_main')} button")).to_have_text("Make the mesh's axes Explicit")
    expect(page.locator(EXCEPTION)).to_have_count(0)
    assert_no_exception(page)
    shoot_at_sizes(page, "landing")  # what a user sees first: the top of both columns
    shoot_at_sizes(page, "needs-axes", scroll_to=button)

    # (2) One click makes both axes Explicit; (3) the Layout page lists every value with its type.
    click_button(page, "make_axes_explicit")
    expect(sidebar_errors(page)).to_have_count(0)
    expect(page.locator(key_selector("make_axes_explicit"))).to_have_count(0)
    expect(page.locator(key_selector("make_axes_explicit_main"))).to_have_count(0)
    expect(page.locator(EXPLICIT_TAGS)).to_have_text(["data", "model"])
    expect_values_view(page)
    total, places = values_count(page)
    assert total > 0 and places > 0
    search_values(page, "attention")
    found, found_places = values_count(page)
    assert 0 < found < total and found_places <= places, (found, total)
    assert_no_exception(page)
    # where, type and communication in view at 1024x768 (only "where" and "type" showed), the rest one click away
    shoot_at_sizes(page, "values", scroll_to=values_table(page), fits=key_selector("values_table"))

    # (4) The links the app offers carry the mesh's axis types: the address bar (which follows the layout)
    # and the readable link of the Share section.
    page.wait_for_function(
        "() => new URLSearchParams(window.location.search).get('types') === 'explicit,explicit'", timeout=RERUN_TIMEOUT_MS
    )
    params = dict(parse_qsl(urlsplit(page.url).query))
    assert params["types"] == "explicit,explicit" and params["model"] == FACTORY, params
    toggle_expander(page, "Readable link")
    shown_link = page.locator(".st-key-share_link code").inner_text().strip()
    assert shown_link.startswith(explicit_app_url + "/?") and "&types=explicit,explicit&" in shown_link, shown_link
    assert dict(parse_qsl(urlsplit(shown_link).query)) == params

    # (5) Each link reopens the layout in a fresh session: both axes Explicit, no error, the values there.
    # One fresh context; each goto opens a new Streamlit session in it (the second link loads no scripts again).
    reopened = new_page(browser)
    try:
        for link in (shown_link, page.url):
            open_app(reopened, link)
            expect(reopened.locator(EXPLICIT_TAGS)).to_have_text(["data", "model"])
            expect(sidebar_errors(reopened)).to_have_count(0)
            expect(reopened.locator(key_selector("make_axes_explicit"))).to_have_count(0)
            expect_values_view(reopened)
            assert values_count(reopened) == (total, places)  # a fresh session: no search typed
            assert_no_exception(reopened)
            values_table(reopened).scroll_into_view_if_needed()
            screenshot(reopened, "explicit-reopened")
    finally:
        reopened.context.close()
    assert_no_exception(page)


def test_a_newcomer_opens_the_transformer_on_explicit_axes_sees_its_values_and_shares_it(
    browser: Browser, blank_page: Page, app_url: str
) -> None:
    page = blank_page
    # (1) The app's first page; one pick in the sidebar's Examples opens the transformer on Explicit axes.
    open_app(page, app_url)
    expect(page.locator(EXPLICIT_TAGS)).to_have_count(0)
    choose(page, "example_layout", "Transformer, Explicit axes")
    expect(page.locator(EXPLICIT_TAGS)).to_have_text(["data", "model"])
    expect(page.locator(f"{key_selector('model_name')} input")).to_have_value(re.compile(r"^transformer"))
    expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value("transformer-explicit-2x4")
    expect(page.locator(f"{key_selector('example_layout')} input")).to_have_value("")  # the pick cleared itself
    expect(sidebar_errors(page)).to_have_count(0)
    # One warning only, and a true one: the embedding lookup (``.at[tokens].get(out_sharding=)``) runs under auto_axes,
    # which reshards the whole table to replicated before the gather (issue 36's implicit communication).
    warnings = page.locator(f"{MAIN} [data-testid='stAlertContentWarning']")
    expect(warnings).to_have_count(1)
    expect(warnings).to_contain_text("Largest fully replicated arrays")
    # (2) The per-value view: every value of the forward pass with the sharding in its type; the attention's typed
    # over both axes (the first values, the embedding lookup's, are on JAX's Auto copy of the mesh).
    expect(page.locator(MAIN).get_by_role("heading", name=VALUES_TITLE, exact=True)).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    total, places = values_count(page)
    expect_values_view(page, search="attention")
    found, found_places = values_count(page)
    assert 0 < found < total and 0 < found_places < places, (found, total)
    rules = rule_rows(page)
    assert [row[1:] for row in rules][:2] == [["batch", "data"], ["mlp", "model"]], rules
    assert_no_exception(page)
    shoot_at_sizes(page, "transformer-values", scroll_to=values_table(page))

    # (3) Shared: the address bar carries the layout; opened in a fresh page it shows the same one.
    page.wait_for_function(
        "() => new URLSearchParams(window.location.search).get('types') === 'explicit,explicit'", timeout=RERUN_TIMEOUT_MS
    )
    params = dict(parse_qsl(urlsplit(page.url).query))
    assert params["model"] == "transformer" and params["name"] == "transformer-explicit-2x4", params
    reopened = new_page(browser)
    try:
        open_app(reopened, page.url)
        expect(reopened.locator(EXPLICIT_TAGS)).to_have_text(["data", "model"])
        expect(sidebar_errors(reopened)).to_have_count(0)
        expect(reopened.locator(MAIN).get_by_role("heading", name=VALUES_TITLE, exact=True)).to_be_visible(timeout=RERUN_TIMEOUT_MS)
        assert values_count(reopened) == (total, places)  # a fresh session: no search typed
        expect_values_view(reopened, search="attention")
        assert values_count(reopened) == (found, found_places)
        assert rule_rows(reopened) == rules
        assert dict(parse_qsl(urlsplit(reopened.url).query)) == params  # the address bar follows the layout shown
        assert_no_exception(reopened)
    finally:
        reopened.context.close()
    assert_no_exception(page)
