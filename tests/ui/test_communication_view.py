"""The Communication view's table from plain data: one row per source line, its code read from the file."""

from __future__ import annotations

from explorer.models import mlp
from explorer.hlo.sources import Source, Traced, Value
from ui.communication_view import code_at, combined_note, rows_frame, top_lines
from explorer.hlo.sources import by_line


def _line_of(code: str) -> int:
    with open(mlp.__file__) as handle:
        return next(n for n, text in enumerate(handle, start=1) if code in text)


DENSE = _line_of("y = nn.Dense(")
DOT = _line_of("z = jnp.dot(y, W2)")
TRACED = (
    Traced(
        "all-reduce",
        ("model",),
        3,
        3000,
        (
            Source(
                mlp.__file__,
                DOT,
                "LogicalDotReluDot.__call__",
                "LogicalDotReluDot_0",
                2,
                2000,
                values=(Value("jit(s)/dot_general", "f32[4,1024]"),),
            ),
            Source(mlp.__file__, DENSE, "LogicalDotReluDot.__call__", "LogicalDotReluDot_1/Dense_0", 1, 1000),
        ),
        seconds=3e-6,
    ),
    Traced(
        "all-gather",
        ("data",),
        1,
        5000,
        (Source(mlp.__file__, DENSE, "LogicalDotReluDot.__call__", "LogicalDotReluDot_0/Dense_0", 1, 5000),),
        2e-6,
    ),
)


def test_one_row_per_line_the_most_time_first_with_its_code():
    frame = rows_frame(by_line(TRACED))
    # the Dense line: 1/3 of the all-reduce's 3 us and the whole all-gather's 2 us = 3 us; the dot line 2 us
    assert frame["line"].tolist() == [f"mlp.py:{DENSE}", f"mlp.py:{DOT}"]
    assert frame["function"].tolist() == ["LogicalDotReluDot.__call__"] * 2
    assert frame["code"].tolist()[0].startswith("y = nn.Dense(")
    assert frame["bytes (exact)"].tolist() == [6000, 2000]
    assert frame["collectives"].tolist()[0] == "all-reduce over model x1; all-gather over data x1"
    assert "time ≥ (estimate)" in frame.columns


def test_a_file_not_on_this_machine_shows_no_code_and_no_collectives_say_so():
    assert code_at("/nowhere/model.py", 3) == "" and code_at(None, None) == ""
    assert top_lines(()) == ["no collectives"]
    assert top_lines(TRACED, 1) == [f"5.9 KiB · mlp.py:{DENSE} (LogicalDotReluDot.__call__) · y = nn.Dense("]


def test_a_collective_xla_combined_is_said_under_the_table_with_the_ops_it_merged():
    """The page gave a combined all-reduce's 8 MiB to one line and said nothing (the CLI says "[XLA combined several ops]")."""
    ops = ("jit(s)/dot_general", "jit(s)/add")
    merged = Traced(
        "all-reduce", ("model",), 4, 8 << 20, (Source(mlp.__file__, DOT, "LogicalDotReluDot.__call__", "", 4, 8 << 20, True, ops),)
    )
    note = combined_note(by_line((merged,)))
    assert note.startswith("XLA combined several ops into one collective")
    assert f"mlp.py:{DOT} (LogicalDotReluDot.__call__): 8.0 MiB, count 4, in collectives XLA combined from several ops" in note
    assert "(jit(s)/dot_general, jit(s)/add)" in note
    assert combined_note(by_line(TRACED)) == ""
