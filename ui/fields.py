"""A bounded whole-number box that says what is wrong with a value out of range, instead of Streamlit's bounds.

Streamlit's ``min_value``/``max_value`` only turn the box red and keep the old value, so a run would start with a
number the user no longer sees. Here the box takes any number; one out of range gets one message naming the box
and the value (``explorer.errors.check_between``), and the caller disables what would use it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.errors import ExplorerError, check_between
from explorer.text import markdown_literal
from ui import state


def whole_number(where: Any, label: str, key: str, low: int, high: int, default: int, messages: Any, help: str | None = None) -> int | None:
    """``where.number_input`` for ``label`` (kept under ``key``, ``default`` at first): its value, or None (and the
    message in ``messages``) where it is not a whole number from ``low`` to ``high``."""
    st.session_state.setdefault(key, default)  # not value=: the values are carried across pages
    bounds = f"{low:,} to {high:,}"
    value = where.number_input(
        label,
        step=1,
        key=key,
        persist_state=state.ACROSS_PAGES if state.kept(key) else None,
        help=f"{help} ({bounds})" if help else f"A whole number from {bounds}",
    )
    try:
        return check_between(label, value, low, high)
    except ExplorerError as error:
        messages.error(markdown_literal(str(error)))
        return None
