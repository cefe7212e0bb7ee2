"""AppTest of the Advisor page: without a target it asks for one; with one it runs both stages and draws the ranking."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.paths import APP


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def advisor_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=600)
    at.switch_page("views/4_Advisor.py")
    return at.run()


def test_without_a_target_the_page_asks_for_one():
    at = advisor_page()
    assert not at.exception
    assert any("Choose a **Target**" in i.value and "h100:8x8" in i.value for i in at.info)


def test_stage_1_ranks_every_candidate_and_opening_one_loads_it_into_the_sidebar():
    at = advisor_page()
    at.selectbox(key="target_choice").set_value("v5litepod-8").run()
    at.number_input(key="advisor_compiles").set_value(0).run()
    at.button(key="advisor_run").click().run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "step ≥" in d.value.columns)
    assert len(table) == 11 and (table["verified"] == "estimate").all()
    assert table["layout"].str.contains("(yours)", regex=False).sum() == 1
    # stage 1 only: no advice, never an uncompiled layout as one (issue 56); stage 1's best is named as an estimate
    assert any(
        i.value.replace("\\", "").startswith("No advice for v5litepod-8 yet: no layout was compiled (stage 1 only)") for i in at.info
    )
    assert not at.success
    pick = at.selectbox(key="advisor_pick")
    pick.set_value(pick.options[0].split(". ", 1)[1] if ". " in pick.options[0] else pick.options[0]).run()
    at.button(key="advisor_open").click().run()
    assert not at.exception
    top = table.iloc[0]
    assert at.session_state["mesh_axes_text"] == ", ".join(part.split(" ")[0] for part in top["mesh"].split(" x "))
    # The rules the Layout page's editor starts from are the winner's (the page switch must not restore the old rows).
    rules = at.session_state["advisor_search"].ranked()[0].layout.rules
    expected = [[rule.logical, list(rule.mesh_axes)] for rule in rules]
    assert at.session_state["rules_base"] == expected
    assert at.session_state["last_valid_layout"]["rules"] == [[l, a[0] if len(a) == 1 else (a or None)] for l, a in expected]


def test_on_a_gpu_cluster_the_page_says_so_with_each_axis_placement_and_jaxs_share_of_the_memory():
    at = advisor_page()
    at.selectbox(key="target_choice").set_value("h100:2x8").run()
    at.number_input(key="advisor_compiles").set_value(0).run()
    at.button(key="advisor_run").click().run()
    assert not at.exception and not at.error
    plain = lambda text: text.replace("\\", "")  # Markdown escapes (``markdown_literal``)
    captions = [plain(c.value) for c in at.caption]
    assert any(c.startswith("h100:2x8: a GPU cluster of 2 hosts x 8 NVIDIA H100") and "NVLink" in c for c in captions)
    assert any(plain(i.value).startswith("No advice for h100:2x8 yet: no layout was compiled") for i in at.info)
    assert any("JAX lets one process use per GPU (75% of its 79.1 GiB)" in c for c in captions)  # what fits is judged against
    table = next(d.value for d in at.dataframe if "step ≥" in d.value.columns)
    inside = table[table["mesh"].str.contains("tensor") & ~table["mesh"].str.contains("tensor 16")]
    assert len(inside) and inside["placement"].str.contains("tensor: NVLink").all()  # up to 8: inside a host
    assert (table[table["mesh"] == "tensor 16"]["placement"] == "tensor: 2 hosts").all()  # larger than a host: spans both
    assert any(c.startswith("Placed on the hosts and GPUs (host-major): ") for c in captions)
    # Issue 38: the seed's 8-device layout was silently absent, and the intro said the tensor axis stays inside a host.
    own = [plain(i.value) for i in at.info if "Your layout" in i.value]
    assert own == [
        "Your layout seed-2x4 is not ranked: its mesh has 8 devices and h100:2x8 has 16, so it cannot run there as it is. "
        "Every candidate below uses all 16."
    ]
    assert not table["layout"].str.contains("(yours)", regex=False).any()
    assert any("a tensor axis no larger than a host stays inside one; a larger one spans hosts" in m.value for m in at.markdown)


def test_the_top_three_race_on_this_process_devices_runs_the_compare_race():
    """8 simulated devices, an 8-chip target: the page races the three best candidates that fit, and shows each one's median."""
    at = advisor_page()
    at.selectbox(key="target_choice").set_value("v5litepod-8").run()
    at.number_input(key="advisor_compiles").set_value(0).run()
    at.button(key="advisor_run").click().run()
    table = next(d.value for d in at.dataframe if "step ≥" in d.value.columns)
    at.number_input(key="advisor_race_rounds").set_value(1).run()
    at.number_input(key="advisor_race_steps").set_value(2).run()
    at.button(key="advisor_race_button").click().run()
    assert not at.exception and not at.error
    race = next(d.value for d in at.dataframe if "median step (ms)" in d.value.columns)
    top = [
        name.removesuffix(" (yours)")
        for name in table["layout"][table["fits"].str.startswith(("yes", "not compiled (its state fits)"))][:3]
    ]
    assert list(race["layout"]) == [f"{i}. {name}" for i, name in enumerate(top, 1)]
    assert (race["median step (ms)"] > 0).all()


