"""Take the README tour's screenshots from a running app: ``python scripts/tour_screenshots.py PORT FOLDER``.

Start the app first, e.g. ``.venv/bin/streamlit run app.py --server.address 127.0.0.1 --server.port 8611
--server.headless true`` (8 simulated CPU devices by default), then run this from the repo root with that port and
``docs/screenshots`` as the folder. It drives Debian's headless Chromium (``/usr/bin/chromium-headless-shell``) through the browser tests'
helpers (``tests/browser``) at 1440x900, one session, as a newcomer would walk through the app:

- ``tour-layout.png``: the Layout page on its default layout (the Flax guide's MLP on a 2x4 mesh);
- ``tour-arrays.png``: further down that page, the table of arrays and the selected one's device grid;
- ``tour-target.png``: the same layout compiled for a v5litepod-8 (the Target in the sidebar): XLA's verdict;
- ``tour-timing.png``: the Timing page after timing the train step (5 steps);
- ``tour-compare.png``: Compare, the default layout against a batch-only one (by its link), after a short race;
- ``tour-advisor.png``: the Advisor for a v5litepod-8 with one compile, its ranked table;
- ``tour-share.png``: back on the Layout page, the sidebar's Share section with its readable link open.

Each picture is a PNG under ``MAX_BYTES`` (quantised to 256 colours where the plain one is larger). A page that
shows a Streamlit exception stops the script. Prints each file with its size.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: make `tests` importable

from PIL import Image  # noqa: E402  (Streamlit's own dependency)
from playwright.sync_api import Locator, Page, expect, sync_playwright  # noqa: E402

from tests import browser  # noqa: E402
from tests.browser import key_selector  # noqa: E402

SCREEN = {"width": 1440, "height": 900}
MAX_BYTES = 250 * 1024
TARGET = "v5litepod-8"
# The default layout with only the batch rule: the hidden dimension is no longer sharded over model.
BATCH_ONLY = "?name=seed%20batch-only&mesh=2x4&axes=data,model&rules=batch:data&model=mlp&options=batch:8;layers:4;depth:1024;scan:false"


def scroll_to(page: Page, selector: str) -> None:
    """Bring the first element matching ``selector`` to the top of the view, just below Streamlit's header."""
    page.locator(selector).first.evaluate(
        "(element) => { element.style.scrollMarginTop = '70px'; element.scrollIntoView({block: 'start'}); }"
    )
    page.wait_for_timeout(400)


def capture(page: Page, name: str, folder: Path) -> Path:
    """The viewport as ``folder/name.png``: no focus ring, no hover, no exception; small enough for the README."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.mouse.move(SCREEN["width"] - 5, SCREEN["height"] - 5)
    page.wait_for_timeout(300)
    browser.assert_no_exception(page)
    path = browser.screenshot(page, name, folder)
    if path.stat().st_size > MAX_BYTES:
        with Image.open(path) as image:
            image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def finished(page: Page, done: Locator) -> None:
    """Wait for a compile, a timing or a search: until ``done`` shows and the rerun after it has settled."""
    expect(done.first).to_be_visible(timeout=browser.RUN_TIMEOUT_MS)
    browser.wait_for_rerun(page, timeout_ms=browser.RUN_TIMEOUT_MS)


def layout_page(page: Page, url: str, folder: Path) -> Path:
    browser.open_app(page, url)
    return capture(page, "tour-layout", folder)


def arrays_table(page: Page, folder: Path) -> Path:
    scroll_to(page, f"{browser.MAIN} h3:has-text('Arrays')")
    return capture(page, "tour-arrays", folder)


def compile_for_target(page: Page, folder: Path) -> Path:
    browser.choose(page, "target_choice", TARGET)
    if page.locator(key_selector("target_verdict")).count() == 0:  # else read from the disk cache
        page.locator(f"{key_selector('target_compile_button')} button").click()
    finished(page, page.locator(key_selector("target_verdict")))
    scroll_to(page, f"{browser.MAIN} h3:has-text('Planned for')")
    return capture(page, "tour-target", folder)


def timing_page(page: Page, folder: Path) -> Path:
    browser.choose(page, "target_choice", "this process's devices")
    browser.go_to_page(page, "Timing", f"{key_selector('time_button')} button")
    browser.set_text(page, "timing_steps", "5")
    page.locator(f"{key_selector('time_button')} button").click()
    finished(page, page.get_by_test_id("stMetric").filter(has_text="Median step"))
    return capture(page, "tour-timing", folder)


def compare_page(page: Page, url: str, folder: Path) -> Path:
    browser.go_to_page(page, "Compare", f"{key_selector('compare_links')} textarea")
    browser.set_text_area(page, "compare_links", url + "/" + BATCH_ONLY)
    expect(page.get_by_role("heading", name="Arrays sharded differently", exact=False)).to_be_visible()
    browser.set_text(page, "race_rounds", "2")
    browser.set_text(page, "race_steps", "2")
    page.locator(f"{key_selector('race_button')} button").click()
    finished(page, page.locator(key_selector("race_chart")))
    scroll_to(page, f"{browser.MAIN} h1")
    return capture(page, "tour-compare", folder)


def advisor_page(page: Page, folder: Path) -> Path:
    browser.go_to_page(page, "Advisor", f"{browser.MAIN} h1:has-text('Layout advisor')")
    browser.choose(page, "target_choice", TARGET)
    finished(page, browser.start_advisor(page, compiles=1).filter(has_text="Done"))
    scroll_to(page, f"{browser.MAIN} [data-testid='stExpander']")
    return capture(page, "tour-advisor", folder)


def share_section(page: Page, folder: Path) -> Path:
    browser.choose(page, "target_choice", "this process's devices")
    browser.go_to_page(page, "Layout", f"{browser.MAIN} h1:has-text('Partition Explorer')")
    browser.toggle_expander(page, "Readable link")
    expect(page.locator(f"{key_selector('share_link')} code")).to_be_visible()
    scroll_to(page, f"{browser.SIDEBAR} h3:has-text('Share')")
    return capture(page, "tour-share", folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int, help="the port of a running `streamlit run app.py`")
    parser.add_argument("folder", type=Path, help="where to save the PNGs, e.g. docs/screenshots")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    with sync_playwright() as playwright:
        chromium = browser.launch_chromium(playwright)
        try:
            page = browser.new_page(chromium, SCREEN)
            saved = [layout_page(page, url, args.folder), arrays_table(page, args.folder), compile_for_target(page, args.folder)]
            saved.append(timing_page(page, args.folder))
            saved += [compare_page(page, url, args.folder), advisor_page(page, args.folder), share_section(page, args.folder)]
        finally:
            chromium.close()
    for path in saved:
        print(f"{path}: {path.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
