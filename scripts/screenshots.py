"""Save the reference pages' screenshots (docs/*.md) into docs/screenshots/: ``python scripts/screenshots.py`` from the repo root.

Starts ``streamlit run app.py`` on 8 simulated CPU devices with the browser tests'
support code, then draws four pages:

- ``layout.png``: the default page (the Flax guide's 2 × 4 layout);
- ``planned-16x16.png``: a planned 16 × 16 mesh with the transformer at its llama2-7b
  size (batch 16, so that 16-way data parallelism divides it) and fsdp + tensor-parallel
  rules, opened through a link, with the 4096 × 11008 MLP kernel drawn;
- ``timing.png``: the Timing page after timing the default layout (20 steps);
- ``compare.png``: the Compare page, the default layout against a link to the same
  layout with only the batch rule, in the same session (so with its timing).

``--memory`` saves ``memory.png`` (docs/memory.md): ``layouts/transformer-data8.json`` planned for a v5e-8, compiled
(XLA refuses it), its peak explained and its levers compiled (minutes, or seconds from the compile cache), and the same
section at 1024x768 and 1440x900 into ``screenshots/``.

``--screens`` instead saves every page at 1024x768 and 1440x900 (the viewport, and the
whole page at that width) into the git-ignored ``screenshots/``, to look at: the Layout
page planned for a v5litepod-8 and compiled, the planned 16 x 16 layout, Timing after a
timing, Compare after a race, and Arrays.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: make `tests` importable

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from tests.browser import (  # noqa: E402
    GRID,
    REPO,
    RUN_TIMEOUT_MS,
    SIDEBAR,
    assert_no_exception,
    choose,
    go_to_page,
    key_selector,
    launch_chromium,
    new_page,
    open_app,
    open_timing,
    screenshot,
    selected_summary,
    set_text_area,
    streamlit_server,
    wait_for_rerun,
)

OUT = REPO / "docs" / "screenshots"
VIEWPORT = {"width": 1600, "height": 2400}
MAX_BYTES = 600 * 1024


def link(name: str, **params: str) -> str:
    """A layout link's query, readable as the app writes it (the name percent-escaped)."""
    return "?" + "&".join([f"name={quote(name, safe='')}"] + [f"{key}={value}" for key, value in params.items()])


# llama2-7b on 16 × 16: fsdp over data (batch, embed), tensor parallel over model; the sequence
# and the per-head width replicated on purpose ("-"), so that the page has no warnings.
PLANNED_16X16 = link(
    "llama2-7b fsdp+tp 16x16",
    mesh="16x16",
    axes="data,model",
    rules="batch:data;mlp:model;heads:model;kv_heads:model;vocab:model;embed:data;length:-;kv:-",
    model="transformer",
    options="batch:16;seq_len:4096;layers:32;d_model:4096;heads:32;kv_heads:32;head_dim:128;mlp_dim:11008;"
    "vocab:32000;gated_mlp:true;learned_positions:false",
)
BIG_ARRAY = "params/block_0/mlp/wi_0/kernel"  # 4096 × 11008, P('data', 'model'): 256 blocks
# The default layout with only the batch rule: the hidden dimension is no longer sharded over model.
BATCH_ONLY = "http://localhost:8501/" + link(
    "seed batch-only",
    mesh="2x4",
    axes="data,model",
    rules="batch:data",
    model="mlp",
    options="batch:8;layers:4;depth:1024;scan:false",
)


def planned_16x16(page: Page, url: str) -> None:
    """The planned layout, opened by its link, with the 16 × 16-block kernel drawn."""
    open_app(page, url + "/" + PLANNED_16X16)
    expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value("llama2-7b fsdp+tp 16x16")
    choose(page, "selected_path", BIG_ARRAY)
    expect(selected_summary(page)).to_contain_text("spec P('data', 'model')")
    expect(page.locator(f"{SIDEBAR} [data-testid='stAlertContentError']")).to_have_count(0)
    expect(page.get_by_test_id("stAlertContentSuccess").filter(has_text="No warnings")).to_have_count(1)
    expect(page.locator(f"{GRID} .main-svg").first).to_be_visible()


def time_default_layout(page: Page, url: str) -> None:
    """The Timing page after timing the default layout with the default 20 steps."""
    open_timing(page, url)
    page.locator(f"{key_selector('time_button')} button").click()
    expect(page.get_by_test_id("stMetric").filter(has_text="Median step")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)


def compare_with_link(page: Page) -> None:
    """Switch to the Compare page in the same session and add the batch-only layout by its link."""
    go_to_page(page, "Compare", f"{key_selector('compare_links')} textarea")
    set_text_area(page, "compare_links", BATCH_ONLY)
    expect(page.get_by_role("heading", name="Arrays sharded differently", exact=False)).to_be_visible()
    expect(page.locator(f"{key_selector('compare_memory')} .main-svg").first).to_be_visible()
    wait_for_rerun(page)


