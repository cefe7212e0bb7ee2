"""Planning for an NVIDIA GPU cluster in a real Chromium: the Layout page, Compare and the Advisor on ``h100:1x8``.

No GPU is involved: JAX's CUDA plugin compiles for the cluster in the compile's child process. The
server gets its own empty compile cache, so every compile really runs (the Flax guide's MLP on one
host of 8 H100s: seconds each), and ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is set to JAX's default
0.75 so the verdict's share does not depend on the environment the tests run in.

The figures asserted are NVIDIA's and JAX's, not the explorer's: an "80 GB" H100 has 79.1 GiB as
CUDA reports it (XLA's target config for the H100 SXM), and JAX lets one process use 75% of it.
"""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    start_advisor,
    MAIN,
    RUN_TIMEOUT_MS,
    SIDEBAR,
    assert_no_exception,
    checked_server,
    choose,
    go_to_page,
    key_selector,
    main_errors,
    open_app,
    screenshot,
    set_text_area,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

TARGET = "h100:1x8"  # one host of 8 H100s: the seed layout's 2x4 mesh holds 8 devices
H100 = "NVIDIA H100 80GB HBM3"  # what JAX reports as the device kind of an H100 SXM
SIZES = {"width": 1440, "height": 900}, {"width": 1024, "height": 768}
BYTES = r"[\d.,]+ (B|KiB|MiB|GiB)"
# JAX's default share (75%) of the H100's 79.1 GiB is 59.3 GiB.
VERDICT = re.compile(
    rf"Fits: XLA's peak is {BYTES} of the 59\.3 GiB JAX lets one process use per GPU \(75% of its 79\.1 GiB\), "
    rf"{BYTES} to spare\."
)
# The seed's mesh on one host: both axes on GPUs of that host, every collective over NVLink.
PLACEMENT = (
    "Placed on the hosts and GPUs (host-major): data (2): 2 GPUs of one host, over NVLink; model (4): 4 GPUs of one host, over NVLink."
)
DATA_ONLY = "/?name=data-only&mesh=2x4&axes=data,model&rules=batch:data&model=mlp&options=batch:8;layers:4;depth:1024;scan:false"


@pytest.fixture(scope="module")
def gpu_app_url(tmp_path_factory):
    with checked_server(EXPLORER_CACHE_DIR=str(tmp_path_factory.mktemp("gpu-compile-cache")), XLA_PYTHON_CLIENT_MEM_FRACTION="0.75") as url:
        yield url


def shoot(page: Page, name: str, top: str) -> None:
    """Screenshots at 1440x900 and 1024x768, each with ``top`` (a locator) scrolled to just below Streamlit's header; back to 1440x900."""
    for size in SIZES:
        page.set_viewport_size(size)
        page.wait_for_timeout(800)  # Plotly redraws for the new width
        page.locator(top).first.evaluate(
            "(element) => { element.style.scrollMarginTop = '70px'; element.scrollIntoView({block: 'start'}); }"
        )
        page.wait_for_timeout(300)
        screenshot(page, f"{name}-{size['width']}x{size['height']}")
    page.set_viewport_size(SIZES[0])
    page.wait_for_timeout(500)


def expect_roofline(chart) -> None:
    expect(chart).to_be_visible()
    expect(chart.locator(".bars .point")).to_have_count(3)  # compute, memory, collective


