"""The browser tests' fixtures: the shared app server, Chromium, and fresh pages (helpers in ``__init__.py``)."""

from __future__ import annotations

from typing import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.browser import checked_server, launch_chromium, new_page, open_app


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


@pytest.fixture
def blank_page(browser: Browser) -> Iterator[Page]:
    """A page in a fresh browser context that has loaded nothing yet."""
    page = new_page(browser)
    try:
        yield page
    finally:
        page.context.close()


@pytest.fixture
def page(blank_page: Page, app_url: str) -> Page:
    """The Layout page, loaded in a fresh session, with its device grid drawn."""
    open_app(blank_page, app_url)
    return blank_page