def unfocus(page: Page) -> None:
    """Blur the widget used last and move the mouse off the sidebar: no focus ring, no hover controls."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.mouse.move(VIEWPORT["width"] - 10, VIEWPORT["height"] - 10)
    wait_for_rerun(page)


def capture(page: Page, name: str) -> Path:
    """A clean screenshot of the page as it stands, refusing one that shows an exception."""
    unfocus(page)
    assert_no_exception(page)
    return screenshot(page, name, OUT)


SCREENS = [{"width": 1024, "height": 768}, {"width": 1440, "height": 900}]


def every_page_on_common_screens(browser, url: str) -> list[Path]:
    """Each page at each common screen size: the viewport as a user sees it, and the whole page at that width."""
    from tests.browser import SCREENSHOTS, click_button, set_text

    saved = []
    for screen in SCREENS:
        size = f"{screen['width']}x{screen['height']}"
        tall = {"width": screen["width"], "height": 2600}
        page = new_page(browser, screen)

        def both(name: str) -> None:
            unfocus(page)
            saved.append(screenshot(page, f"screen18-{name}-{size}", SCREENSHOTS))
            page.set_viewport_size(tall)
            page.wait_for_timeout(800)
            saved.append(screenshot(page, f"screen18-{name}-{size}-whole", SCREENSHOTS))
            page.set_viewport_size(screen)
            page.wait_for_timeout(500)

        open_app(page, url)
        choose(page, "target_choice", "v5litepod-8")
        if page.locator(key_selector("target_verdict")).count() == 0:  # not compiled before (else read from the cache)
            page.locator(f"{key_selector('target_compile_button')} button").click()
        expect(page.locator(key_selector("target_verdict"))).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_rerun(page)
        both("layout-target")
        choose(page, "target_choice", "this process's devices")
        open_app(page, url + "/" + PLANNED_16X16)
        choose(page, "selected_path", BIG_ARRAY)
        both("layout-planned")
        open_app(page, url)
        go_to_page(page, "Timing", f"{key_selector('time_button')} button")
        set_text(page, "timing_steps", "5")
        click_button(page, "time_button")
        expect(page.get_by_test_id("stMetric").filter(has_text="Median step")).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
        both("timing")
        go_to_page(page, "Compare", f"{key_selector('compare_links')} textarea")
        set_text_area(page, "compare_links", BATCH_ONLY)
        set_text(page, "race_rounds", "2")
        set_text(page, "race_steps", "2")
        page.locator(f"{key_selector('race_button')} button").click()  # a race takes longer than a rerun
        expect(page.locator(key_selector("race_chart"))).to_be_visible(timeout=RUN_TIMEOUT_MS)
        wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
        both("compare")
        go_to_page(page, "Arrays", f"{key_selector('op_expr')} input")
        both("arrays")
        set_text(page, "op_expr", "__import__('os')")
        both("arrays-error")
        assert_no_exception(page)
        page.context.close()
    return saved


MEMORY_LAYOUT = link(
    "transformer-data8",
    mesh="8",
    axes="data",
    rules="batch:data",
    model="transformer",
    options="batch:64;seq_len:2048;layers:8;d_model:1024;heads:8;kv_heads:8;head_dim:128;mlp_dim:4096;vocab:32000;"
    "scan:true;dtype:bfloat16;remat:none",
    target="v5e-8",
)


def memory_section(browser, url: str) -> list[Path]:
    """The memory view of a layout XLA refuses, its levers compiled: the section from its heading to the levers' table,
    for docs/memory.md, and as a user sees it at 1024x768 and 1440x900."""
    from tests.browser import SCREENSHOTS

    saved = []
    for screen in [{"width": 1440, "height": 2600}, *SCREENS]:
        page = new_page(browser, screen)
        open_app(page, url + "/" + MEMORY_LAYOUT)
        if page.locator(key_selector("target_verdict")).count() == 0:  # not in the compile cache yet
            page.locator(f"{key_selector('target_compile_button')} button").click()
        expect(page.locator(key_selector("target_peak_chart"))).to_be_visible(timeout=RUN_TIMEOUT_MS)
        levers = page.locator(f"{key_selector('levers_compile_button')} button")
        if levers.count():
            levers.click()
        expect(page.locator(key_selector("target_levers"))).to_contain_text("fits", timeout=RUN_TIMEOUT_MS)
        wait_for_rerun(page, timeout_ms=RUN_TIMEOUT_MS)
        unfocus(page)
        assert_no_exception(page)
        top = page.locator(key_selector("target_peak_headline")).bounding_box()
        bottom = page.locator(key_selector("target_levers")).bounding_box()
        if screen["height"] > 2000:
            clip = {
                "x": top["x"] - 8,
                "y": top["y"] - 40,
                "width": top["width"] + 16,
                "height": bottom["y"] + bottom["height"] - top["y"] + 60,
            }
            path = OUT / "memory.png"
            page.screenshot(path=str(path), clip=clip, full_page=True)
            saved.append(path)
        else:
            page.locator(key_selector("target_peak_headline")).scroll_into_view_if_needed()
            saved.append(screenshot(page, f"memory-{screen['width']}x{screen['height']}", SCREENSHOTS))
            page.locator(key_selector("target_levers")).scroll_into_view_if_needed()
            saved.append(screenshot(page, f"memory-levers-{screen['width']}x{screen['height']}", SCREENSHOTS))
        page.context.close()
    return saved


def main() -> int:
    if "--memory" in sys.argv[1:]:
        with streamlit_server() as url, sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                for path in memory_section(browser, url):
                    print(path.relative_to(REPO), f"{path.stat().st_size // 1024} KiB")
            finally:
                browser.close()
        return 0
    if "--screens" in sys.argv[1:]:
        with streamlit_server() as url, sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            try:
                for path in every_page_on_common_screens(browser, url):
                    print(path.relative_to(REPO))
            finally:
                browser.close()
        return 0
    saved = []
    with streamlit_server() as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            for name, draw in (("layout", open_app), ("planned-16x16", planned_16x16)):
                page = new_page(browser, VIEWPORT)
                draw(page, url)
                saved.append(capture(page, name))
                page.context.close()
            page = new_page(browser, VIEWPORT)  # Compare shows the timing made on the same session
            time_default_layout(page, url)
            saved.append(capture(page, "timing"))
            compare_with_link(page)
            saved.append(capture(page, "compare"))
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
