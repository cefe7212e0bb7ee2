"""Tables that fit a laptop: the columns a decision needs in view, every other one a click away.

Beside the sidebar a page's main area is about 650 px wide at 1024 x 768. Each table names the
columns its page's decision needs (``shown``, with widths that fit together); the others are hidden,
and the table's own "Show/hide columns" menu (its toolbar, top right) brings any of them back.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd
import streamlit as st

# Streamlit's dataframe wraps a cell's text only where its rows are taller than 4rem (64 px): rows this tall hold three
# lines, so a long place, a sentence or a labelled figure wraps in its column instead of being cut ("0.0845 ms (estimate").
WRAPPED_ROW_PX = 68


def wrapped_height(rows: int, most: int = 420) -> int:
    """A wrapped table's height in pixels: its header and ``rows`` rows, at most ``most`` (the rest scroll)."""
    return min(most, 38 + WRAPPED_ROW_PX * rows)


def column_config(
    columns: Sequence[str], shown: Mapping[str, int], labels: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Each column of ``shown`` at its width in pixels (under its label from ``labels``), every other column hidden (still
    offered in the Show/hide columns menu); ``config`` adds to a column's settings (a format, a help text)."""
    merged: dict[str, Any] = {}
    for column in columns:
        entry: dict[str, Any] = {"label": (labels or {}).get(column, column)}
        if column in shown:
            entry["width"] = shown[column]
        else:
            entry["hidden"] = True
        extra = dict((config or {}).get(column) or {})  # a column_config object: its unset fields are None
        merged[column] = entry | {key: value for key, value in extra.items() if value is not None}
    return merged


def fitted(
    frame: pd.DataFrame,
    shown: Mapping[str, int],
    labels: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    **kwargs: Any,
):
    """``st.dataframe`` of ``frame``: the columns of ``shown`` first, each at its width (together under 600 px: a 1024 px
    screen's main area beside the sidebar), the others hidden but one click away."""
    columns = list(frame.columns)
    kwargs.setdefault("hide_index", True)
    kwargs.setdefault("width", "stretch")
    return st.dataframe(
        frame,
        column_order=list(shown) + [c for c in columns if c not in shown],
        column_config=column_config(columns, shown, labels, config),
        **kwargs,
    )
