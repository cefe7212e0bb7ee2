"""Tables that fit a laptop: the columns a decision needs in view, every other one a click away.

Beside the sidebar a page's main area is about 650 px wide at 1024 x 768. Each table names the
columns its page's decision needs (``shown``, with widths that fit together); the others are hidden,
and the table's own "Show/hide columns" menu (its toolbar, top right) brings any of them back.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd
import streamlit as st


def column_config(columns: Sequence[str], shown: Sequence[str], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """``config`` with every column not in ``shown`` hidden (still offered in the Show/hide columns menu)."""
    merged: dict[str, Any] = {}
    for column in columns:
        entry = (config or {}).get(column)
        entry = {"label": entry} if isinstance(entry, str) else dict(entry or {})
        if column not in shown:
            entry["hidden"] = True
        merged[column] = entry
    return merged


def fitted(frame: pd.DataFrame, shown: Sequence[str], config: dict[str, Any] | None = None, **kwargs: Any):
    """``st.dataframe`` of ``frame`` with ``shown`` first and in view, the other columns hidden but one click away."""
    columns = list(frame.columns)
    order = list(shown) + [c for c in columns if c not in shown]
    kwargs.setdefault("hide_index", True)
    kwargs.setdefault("width", "stretch")
    return st.dataframe(frame, column_order=order, column_config=column_config(columns, shown, config), **kwargs)
