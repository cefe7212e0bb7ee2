"""Target names typed as the docs write them, and a link with a bad target, in a real Chromium (issue 45 items 1 and 7).

The server gets its own empty compile cache, so each compile really runs (the Flax guide's MLP, small: seconds in a
child process, libtpu's compiler for the TPU slice and JAX's CUDA plugin for the GPU cluster).
"""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    MAIN,
    SIDEBAR,
    assert_no_exception,
    checked_server,
    key_selector,
    main_errors,
    open_app,
    screenshot,
    sidebar_errors,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

COMPILE_TIMEOUT_MS = 240_000
SMALL = "model=mlp&options=batch:48;layers:1;depth:256;scan:false&rules=batch:data;hidden:model"


@pytest.fixture(scope="module")
def names_app_url(tmp_path_factory):
    with checked_server(EXPLORER_CACHE_DIR=str(tmp_path_factory.mktemp("names-cache")), XLA_PYTHON_CLIENT_MEM_FRACTION="0.75") as url:
        yield url


def type_target(page: Page, name: str) -> None:
    """Type ``name`` into the Target box and press Enter, as a user does."""
    box = page.locator(f"{key_selector('target_choice')} input")
    box.click()
    page.keyboard.type(name)
    page.keyboard.press("Enter")
    wait_for_rerun(page)


def type_and_compile(page: Page, url: str, name: str, mesh: str, verdict: str) -> str:
    """Open a layout on ``mesh``, type ``name`` into the Target box, compile: the verdict; returns the page's address."""
    page.set_viewport_size({"width": 1024, "height": 768})
    open_app(page, f"{url}/?name=typed&mesh={mesh}&axes=data,model&{SMALL}")
    type_target(page, name)
    expect(page.locator(f"{key_selector('target_choice')} input")).to_have_value(name)
    expect(sidebar_errors(page)).to_have_count(0)
    button = page.locator(f"{key_selector('target_compile_button')} button")
    expect(button).to_have_text(f"Compile for {name}")
    screenshot(page, f"target-typed-{name.replace(':', '-')}-1024x768")
    button.click()
    expect(page.locator(key_selector("target_verdict"))).to_contain_text(
        re.compile(rf"Fits: XLA's peak is [\d.,]+ [KM]iB of .*{verdict}"), timeout=COMPILE_TIMEOUT_MS
    )
    wait_for_rerun(page)
    assert re.search(rf"target={re.escape(name)}(&|$)", page.url.replace("%3A", ":")), page.url  # the link carries it
    expect(page.locator(key_selector("target_cached"))).to_have_count(0)  # compiled by this session: no cache note
    page.locator(key_selector("target_verdict")).scroll_into_view_if_needed()
    screenshot(page, f"target-typed-{name.replace(':', '-')}-compiled-1024x768")
    assert_no_exception(page)
    return page.url


def test_v5e_4x4_typed_compiles_and_another_session_sees_when_and_compiles_again(blank_page: Page, names_app_url: str):
    """Item 1: the README's v5e:4x4 gave "No results". Item 11: a compile another session ran (here, the one just made)
    appeared with no way to compile again; it says when and from which cache, and compiles again on a click."""
    page = blank_page
    link = type_and_compile(page, names_app_url, "v5e:4x4", "4x4", "HBM per chip")
    page.goto("about:blank")
    open_app(page, link)  # another session: the result is the cache's
    cached = page.locator(key_selector("target_cached"))
    expect(cached).to_contain_text(re.compile(r"Read from the compile cache \(.+\): compiled on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    cached.scroll_into_view_if_needed()
    screenshot(page, "target-cached-1024x768")
    cached.get_by_role("button", name="Compile again").click()
    expect(page.locator(key_selector("target_cached"))).to_have_count(0, timeout=COMPILE_TIMEOUT_MS)
    expect(page.locator(key_selector("target_verdict"))).to_contain_text("Fits", timeout=COMPILE_TIMEOUT_MS)
    wait_for_rerun(page)
    expect(page.locator(MAIN)).to_contain_text("Compiled for v5e:4x4 in")
    assert_no_exception(page)


def test_h100_3x8_typed_compiles_for_three_hosts_of_eight_gpus(blank_page: Page, names_app_url: str):
    type_and_compile(blank_page, names_app_url, "h100:3x8", "3x8", "per GPU")


def test_a_bad_name_typed_is_one_short_message_under_the_box(blank_page: Page, names_app_url: str):
    page = blank_page
    page.set_viewport_size({"width": 1440, "height": 900})
    open_app(page, names_app_url)
    type_target(page, "tpu-v9-garbage")
    error = page.locator(f"{key_selector('target_error')} [data-testid='stAlertContentError']")
    expect(error).to_have_count(1)
    expect(error).to_contain_text("target: 'tpu-v9-garbage' is not a TPU slice name or a GPU cluster")
    expect(error).not_to_contain_text("v5p-16384")  # not the wall of every TPU type: that is in the expander below it
    expect(page.locator(f"{key_selector('target_choice')} input")).to_have_value("tpu-v9-garbage")  # kept, to fix
    error.scroll_into_view_if_needed()
    screenshot(page, "target-typed-garbage-1440x900")
    assert_no_exception(page)


def test_a_link_with_a_bad_target_opens_the_rest_of_the_layout_and_names_the_field(blank_page: Page, names_app_url: str):
    page = blank_page
    for size in ({"width": 1024, "height": 768}, {"width": 1440, "height": 900}):
        page.set_viewport_size(size)
        open_app(page, f"{names_app_url}/?name=planned&mesh=4x2&axes=data,model&{SMALL}&target=tpu-v9-garbage")
        errors = main_errors(page)
        expect(errors).to_have_count(1)
        expect(errors).to_contain_text("The link opened without its target: target: 'tpu-v9-garbage' is not a TPU slice name")
        expect(errors).to_contain_text("every form) — this process's devices instead. The rest of the layout is the link's.")
        expect(page.locator(f"{key_selector('layout_name')} input")).to_have_value("planned")
        expect(page.locator(f"{key_selector('mesh_shape_text')} input")).to_have_value("4, 2")
        expect(page.locator(f"{SIDEBAR} {key_selector('refused_link')}")).to_contain_text("target=tpu-v9-garbage")
        screenshot(page, f"link-bad-target-{size['width']}x{size['height']}")
        assert_no_exception(page)
