"""Support for the real-browser tests: a Streamlit server, Chromium, reruns, screenshots, the rules editor.

The tests in this folder import what they need from here (``from tests.browser import ...``), as
``scripts/screenshots.py`` does; their fixtures (``app_url``, ``browser``, ``blank_page``, ``page``)
are in ``conftest.py`` beside them. The top-level ``conftest.py`` registers this package for
pytest's assert rewriting.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, Locator, Page, Playwright, expect

from explorer import children

from tests.paths import ROOT

REPO = ROOT
SCREENSHOTS = REPO / "screenshots"
# Debian's headless shell of Chromium (the same Blink and V8, without the browser's own UI process): on
# tests/browser/test_layout.py the machine's busy CPU went from 100-102 s with Debian's chromium (its new headless mode,
# a whole browser) to 84 s, and every browser test passed on both.
CHROMIUM = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Streamlit scrolls inside its own container, so a full_page screenshot shows no more
# than the viewport: a tall viewport is what captures the whole page.
VIEWPORT = {"width": 1600, "height": 2600}
DEVICES = 8
# Waits are for a slow or loaded machine, not a measure of speed: a test fails on wrong
# behaviour, never because the machine is busy. Scale them all with EXPLORER_BROWSER_WAIT_S.
WAIT_ENV = "EXPLORER_BROWSER_WAIT_S"
WAIT_S = float(os.environ.get(WAIT_ENV) or 180)
SERVER_START_TIMEOUT = WAIT_S
RERUN_TIMEOUT_MS = int(WAIT_S * 1000)  # one rerun, the first chart, a page switch
RUN_TIMEOUT_MS = int(WAIT_S * 4000)  # a compile and a timing run
ANSWER_TIMEOUT_MS = int(WAIT_S * 1000 / 9)  # what a user waits "seconds" for (20 s at the default): Stop's result

GRID = ".st-key-sharding_grid"
SIDEBAR = "[data-testid='stSidebar']"
MAIN = "[data-testid='stMain']"
EXCEPTION = "[data-testid='stException']"
ERROR = "[data-testid='stAlertContentError']"
SELECTED_SUMMARY = ".st-key-selected_summary"
WARNINGS = ".st-key-warnings"
RULES_EDITOR = ".st-key-rules_editor"
RULES_CANVAS = f"{RULES_EDITOR} [data-testid='stDataFrameResizable']"
# The sidebar sections that keep a message slot under their widgets (st.container(key="<section>_messages")).
SECTIONS = ("name", "mesh", "rules", "model")
RULE_COLUMNS = {"#": 1, "logical name": 2, "mesh axes": 3}  # glide's column 0 is the row marker
HEADER_HEIGHT = 35
ROW_HEIGHT = 35

# The app asks for a 320 px sidebar (set_page_config), but Streamlit reads that width only
# when the sidebar mounts; with the multipage navigation the sidebar often mounts before the
# page config arrives and keeps the default width. A width saved in localStorage wins.
SIDEBAR_WIDTH = 320
PIN_SIDEBAR_WIDTH = f"window.localStorage.setItem('sidebarWidth', '{SIDEBAR_WIDTH}');"

# No CSS animations or transitions: Streamlit's spinners and running icons otherwise have headless Chromium (no GPU)
# composite frames in software for as long as a script runs. On tests/browser/test_layout.py alone, Chromium's GPU
# process took 12-13 CPU-s with them and 4 without (the renderer 47 -> 43), of about 85 CPU-s for the whole file. What
# the tests read (text, widgets, tiles, screenshots of settled pages) does not move.
NO_ANIMATIONS = """
const noAnimations = () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after {animation: none !important; transition: none !important;}';
  (document.head || document.documentElement).appendChild(style);
};
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', noAnimations); else noAnimations();
"""

# Counts every stException that is ever added to the page, even one a later rerun removes.
EXCEPTION_WATCH = """
window.__stExceptions = 0;
new MutationObserver((records) => {
  for (const record of records) {
    for (const node of record.addedNodes) {
      if (node.nodeType !== 1) continue;
      if (node.matches('[data-testid="stException"]') || node.querySelector('[data-testid="stException"]')) {
        window.__stExceptions += 1;
      }
    }
  }
}).observe(document, {childList: true, subtree: true});
"""


# --- the server -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def streamlit_server(devices: int = DEVICES) -> Iterator[str]:
    """Run ``streamlit run app.py`` on a free loopback port; yield its URL; always stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-c",
        # ``python -m streamlit``, with ``explorer`` imported first: its ``children.follow_parent`` ties the server to
        # this worker from the start (else only once a session has run app.py: a server no page had opened outlived a
        # worker killed with the suite)
        "import explorer; from streamlit.web.cli import main; main(prog_name='streamlit')",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
    ]
    env = {**os.environ, "EXPLORER_CPU_DEVICES": str(devices)}
    with tempfile.TemporaryFile(mode="w+") as log:
        # through explorer.children: the server ends with this worker, however it ends (a suite stopped by a signal
        # left servers running before)
        process = children.start(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _SERVER_LOGS[url] = log
        try:
            _wait_healthy(url, process, log)
            yield url
        finally:
            _stop(process)
            del _SERVER_LOGS[url]


_SERVER_LOGS: dict = {}


def server_log(url: str) -> str:
    """What the server at ``url`` has printed so far (stdout and stderr)."""
    log = _SERVER_LOGS[url]
    log.flush()
    log.seek(0)
    return log.read()


@contextmanager
def checked_server(**environ: str) -> Iterator[str]:
    """``streamlit_server`` started with ``environ`` set (in this process too, until it stops); at the end its log
    must show no traceback.

    With no ``environ`` it is the shared ``app_url`` server; a module that needs what that server must not
    share (its own compile cache, library folder, allow-listed factories) starts one of its own with them.
    """
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        with streamlit_server() as url:
            yield url
            log = server_log(url)
            assert "Traceback" not in log, f"the server printed a traceback during the browser tests:\n{log}"


def _wait_healthy(url: str, process: subprocess.Popen, log) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"streamlit exited with {process.returncode}:\n{log.read()}")
        try:
            with opener.open(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    log.seek(0)
    raise RuntimeError(f"streamlit did not become healthy at {url} in {SERVER_START_TIMEOUT:.0f} s:\n{log.read()}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# --- the browser --------------------------------------------------------------------------


def launch_chromium(playwright: Playwright) -> Browser:
    """Debian's headless shell of Chromium (Playwright's own download is not available here)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


def new_page(browser: Browser, viewport: dict[str, int] = VIEWPORT) -> Page:
    """A page in a fresh context (so a fresh Streamlit session) that counts exception boxes."""
    context = browser.new_context(viewport=viewport)
    context.add_init_script(EXCEPTION_WATCH)
    context.add_init_script(PIN_SIDEBAR_WIDTH)
    context.add_init_script(NO_ANIMATIONS)
    return context.new_page()


def open_app(page: Page, url: str) -> None:
    """Load the Layout page (``url`` may carry a layout link) and wait until the first run has drawn the device grid."""
    page.goto(url)
    expect(grid_labels(page).first).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    wait_for_rerun(page)


def open_timing(page: Page, app_url: str) -> None:
    """Load the Timing page and wait until its first run has drawn the "Time train step" button."""
    page.goto(f"{app_url}/Timing")
    expect(page.locator(f"{key_selector('time_button')} button")).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    wait_for_rerun(page)


def go_to_page(page: Page, link: str, ready: str) -> None:
    """Follow the sidebar navigation link ``link`` (as a user does: same session, no reload) until ``ready`` shows."""
    page.locator(f"{SIDEBAR} [data-testid='stSidebarNav']").get_by_role("link", name=link, exact=True).click()
    expect(page.locator(ready).first).to_be_visible(timeout=RERUN_TIMEOUT_MS)
    wait_for_rerun(page)


def wait_for_rerun(page: Page, settle_ms: int = 300, timeout_ms: int = RERUN_TIMEOUT_MS) -> None:
    """Wait until Streamlit has finished rerunning and the page has settled.

    A rerun starts a round trip after the widget changes, so wait a little first;
    then until the app says it is not running, the status widget shows no running
    icon and no element is still marked stale; then let Plotly draw.
    """
    page.wait_for_timeout(settle_ms)
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            const state = app && app.getAttribute('data-test-script-state');
            const status = document.querySelector('[data-testid="stStatusWidget"]');
            const statusRunning = status !== null && (
                /Running/.test(status.innerText) || status.querySelector('[data-testid="stStatusWidgetRunningIcon"]') !== null
            );
            const running = state === 'running' || state === 'rerunRequested' || statusRunning;
            return !running && document.querySelectorAll('[data-stale="true"]').length === 0;
        }""",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(settle_ms)


def exceptions_seen(page: Page) -> int:
    """How many stException elements have appeared since the page was opened."""
    return page.evaluate("window.__stExceptions")


def assert_no_exception(page: Page) -> None:
    """No Streamlit exception box now, nor at any moment since the page was opened."""
    assert exceptions_seen(page) == 0, "a Streamlit exception box appeared at some point"
    expect(page.locator(EXCEPTION)).to_have_count(0)


def screenshot(page: Page, name: str, directory: Path = SCREENSHOTS) -> Path:
    """Save the viewport (tall enough for the whole page) as ``<directory>/<name>.png``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=str(path))
    return path


# --- reading the page -------------------------------------------------------------------------


def grid_labels(page: Page) -> Locator:
    """The device-id labels of the device grid's blocks, in drawing order (row by row)."""
    return page.locator(f"{GRID} .annotation-text")


def grid_label_centres(page: Page) -> list[tuple[float, float]]:
    centres = []
    for box in (label.bounding_box() for label in grid_labels(page).all()):
        centres.append((box["x"] + box["width"] / 2, box["y"] + box["height"] / 2))
    return centres


def grid_axis_titles(page: Page) -> tuple[str, str]:
    """(column title, row title) of the device grid, e.g. ``dim 1 'hidden' · 1024 → model``."""
    grid = page.locator(GRID)
    return grid.locator(".g-xtitle").first.text_content(), grid.locator(".g-ytitle").first.text_content()


def sidebar_errors(page: Page, section: str | None = None) -> Locator:
    """Error boxes in the sidebar, or only those in one section's message slot (``"mesh"``, ``"rules"``, …)."""
    if section is None:
        return page.locator(f"{SIDEBAR} {ERROR}")
    assert section in SECTIONS, section
    return page.locator(f"{key_selector(section + '_messages')} {ERROR}")


def main_errors(page: Page) -> Locator:
    return page.locator(f"{MAIN} {ERROR}")


def selected_summary(page: Page) -> Locator:
    """The selected array's summary line: path · kind · shape · spec · shard · replication."""
    return page.locator(SELECTED_SUMMARY)


def shown_layout(page: Page) -> dict:
    """The MLP layout the sidebar shows, read from its widgets, in the layout file format.

    Reads the name, the mesh fields, the rules editor and the MLP's option widgets;
    rules keep the file format's spelling (one axis as a string, none as null).
    """
    value = lambda key: page.locator(f"{key_selector(key)} input").input_value()  # noqa: E731
    model = value("model_name").split(":")[0]  # the selectbox shows "mlp: <description>"
    assert model == "mlp", f"shown_layout reads the MLP's options only, not {model!r}'s"
    rules = []
    for _, logical, axes in rule_rows(page):
        names = [a for a in re.split(r"[\s,]+", axes or "") if a]
        rules.append([logical, names[0] if len(names) == 1 else (names or None)])
    return {
        "name": value("layout_name"),
        "mesh": {
            "shape": [int(s) for s in re.split(r"[\s,x]+", value("mesh_shape_text")) if s],
            "axes": [a for a in re.split(r"[\s,]+", value("mesh_axes_text")) if a],
        },
        "rules": rules,
        "model": {
            "name": model,
            "options": {
                "batch": int(value("option::mlp::batch")),
                "layers": int(value("option::mlp::layers")),
                "depth": int(value("option::mlp::depth")),
                "scan": page.locator(f"{key_selector('option::mlp::scan')} input").is_checked(),
            },
        },
    }


# --- widgets -------------------------------------------------------------------------------------


def key_selector(key: str) -> str:
    """The CSS class Streamlit gives the container of a keyed widget (``a::b`` -> ``.st-key-a--b``)."""
    return ".st-key-" + re.sub(r"[^A-Za-z0-9_-]", "-", key)


def set_text(page: Page, key: str, text: str) -> None:
    """Type into a keyed st.text_input or st.number_input and submit it with Enter (that triggers the rerun)."""
    field = page.locator(f"{key_selector(key)} input")
    field.fill(text)
    field.press("Enter")
    wait_for_rerun(page)


def choose(page: Page, key: str, option: str) -> None:
    """Pick the option of a keyed st.selectbox whose label is ``option`` or starts with ``option:``."""
    page.locator(key_selector(key)).click()
    page.keyboard.type(option)  # filters the list, which may be too long to render every option
    pattern = re.compile(rf"^{re.escape(option)}(:|$)")
    page.get_by_role("option").filter(has_text=pattern).first.click()
    wait_for_rerun(page)


def set_text_area(page: Page, key: str, text: str) -> None:
    """Fill a keyed st.text_area and submit it with Ctrl+Enter (a text area takes Enter as a new line)."""
    field = page.locator(f"{key_selector(key)} textarea")
    field.fill(text)
    field.press("ControlOrMeta+Enter")
    wait_for_rerun(page)


def toggle_expander(page: Page, title: str) -> None:
    page.locator("[data-testid='stExpander'] summary").filter(has_text=title).click()
    page.wait_for_timeout(300)


def click_button(page: Page, key: str) -> None:
    page.locator(f"{key_selector(key)} button").click()
    wait_for_rerun(page)


# --- the rules editor (glide-data-grid on a canvas) ------------------------------------------
#
# The canvas cannot be queried, but glide keeps an accessible table in step with it:
# cell (column c, row r) is [data-testid=glide-cell-c-r], with aria-selected on the
# selected cell. Cells are clicked by coordinates and checked through that table.


def rule_rows(page: Page) -> list[list[str]]:
    """The rules editor's cells as text, row by row: [#, logical name, mesh axes].

    Glide's accessible table holds only the columns in view (None for the others);
    with the editor's fixed column widths all three are.
    """
    return page.evaluate(
        """(editor) => {
            const rows = {};
            for (const cell of document.querySelectorAll(editor + ' td[data-testid^="glide-cell-"]')) {
                const [column, row] = cell.dataset.testid.split('-').slice(2).map(Number);
                (rows[row] = rows[row] || [])[column - 1] = cell.textContent;
            }
            return Object.keys(rows).sort((a, b) => a - b).map((row) => rows[row]);
        }""",
        RULES_EDITOR,
    )


def expect_rule_rows(page: Page, expected: list[list[str]], prefix: bool = False, timeout_ms: int = RERUN_TIMEOUT_MS) -> None:
    """Wait until the rules editor shows ``expected`` (its first rows when ``prefix``): glide redraws after the rerun."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        rows = rule_rows(page)
        if (rows[: len(expected)] if prefix else rows) == expected:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the rules editor shows {rows}, expected {expected}")
        page.wait_for_timeout(100)


def _rule_cell(page: Page, row: int, column: int) -> Locator:
    return page.locator(f"{RULES_EDITOR} [data-testid='glide-cell-{column}-{row}']")


def select_rule_cell(page: Page, row: int, column: str) -> None:
    """Select one cell: click into its row, then walk to its column with the arrow keys.

    Only row heights are assumed (35 px); glide stretches the fixed column widths to
    the sidebar's width, so the column is reached from wherever the click landed.
    """
    box = page.locator(RULES_CANVAS).bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.55, box["y"] + HEADER_HEIGHT + ROW_HEIGHT * row + ROW_HEIGHT / 2)
    selected = page.locator(f"{RULES_EDITOR} td[aria-selected='true'][data-testid$='-{row}']")
    expect(selected, f"a click on row {row} of the rules editor selects a cell of that row").to_have_count(1)
    current = int(selected.get_attribute("data-testid").split("-")[2])
    target = RULE_COLUMNS[column]
    while current != target:
        step = 1 if current < target else -1
        page.keyboard.press("ArrowRight" if step > 0 else "ArrowLeft")
        current += step
        expect(_rule_cell(page, row, current)).to_have_attribute("aria-selected", "true")


def _next_frames(page: Page) -> None:
    """Let React commit what was just typed; an Enter sent sooner can commit the old value."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def edit_rule_text(page: Page, row: int, column: str, text: str) -> None:
    """Overwrite a text cell through glide's overlay editor, then wait for the rerun."""
    select_rule_cell(page, row, column)
    page.keyboard.press("Enter")
    expect(page.locator("textarea.gdg-input")).to_be_focused()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type(text)
    _next_frames(page)
    page.keyboard.press("Enter")
    expect(_rule_cell(page, row, RULE_COLUMNS[column])).to_have_text(text)
    wait_for_rerun(page)


def edit_rule_axes(page: Page, row: int, axes: list[str]) -> None:
    """Replace the mesh axes of a rule in the MultiselectColumn editor, then wait for the rerun.

    The editor is a react-select in glide's overlay: remove every chip, type each axis
    and pick it with Enter; clicking outside the overlay commits the cell.
    """
    select_rule_cell(page, row, "mesh axes")
    page.keyboard.press("Enter")
    editor = page.locator("[data-testid='multi-select-cell']")
    expect(editor).to_be_visible()
    chips = editor.locator("[aria-label^='Remove ']")
    for _ in range(chips.count()):
        chips.first.click()
    expect(chips).to_have_count(0)
    for axis in axes:
        page.keyboard.type(axis)
        _next_frames(page)
        page.keyboard.press("Enter")
        expect(editor.locator(f"[aria-label='Remove {axis}']")).to_have_count(1)
    page.locator("h1").first.click()  # the page title: somewhere inert outside the overlay
    expect(editor).to_have_count(0)
    wait_for_rerun(page)


def start_advisor(page: Page, compiles: int) -> Locator:
    """On the Advisor page: set the compile budget, press Run; the search's status expander (its stages, then Done)."""
    budget = page.locator(f"{key_selector('advisor_compiles')} input")
    budget.fill(str(compiles))
    budget.press("Enter")
    wait_for_rerun(page)
    page.locator(f"{key_selector('advisor_run')} button").click()
    return page.get_by_test_id("stExpander").filter(has_text=re.compile("[Ss]tage|Waiting|Done"), has_not_text="What is searched")


def dataframe_rows(frame: Locator) -> list[list[str]]:
    """The cells of a dataframe (``[data-testid='stDataFrame']``), row by row, from glide's accessible table (the
    first column is the row marker where rows can be selected)."""
    return frame.evaluate(
        """(frame) => {
            const rows = {};
            for (const cell of frame.querySelectorAll('td[data-testid^="glide-cell-"]')) {
                const [col, row] = cell.dataset.testid.split('-').slice(2).map(Number);
                (rows[row] = rows[row] || [])[col] = cell.textContent;
            }
            return Object.keys(rows).sort((a, b) => a - b).map((row) => rows[row]);
        }"""
    )


# --- tables that fit ---------------------------------------------------------------------------

# Each st.dataframe (glide-data-grid on a canvas) scrolls sideways inside its .dvn-scroller; each st.table inside its
# stTable box. A table fits when what it draws is no wider than what it shows.
TABLE_WIDTHS = """(selector) => [...document.querySelectorAll(selector)].flatMap((box) =>
    [...box.querySelectorAll('.dvn-scroller, [data-testid="stTable"]')].map((scroller) =>
        ({scroll: scroller.scrollWidth, client: scroller.clientWidth})))"""


def table_widths(page: Page, selector: str) -> list[dict[str, int]]:
    """(scrollWidth, clientWidth) of every table's sideways scroller inside the elements ``selector`` matches."""
    return page.evaluate(TABLE_WIDTHS, selector)


def expect_tables_fit(page: Page, selector: str) -> None:
    """The tables under ``selector`` show every column in view: nothing to scroll sideways to."""
    expect(page.locator(f"{selector} .dvn-scroller, {selector} [data-testid='stTable']").first).to_be_attached(timeout=RERUN_TIMEOUT_MS)
    widths = table_widths(page, selector)
    assert widths and all(w["scroll"] <= w["client"] + 1 for w in widths), f"{selector} scrolls sideways: {widths}"