def test_the_race_is_refused_with_the_reason_when_the_target_is_not_this_process_size():
    at = advisor_page()
    at.selectbox(key="target_choice").set_value("v5litepod-16").run()
    at.number_input(key="advisor_compiles").set_value(0).run()
    at.button(key="advisor_run").click().run()
    assert not at.exception
    assert any("This process has 8 device(s)" in c.value and "v5litepod-16 has 16" in c.value for c in at.caption)
    assert not [b for b in at.button if b.key == "advisor_race_button"]


def test_the_chart_axis_spans_the_candidates_and_the_hbm_line_not_plotly_log_annotation_units():
    """Plotly puts an add_hline annotation on a log axis at 10**y: the axis then ran to 1e17 GiB. The range and the HBM
    label are in log10 units, around what is drawn."""
    import math

    from explorer import advisor
    from explorer.layout import seed_layout
    from ui.advisor_view import figure

    search = advisor.stage1(seed_layout(), "v5litepod-8")
    fig = figure(search)
    limit = search.target.chip.program_hbm_bytes  # the HBM XLA lets a program use: the verdict's line
    values = [y for trace in fig.data for y in trace.y] + [limit / 2**30]
    low, high = fig.layout.yaxis.range
    assert low <= math.log10(min(values)) and math.log10(max(values)) <= high <= math.log10(max(values)) + 1
    label = next(a for a in fig.layout.annotations if "XLA lets a program use" in a.text)
    assert label.y == pytest.approx(math.log10(limit / 2**30))


def test_a_bad_depth_option_or_budget_is_named_before_the_run_and_kept():
    """The bad-input walk: a Depth option the model lacks was refused only at stage 2, under the CLI's name
    (--depth-option); a budget of 99 only turned the box red. Now each gets one message and the button waits."""
    at = advisor_page()
    at.selectbox(key="target_choice").set_value("v5litepod-8").run()
    at.text_input(key="advisor_depth_option").input("nope <b>x</b>").run()
    assert not at.exception
    assert [e.value.replace("\\", "") for e in at.error] == [
        "Depth option: 'nope <b>x</b>' is not an option of this layout's model; its options: batch, depth, layers, scan"
    ]
    assert at.button(key="advisor_run").disabled and at.text_input(key="advisor_depth_option").value == "nope <b>x</b>"
    at.text_input(key="advisor_depth_option").input("").run()
    at.number_input(key="advisor_compiles").set_value(99).run()
    assert [e.value.replace("\\", "") for e in at.error] == ["Candidates to compile (stage 2): 99 must be a whole number from 0 to 16"]
    assert at.button(key="advisor_run").disabled
