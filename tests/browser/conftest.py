"""The browser tests' fixtures: the shared app server, Chromium, and fresh pages (helpers in ``__init__.py``)."""

from __future__ import annotations

from typing import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.browser import VIEWPORT, checked_server, launch_chromium, new_page, open_app


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """The app's server, shared by the browser tests; at the end, its log must show no traceback."""
    with checked_server() as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def warm_page(browser: Browser) -> Iterator[list[Page]]:
    """One page kept for the session (each xdist worker has its own), so that its browser context keeps the HTTP cache:
    a fresh context loads and parses Streamlit's and Plotly's scripts anew, ~3-4 s more per page on a loaded machine.

    A list holding the page, so that a test that closed it gets a new one.
    """
    holder = [new_page(browser)]
    try:
        yield holder
    finally:
        holder[0].context.close()


@pytest.fixture
def blank_page(browser: Browser, warm_page: list[Page]) -> Iterator[Page]:
    """A page that shows nothing yet: the next ``goto`` opens a fresh Streamlit session (a new websocket; session
    state lives on the server and dies with the old one), and the init scripts run anew (the exception count starts
    at 0). Only the browser's cache and local storage carry over from the test before, as for a user's next tab.
    A test may resize it; at the end it leaves the app (closing the session, as closing a context did).
    """
    if warm_page[0].is_closed():
        warm_page[0].context.close()
        warm_page[0] = new_page(browser)
    page = warm_page[0]
    page.set_viewport_size(VIEWPORT)
    page.goto("about:blank")
    yield page
    if not page.is_closed():
        page.goto("about:blank")


@pytest.fixture
def page(blank_page: Page, app_url: str) -> Page:
    """The Layout page, loaded in a fresh session, with its device grid drawn."""
    open_app(blank_page, app_url)
    return blank_page
