"""The Layout page in a real Chromium against ``streamlit run app.py`` on 8 simulated CPU devices.

The seed layout is the Flax guide's: a 2 × 4 mesh (data, model), rules
[batch → data, hidden → model], and the MLP whose first kernel
``params/LogicalDotReluDot_0/Dense_0/kernel`` (1024 × 1024, logical axes
embed × hidden) is the array drawn by default.
"""

import pytest
from playwright.sync_api import Page, expect

from tests.browser import (
    HEADER_HEIGHT,
    MAIN,
    ROW_HEIGHT,
    RULES_CANVAS,
    RULES_EDITOR,
    WARNINGS,
    assert_no_exception,
    dataframe_rows,
    edit_rule_axes,
    edit_rule_text,
    grid_axis_titles,
    grid_label_centres,
    grid_labels,
    expect_rule_rows,
    expect_tables_fit,
    key_selector,
    screenshot,
    select_rule_cell,
    selected_summary,
    set_text,
    sidebar_errors,
    wait_for_rerun,
)

pytestmark = pytest.mark.browser

SEED_RULES = [["0", "batch", "data"], ["1", "hidden", "model"]]
# The kernel is P(None, 'model'): four column blocks, each on a data pair {m, m + 4}.
SEED_LABELS = ["0,4", "1,5", "2,6", "3,7"]


def expect_grid_labels(page: Page, labels: list[str]) -> None:
    expect(grid_labels(page)).to_have_text(labels)


def expect_mesh_ids(page: Page) -> None:
    """The mesh figure labels its 2 × 4 cells with device ids in mesh order."""
    expect(page.locator(".st-key-mesh_figure .heatmap-label")).to_have_text([str(d) for d in range(8)])


def expect_only_error_in(page: Page, section: str, *fragments: str) -> None:
    """The sidebar shows exactly one error, in ``section``'s message slot, containing every fragment."""
    expect(sidebar_errors(page)).to_have_count(1)
    errors = sidebar_errors(page, section)
    expect(errors).to_have_count(1)
    for fragment in fragments:
        expect(errors).to_contain_text(fragment)


def same(values: list[float], tolerance: float = 2.0) -> bool:
    return max(values) - min(values) <= tolerance


def increasing(values: list[float], gap: float = 10.0) -> bool:
    return all(b - a >= gap for a, b in zip(values, values[1:]))


def assert_seed_grid(page: Page) -> None:
    expect_grid_labels(page, SEED_LABELS)
    assert grid_axis_titles(page) == ("dim 1 'hidden' · 1024 → model", "dim 0 'embed' · 1024 → replicated")


def test_load_then_a_bad_mesh_shape_shown_by_its_field_and_fixed_then_a_new_rule_row_numbered(page: Page) -> None:
    """One opening, three checks: the seed loads with no exception; an invalid mesh shape is shown in the mesh
    section's slot while the last valid layout stays drawn, and fixing it clears the error; clicking the editor's
    trailing row adds a rule whose # is the next number (it showed "None")."""
    # the seed, as loaded
    assert_seed_grid(page)
    expect(page.locator(".st-key-selected_path input")).to_have_value("params/LogicalDotReluDot_0/Dense_0/kernel")
    expect_mesh_ids(page)
    warnings = page.locator(WARNINGS)  # the seed has no rule for 'embed', and says so
    expect(warnings).to_contain_text("Warnings (1)")
    expect(warnings).to_contain_text("logical name 'embed' matches no rule")
    assert_no_exception(page)
    screenshot(page, "browser-load")

    # an invalid mesh shape, then the valid one again
    set_text(page, "mesh_shape_text", "2, x")

    expect_only_error_in(page, "mesh", "mesh.shape[1]", "'x'")  # the message slot under the mesh fields
    expect(page.locator(f"{MAIN} [data-testid='stAlert']").first).to_contain_text("1 problem (mesh.shape[1])")
    expect(page.locator(".st-key-mesh_shape_text input")).to_have_value("2, x")
    assert_seed_grid(page)  # the last valid layout is still drawn
    expect_mesh_ids(page)
    assert_no_exception(page)
    screenshot(page, "browser-invalid-shape")

    set_text(page, "mesh_shape_text", "2, 4")
    expect(sidebar_errors(page)).to_have_count(0)
    assert_seed_grid(page)
    assert_no_exception(page)

    # a new rule row
    box = page.locator(RULES_CANVAS).bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.55, box["y"] + HEADER_HEIGHT + ROW_HEIGHT * 2 + ROW_HEIGHT / 2)
    expect(page.locator(f"{RULES_EDITOR} td[data-testid='glide-cell-1-2']")).to_have_text("2")
    expect_rule_rows(page, SEED_RULES, prefix=True)
    assert_no_exception(page)