def test_plan_for_a_gpu_cluster_on_the_layout_page_compare_and_the_advisor(blank_page, gpu_app_url):
    page = blank_page
    page.set_viewport_size(SIZES[0])
    # The Layout page: the cluster from the sidebar's Target list, one compile, XLA's verdict per GPU.
    open_app(page, gpu_app_url)
    choose(page, "target_choice", TARGET)
    expect(page.locator(SIDEBAR)).to_contain_text(f"{TARGET}: 1 host × 8 {H100}, 79.1 GiB and 989 bf16 TFLOP/s per GPU")
    button = page.locator(f"{key_selector('target_compile_button')} button")
    expect(button).to_have_text(f"Compile for {TARGET}")
    button.click()
    verdict = page.locator(key_selector("target_verdict"))
    expect(verdict).to_contain_text(VERDICT, timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page)
    expect(page.locator(key_selector("target_placement"))).to_have_text(PLACEMENT)
    expect(page.locator(MAIN)).to_contain_text("Memory per GPU")
    expect(page.locator(f"{key_selector('target_memory')} .js-plotly-plot")).to_contain_text("JAX's 75%: 59.3 GiB")
    roofline = page.locator(f"{key_selector('target_roofline')} .js-plotly-plot")
    expect_roofline(roofline)
    expect(roofline.locator(".gtitle")).to_contain_text(re.compile(r"Step ≥ [\d.]+ (s|ms|µs|ns)\s*(compute|memory|collective)-bound"))
    expect(page.locator(MAIN)).to_contain_text("collectives at NVLink's 450 GB/s inside a host")
    expect(main_errors(page)).to_have_count(0)
    assert_no_exception(page)
    shoot(page, "gpu-layout", key_selector("target_verdict"))

    # Compare: the seed (cached by the compile above) and a data-parallel variant, compiled for the same cluster.
    go_to_page(page, "Compare", f"{key_selector('compare_links')} textarea")
    set_text_area(page, "compare_links", gpu_app_url + DATA_ONLY)
    expect(page.locator(MAIN)).to_contain_text(f"On {TARGET} ({TARGET})")
    compile_missing = page.locator(f"{key_selector('compare_compile_button')} button")
    expect(compile_missing).to_have_text(f"Compile 1 layout for {TARGET}")  # the seed's result is in the cache
    compile_missing.click()
    for index in (0, 1):
        expect(page.locator(key_selector(f"compare_verdict_{index}"))).to_contain_text(VERDICT, timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page)
    rooflines = page.locator(f"{key_selector('compare_roofline')} .js-plotly-plot")
    expect(rooflines).to_be_visible()
    expect(rooflines.locator(".bars .point")).to_have_count(6)  # three terms for each of the two layouts
    for label in ("current: seed-2x4", "link 1: data-only"):  # each layout's step bound, in the legend
        expect(rooflines.locator(".legend")).to_contain_text(
            re.compile(rf"{label}: ≥ [\d.e-]+ (s|ms|µs|ns), (compute|memory|collective)-bound")
        )
    expect(page.locator(MAIN)).to_contain_text(PLACEMENT)
    expect(main_errors(page)).to_have_count(0)
    assert_no_exception(page)
    shoot(page, "gpu-compare", key_selector("compare_targets_table"))

    # The Advisor: the same cluster, one compile of the shortlist's best beside the user's own layout (cached).
    go_to_page(page, "Advisor", f"{MAIN} h1:has-text('Layout advisor')")
    status = start_advisor(page, compiles=1)
    expect(status.first).to_contain_text(re.compile(r"Done: (1 compile|2 compiles),"), timeout=RUN_TIMEOUT_MS)
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text(re.compile(rf"Advice for {TARGET}: [\w-]+ — step ≥ [\d.]+ (?:µs|ms|s) .*XLA-verified"))
    expect(page.locator(MAIN)).to_contain_text("JAX lets one process use per GPU (75% of its 79.1 GiB)")
    expect(page.locator(MAIN)).to_contain_text(f"{TARGET}: a GPU cluster of 1 host x 8 {H100} (8 GPUs)")
    expect(page.locator(MAIN)).to_contain_text("Placed on the hosts and GPUs (host-major): ")
    expect(page.locator(f"{key_selector('advisor_table')} [data-testid='stDataFrame']")).to_be_visible()
    expect(page.locator(f"{key_selector('advisor_chart')} .js-plotly-plot, .stPlotlyChart .js-plotly-plot").first).to_be_visible()
    expect(main_errors(page)).to_have_count(0)
    assert_no_exception(page)
    shoot(page, "gpu-advisor", f"{MAIN} [data-testid='stAlertContentSuccess']")
