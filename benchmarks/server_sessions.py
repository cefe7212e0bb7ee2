"""Eight browser sessions compiling at once on one server: each its own verdict, the server answering meanwhile.

Starts ``streamlit run app.py`` on a free loopback port (its own cache folder), opens eight sessions (a browser context
each) on links to eight layouts (the guide's MLP, 1 layer, 128 x (i + 1) wide, planned for a v5litepod-8), clicks
**Compile for v5litepod-8** in all, and while they compile polls the health endpoint every 0.1 s and opens the app in
a ninth session (a whole page run) once a second. Prints the slowest health answer, the slowest page run, each
session's verdict (checked to be its own layout's, against ``explorer compile``'s for the same layout) and the wall
time of the whole. Then stops the server and starts it again: the first session reopens its link and gets
its layout and verdict back (from the cache, no compile).

    python benchmarks/server_sessions.py [--sessions 8]

Needs Debian's chromium-headless-shell (``/usr/bin/chromium-headless-shell``) and Playwright, as the browser tests do. Measures, asserts nothing
about times: the figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from playwright.sync_api import sync_playwright  # noqa: E402

from explorer.layout import SEED_LAYOUT, parse_layout  # noqa: E402
from explorer.sharing.share import layout_to_query  # noqa: E402
from tests.browser import launch_chromium, new_page, open_app, streamlit_server  # noqa: E402

TARGET = "v5litepod-8"


def layout_of(index: int):
    data = json.loads(json.dumps(SEED_LAYOUT))
    data.update(name=f"session{index}", target=TARGET)
    data["model"]["options"].update(layers=1, depth=128 * (index + 1))
    return parse_layout(data)


def expected_verdict(layout) -> tuple[str, bool]:
    """The verdict the page words for the layout's compile, and whether it came from the cache (the session's compile)."""
    from explorer.compile.target_compile import compile_target
    from ui.target_view import verdict

    result, cached = compile_target(layout, TARGET)
    return verdict(result), cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    args = parser.parse_args()
    os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="server-sessions-")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    layouts = [layout_of(i) for i in range(args.sessions)]
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        with streamlit_server() as url:
            pages = [new_page(browser) for _ in layouts]
            for page, layout in zip(pages, layouts):
                open_app(page, url + layout_to_query(layout))
            health: list[float] = []
            reruns: list[float] = []
            done = threading.Event()

            def poll() -> None:
                while not done.is_set():
                    start = time.perf_counter()
                    urllib.request.urlopen(url + "/_stcore/health", timeout=30).read()
                    health.append(time.perf_counter() - start)
                    done.wait(0.1)

            poller = threading.Thread(target=poll)
            poller.start()
            start = time.perf_counter()
            for page in pages:
                page.locator(".st-key-target_compile_button button").click()
            viewer = new_page(browser)
            finished = [False] * len(pages)
            while not all(finished):
                for index, page in enumerate(pages):
                    finished[index] = finished[index] or page.locator(".st-key-target_verdict").count() > 0
                if not all(finished):
                    opened = time.perf_counter()
                    open_app(viewer, url)
                    reruns.append(time.perf_counter() - opened - 0.6)  # open_app's two settling waits of 0.3 s
                    time.sleep(1)
            wall = time.perf_counter() - start
            done.set()
            poller.join()
            own = 0
            for page, layout in zip(pages, layouts):
                shown = page.locator(".st-key-target_verdict").inner_text().strip()
                expected, cached = expected_verdict(layout)
                own += int(cached and expected in shown)
                print(f"{layout.name}: {shown[:100]}")
            print(f"sessions showing their own layout's verdict (compiled by the server, checked against the cache): {own} of {len(pages)}")
            print(
                f"{args.sessions} sessions compiled in {wall:.1f} s; health: {len(health)} answers, slowest {max(health):.3f} s, "
                f"median {sorted(health)[len(health) // 2]:.3f} s; page runs while compiling: {len(reruns)}, slowest "
                f"{max(reruns, default=0):.2f} s (settling waits excluded)"
            )
        with streamlit_server() as url:  # the server again, after its end (the context manager kills it)
            page = new_page(browser)
            start = time.perf_counter()
            open_app(page, url + layout_to_query(layouts[0]))
            back = page.locator(".st-key-target_verdict").inner_text().strip()
            print(f"after a restart, {layouts[0].name}'s link: layout and verdict back in {time.perf_counter() - start:.1f} s: {back[:90]}")
        browser.close()


if __name__ == "__main__":
    main()