def test_mesh_axes_edit_redraws_grid(page: Page) -> None:
    """hidden → data instead of model: the kernel becomes P(None, 'data'), two column blocks of four devices."""
    assert_seed_grid(page)
    expect_rule_rows(page, SEED_RULES)
    screenshot(page, "browser-rules-before")

    edit_rule_axes(page, 1, ["data"])

    expect_rule_rows(page, [["0", "batch", "data"], ["1", "hidden", "data"]])
    expect_grid_labels(page, ["0,1,2,3", "4,5,6,7"])
    assert grid_axis_titles(page) == ("dim 1 'hidden' · 1024 → data", "dim 0 'embed' · 1024 → replicated")
    expect(selected_summary(page)).to_contain_text("spec P(None, 'data')")
    assert_no_exception(page)
    screenshot(page, "browser-rules-hidden-data")


def test_logical_name_edit_turns_grid_sideways(page: Page) -> None:
    """Rule 1 hidden → embed: the kernel becomes P('model', None), so the same four
    blocks now stack as rows (dim 0) instead of standing side by side (dim 1)."""
    xs, ys = zip(*grid_label_centres(page))
    assert same(ys) and increasing(xs), (xs, ys)

    edit_rule_text(page, 1, "logical name", "embed")

    expect_rule_rows(page, [["0", "batch", "data"], ["1", "embed", "model"]])
    expect_grid_labels(page, SEED_LABELS)
    assert grid_axis_titles(page) == ("dim 1 'hidden' · 1024 → replicated", "dim 0 'embed' · 1024 → model")
    xs, ys = zip(*grid_label_centres(page))
    assert same(xs) and increasing(ys), (xs, ys)
    expect(selected_summary(page)).to_contain_text("spec P('model', None)")
    assert_no_exception(page)
    screenshot(page, "browser-rules-embed-model")


def test_rule_naming_missing_axis_shows_error_under_rules(page: Page) -> None:
    """Renaming the mesh axis model → tensor leaves rule 1 (hidden → model) naming an axis the mesh lacks."""
    set_text(page, "mesh_axes_text", "data, tensor")

    expect_only_error_in(page, "rules", "rules[1]", "'model'")  # the message slot under the rules editor
    assert_seed_grid(page)
    assert_no_exception(page)
    screenshot(page, "browser-missing-axis")

    edit_rule_axes(page, 1, ["tensor"])
    expect(sidebar_errors(page)).to_have_count(0)
    expect_grid_labels(page, SEED_LABELS)
    assert grid_axis_titles(page)[0] == "dim 1 'hidden' · 1024 → tensor"
    assert_no_exception(page)


