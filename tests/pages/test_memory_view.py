"""The levers table of ui/memory_view.py: a lever's reason for no compiled peak is whole under the table, not cut in a cell."""

from types import SimpleNamespace

from explorer.advisor.levers import Lever, LeverOutcome
from ui.memory_view import _lever_row, _why_not

WHY = "the explorer's train step computes the whole [batch, length, vocab] logits: the model has no vocabulary tiling"


def lever(unavailable: str = "") -> Lever:
    return Lever("vocabulary tiling", ("saved activation",), 2 << 30, 2 << 30, None, "none", unavailable)


def test_a_lever_the_model_cannot_make_says_why_below_the_table_and_a_short_word_in_its_cell():
    outcome = LeverOutcome(lever(WHY), None, WHY)  # as the page builds it before any compile
    assert _why_not(outcome) == WHY
    row = _lever_row(outcome, base=None)
    assert row["XLA's new peak"] == "not compiled: see below"  # the sentence was cut after three lines at 1024 and 1440 px
    assert row["fits"] == "—"


def test_a_lever_not_compiled_yet_has_nothing_to_explain():
    made = Lever("remat full", ("saved activation",), 22 << 30, 22 << 30, SimpleNamespace(name="t+remat_full"), "recompute")
    outcome = LeverOutcome(made, None)
    assert _why_not(outcome) == ""
    assert _lever_row(outcome, base=None)["XLA's new peak"] == "not compiled yet"


def test_a_failed_lever_compile_points_below_to_its_error():
    made = Lever("2 microbatches", ("saved activation",), 22 << 30, 11 << 30, SimpleNamespace(name="t+2_microbatches"), "more steps")
    outcome = LeverOutcome(made, None, "compile failed: out of host memory")
    assert _why_not(outcome) == "compile failed: out of host memory"
    assert _lever_row(outcome, base=None)["XLA's new peak"] == "not compiled: see below"
