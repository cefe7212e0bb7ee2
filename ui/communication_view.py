"""The Communication view: which lines of the model make the compiled step move data, and what they move.

Reads a compiled step's collectives with their source lines (``explorer.hlo.sources``: a target compile's
``TargetCompile.traced()`` or a timing run's ``TimingResult.sources``) and shows one row per line of the
user's code, the most time first where a target costed the collectives (the roofline's estimate), else the
most bytes; a row opens the values it moves.
"""

from __future__ import annotations

import linecache
import os
from typing import Sequence

import pandas as pd
import streamlit as st

from explorer.hlo.sources import LineRow, Traced, by_line
from explorer.formats import human_bytes, human_seconds
from explorer.text import markdown_literal
from ui import tables

MAX_CODE = 120  # characters of a line's code shown in the table
# What a user decides from, in view at 1024 px beside the sidebar; function, modules and exact bytes one click away.
# The collectives, a sentence, get the room: at 140 px "all-reduce over data x1; all-reduce over model x3 (XLA combined
# several ops)" lost its end at 1024 px; a line's code is whole when its row is picked.
COLUMNS = {"line": 95, "bytes": 75, "time ≥ (estimate)": 85, "count": 50, "collectives": 185, "code": 95}  # + the row marker


def code_at(file: str | None, line: int | None) -> str:
    """The line's code, read from the file where it exists on this machine ('' otherwise)."""
    if not file or not line or not os.path.isfile(file):
        return ""
    text = linecache.getline(file, line).strip()
    return text if len(text) <= MAX_CODE else text[: MAX_CODE - 1] + "…"


def rows_frame(rows: Sequence[LineRow]) -> pd.DataFrame:
    """The table: one row per source line, what it costs first."""
    costed = bool(rows) and rows[0].seconds is not None
    return pd.DataFrame(
        [
            {"line": f"{os.path.basename(row.file)}:{row.line}" if row.file else "(no model line)", "bytes": human_bytes(row.bytes)}
            | ({"time ≥ (estimate)": human_seconds(row.seconds)} if costed else {})
            | {
                "count": row.count,
                "collectives": row.kinds + (" (combined by XLA: see below)" if row.combined else ""),
                "code": code_at(row.file, row.line),
                "function": row.function or "",
                "modules": ", ".join(m or "(top)" for m in row.modules),
                "bytes (exact)": row.bytes,
            }
            for row in rows
        ]
    )


def combined_note(rows: Sequence[LineRow]) -> str:
    """What the CLI marks "[XLA combined several ops]", said under the table (the collectives column is cut on a narrow
    page): which lines hold a collective XLA merged from several, whose bytes and count are the merged op's, and the
    ops it merged (plain text: the caller escapes it). '' when none was combined."""
    lines = [
        f"{row.where}: {human_bytes(row.bytes)}, count {row.count}, in collectives XLA combined from several ops"
        + (f" ({', '.join(row.ops)})" if row.ops else "")
        for row in rows
        if row.combined
    ]
    if not lines:
        return ""
    return (
        "XLA combined several ops into one collective, which keeps one op's line: the whole of it is given to that line. "
        + "; ".join(lines)
        + "."
    )


def render(traced: Sequence[Traced], *, key: str, origin: str) -> None:
    """The view for one compiled step's collectives; ``origin`` says which program (``v5p:2x2x2 compile``)."""
    rows = by_line(traced)
    st.markdown(f"**Communication by source line** ({markdown_literal(origin)}; per device per step)")
    if not rows:
        st.caption("No collectives: every device computes on its own data.")
        return
    costed = rows[0].seconds is not None
    with st.container(key=f"communication_{key}"):
        event = tables.fitted(
            rows_frame(rows),
            COLUMNS,
            {"time ≥ (estimate)": "time ≥"},
            on_select="rerun",
            selection_mode="single-row",
            key=f"communication_table_{key}",
            row_height=tables.WRAPPED_ROW_PX,  # the collectives ("all-reduce (XLA combined several ops)") and the code wrap, not cut
            height=tables.wrapped_height(len(rows)),
        )
    st.caption(
        ("Sorted by the roofline's time for each line's collectives (an estimate, shared out by bytes)" if costed else "Sorted by bytes")
        + ". Each line is the innermost frame of the model's own code in the stack XLA kept for the collective "
        "(JAX, Flax, optax, the standard library and the explorer skipped); click a row for the values it moves."
    )
    note = combined_note(rows)
    if note:
        with st.container(key=f"communication_combined_{key}"):
            st.caption(markdown_literal(note))
    picked = event.selection.rows if event is not None else []
    if picked and picked[0] < len(rows):
        _values(rows[picked[0]])


def _values(row: LineRow) -> None:
    """What the selected line's collectives move: each value's producing op and its shape per device."""
    with st.container(key="communication_values"):
        st.markdown(f"**{markdown_literal(row.where)}** moves")
        code = code_at(row.file, row.line)
        if code:
            st.code(code, language="python", wrap_lines=True)
        st.dataframe(pd.DataFrame([{"op": v.op_name, "shape (per device)": v.shape} for v in row.values]), hide_index=True, width="stretch")
        if row.file:
            st.caption(markdown_literal(row.file))


def top_lines(traced: Sequence[Traced], count: int = 3) -> list[str]:
    """The Compare page's summary of one layout: its top lines by communication, one string each."""
    rows = by_line(traced)[:count]
    if not rows:
        return ["no collectives"]
    return [f"{human_bytes(r.bytes)} · {r.where} · {code_at(r.file, r.line) or r.kinds}" for r in rows]
