"""Save the README's screenshots into docs/screenshots/: ``python scripts/screenshots.py`` from the repo root.

Starts ``streamlit run app.py`` on 8 simulated CPU devices with the browser tests'
support code, then draws two pages:

- ``layout.png``: the default page (the Flax guide's 2 × 4 layout);
- ``planned-16x16.png``: a planned 16 × 16 mesh, the transformer at its llama2-7b
  size and the fsdp+tensor-parallel rules preset.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: make `tests` importable

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from tests.browser import (  # noqa: E402
    GRID,
    REPO,
    choose,
    click_button,
    launch_chromium,
    new_page,
    open_app,
    screenshot,
    set_text,
    streamlit_server,
    toggle_expander,
)

OUT = REPO / "docs" / "screenshots"
VIEWPORT = {"width": 1600, "height": 2400}
MAX_BYTES = 600 * 1024
BIG_ARRAY = "params/block_0/mlp/wi_0/kernel"  # 4096 × 11008, P('data', 'model'): 256 blocks


def planned_16x16(page: Page) -> None:
    """The planned layout, with a 16 × 16-block kernel drawn and the long warnings list folded away."""
    set_text(page, "mesh_shape_text", "16, 16")
    choose(page, "model_name", "transformer")
    choose(page, "size_preset::transformer", "llama2-7b")
    choose(page, "rules_preset", "fsdp+tensor-parallel")
    click_button(page, "apply_preset")
    choose(page, "selected_path", BIG_ARRAY)
    toggle_expander(page, "Warnings")
    expect(page.locator(f"{GRID} .main-svg").first).to_be_visible()


def main() -> int:
    saved = []
    with streamlit_server() as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = new_page(browser, VIEWPORT)
            open_app(page, url)
            saved.append(screenshot(page, "layout", OUT))
            page.context.close()

            page = new_page(browser, VIEWPORT)
            open_app(page, url)
            planned_16x16(page)
            saved.append(screenshot(page, "planned-16x16", OUT))
            page.context.close()
        finally:
            browser.close()
    too_big = [path for path in saved if path.stat().st_size > MAX_BYTES]
    for path in saved:
        print(f"{path.relative_to(REPO)}: {path.stat().st_size // 1024} KiB")
    if too_big:
        print(f"larger than {MAX_BYTES // 1024} KiB: {', '.join(p.name for p in too_big)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
