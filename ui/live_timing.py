"""A timing as the pages run it live (the Timing page's train step, the Arrays page's op): its turn, its stage, its chart, Stop.

``run_timing`` waits for the server-wide queue (one timing at a time, so figures are not distorted), shows the
stage and a chart that fills as samples arrive, and shows a refusal as a message; ``time_with_stop`` puts a Stop
button above it (Stop is a rerun: it interrupts the run, whose samples so far the page keeps) and stores the result.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

import plotly.graph_objects as go
import streamlit as st

from explorer.errors import ExplorerError
from explorer.text import markdown_literal
from ui.turnstile import TURNSTILE

R = TypeVar("R")
# Fast steps would otherwise send the browser a new chart every few milliseconds.
LIVE_REDRAW_S = 0.2


class Live:
    """The status box of a run in progress, its progress bar and its live chart."""

    def __init__(self, first_frame: go.Figure, frame_key: str) -> None:
        self.status = st.status("Waiting for a turn…", expanded=True)
        self.progress = self.status.progress(0.0, text="queued")
        self.chart = st.empty()
        # The empty frame goes up before the queue and the compile, so the browser has loaded
        # Plotly by the time the first step arrives and the chart fills from its first point.
        self.chart.plotly_chart(first_frame, key=frame_key)
        self.last_drawn = 0.0

    def redraw(self, figure: Callable[[], go.Figure], key: str, last: bool) -> None:
        """The chart at most every LIVE_REDRAW_S, and always for the last sample (``figure`` is built only to be drawn)."""
        now = time.monotonic()
        if now - self.last_drawn >= LIVE_REDRAW_S or last:
            self.chart.plotly_chart(figure(), key=key)
            self.last_drawn = now


def run_timing(
    time_it: Callable[[Live], R], *, first_frame: go.Figure, frame_key: str, one_at_a_time: str, done: Callable[[R], str]
) -> R | None:
    """``time_it(live)`` in its turn of the queue, with its stage on show; None (and the message) where it is refused.

    ``one_at_a_time`` is the waiting line's reason, ``done(result)`` the status' label once finished.
    """
    live = Live(first_frame, frame_key)

    def on_wait(ahead: int) -> None:
        live.progress.progress(0.0, text=f"{ahead} timing(s) ahead of you ({one_at_a_time}, so figures are not distorted)")

    TURNSTILE.enter(on_wait=on_wait)
    try:
        live.status.update(label="Running", state="running", expanded=True)
        result = time_it(live)
    except ExplorerError as error:
        live.status.update(label="Refused", state="error")
        st.error(markdown_literal(str(error)))
        return None
    finally:
        TURNSTILE.leave()
    live.status.update(label=done(result), state="complete", expanded=False)
    live.chart.empty()
    return result


def time_with_stop(results: str, key: str, stop_key: str, stop_help: str, run: Callable[[], R | None]) -> None:
    """``run()`` under a Stop button; its result (where not refused) becomes ``st.session_state[results][key]``."""
    st.session_state.get(results, {}).pop(key, None)
    stop_slot = st.empty()
    stop_slot.button("Stop", key=stop_key, help=stop_help)
    result = run()
    stop_slot.empty()
    if result is not None:
        st.session_state.setdefault(results, {})[key] = result