def test_rule_edits_survive_renaming_a_mesh_axis(page: Page) -> None:
    """The editor's axis choices change with the mesh; the rows edited so far must stay."""
    edit_rule_text(page, 0, "logical name", "embed")
    expect_rule_rows(page, [["0", "embed", "data"], ["1", "hidden", "model"]])
    set_text(page, "mesh_axes_text", "data, tensor")
    expect_rule_rows(page, [["0", "embed", "data"], ["1", "hidden", "model"]])
    expect_only_error_in(page, "rules", "rules[1]")
    edit_rule_axes(page, 1, ["tensor"])
    expect_rule_rows(page, [["0", "embed", "data"], ["1", "hidden", "tensor"]])
    expect(sidebar_errors(page)).to_have_count(0)
    expect(selected_summary(page)).to_contain_text("spec P('data', 'tensor')")
    assert_no_exception(page)


def test_the_tables_fit_a_laptop_screen(page: Page) -> None:
    """At 1024x768 beside the sidebar the arrays table (array, spec, shard, bytes), the rule trace and the Kinds
    filter show whole: no sideways scroll (the arrays table drew 948 px of columns in 422 px), no cut chip; the other
    columns are one click away in the table's Show/hide columns menu. Screenshots at both common sizes."""
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(500)
        assert page.locator("[data-testid='stSidebar']").bounding_box()["width"] <= 0.32 * width  # 43% at 1024 before
        expect_tables_fit(page, key_selector("arrays_table"))
        expect_tables_fit(page, key_selector("trace_table"))
        expect(page.locator(f"{key_selector('array_kinds')} button")).to_have_text(["param", "opt_state", "input", "activation"])
        page.locator(key_selector("arrays_table")).scroll_into_view_if_needed()
        screenshot(page, f"layout-tables-{width}x{height}")
    expect(
        page.locator(f"{key_selector('arrays_table')} [aria-label='Show/hide columns'], {key_selector('arrays_table')} button").first
    ).to_be_attached()
    assert_no_exception(page)


def test_escape_keeps_a_typed_name(page: Page) -> None:
    """The rules grid edits as a user expects: Escape in a name's editor keeps what was typed (glide threw it away)."""
    select_rule_cell(page, 0, "logical name")
    page.keyboard.press("Enter")
    expect(page.locator("textarea.gdg-input")).to_be_focused()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("embed")
    expect(page.locator("textarea.gdg-input")).to_have_value("embed")
    page.keyboard.press("Escape")
    expect_rule_rows(page, [["0", "embed", "data"], ["1", "hidden", "model"]])
    wait_for_rerun(page)
    expect(selected_summary(page)).to_contain_text("spec P('data', 'model')")  # the kept name applies
    assert_no_exception(page)


def test_a_mesh_axis_the_mesh_lacks_can_be_typed(page: Page) -> None:
    """An axis typed into the mesh cell is kept with Enter even before the mesh has it (the dropdown alone offered only
    the mesh's axes, and typing another did nothing); the rules' message then names it."""
    edit_rule_axes(page, 1, ["tensor"])
    expect_rule_rows(page, [["0", "batch", "data"], ["1", "hidden", "tensor"]])
    expect_only_error_in(page, "rules", "rules[1]", "'tensor'")
    assert_no_exception(page)


def test_clicking_a_cell_of_the_arrays_table_draws_that_row(page: Page) -> None:
    """The caption says "click a row": a click on a row's cell (not only its checkbox) picks that array and draws its grid."""
    table = page.locator(key_selector("arrays_table"))
    table.scroll_into_view_if_needed()
    rows = dataframe_rows(table.locator("[data-testid='stDataFrame']"))
    before = selected_summary(page).inner_text()
    row = next(i for i, cells in enumerate(rows) if cells[1].split("/")[-1] not in before)  # an array not drawn now
    name = rows[row][1].split("/")[-1]
    box = table.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + HEADER_HEIGHT + ROW_HEIGHT * row + ROW_HEIGHT / 2)
    wait_for_rerun(page)
    expect(selected_summary(page)).to_contain_text(name)
    expect(page.locator(f"{key_selector('sharding_grid')} .js-plotly-plot")).to_be_visible()
    screenshot(page, "layout-row-clicked")
    assert_no_exception(page)
