"""A timing as the pages run it live (the Timing page's train step, the Arrays page's op): its turn, its stage, its chart, Stop.

``run_timing`` waits for the server-wide queue (one timing at a time, so figures are not distorted), shows the
stage and a chart that fills as samples arrive, and shows a refusal as a message; ``time_with_stop`` puts a Stop
button above it (Stop is a rerun: it interrupts the run, whose samples so far the page keeps) and stores the result.

``Job`` runs a timing that can stop itself after a step (``should_stop``) in a thread of its own instead: a rerun
(Stop, an edit, another page) interrupts only the script that draws it, which then asks the job to stop; the job
ends after its current step with a whole result (compile, memory, collectives) for the steps that ran, and the next
run of the page waits for it (``Job.wait``) and shows that result as it would a finished one.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

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


# How often the script drawing a job looks at it: each look is an element call, where a rerun interrupts the script.
JOB_POLL_S = 0.1


class Job(Generic[R]):
    """A timing in a thread of its own that stops after its current step when asked (``stop``), its result kept.

    ``work(job)`` runs the timing with ``job.stop.is_set`` as its ``should_stop`` and records its stage in
    ``phase`` and its step times in ``samples``; it runs in its turn of the server's queue, which it leaves when it ends.
    """

    def __init__(self, key: str, steps: int, work: Callable[["Job[R]"], R]) -> None:
        self.key, self.steps, self.work = key, steps, work
        self.phase = "queued"
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.done = threading.Event()
        self.result: R | None = None
        self.refusal: ExplorerError | None = None
        self.failure: BaseException | None = None  # anything else: raised again in the script that shows the job

    def start(self) -> None:
        """Run ``work`` in a thread; the caller has entered the queue's turn, which the thread leaves when it ends."""

        def body() -> None:
            try:
                self.result = self.work(self)
            except ExplorerError as error:
                self.refusal = error
            except BaseException as error:  # noqa: BLE001 - handed to the script thread, which raises it
                self.failure = error
            finally:
                TURNSTILE.leave()
                self.done.set()

        threading.Thread(target=body, name=f"timing {self.key}", daemon=True).start()

    def wait(self) -> R | None:
        """The result once the job has ended (after its current step, where stopped); None where it was refused."""
        self.done.wait()
        if self.failure is not None:
            raise self.failure
        return self.result


def follow(job: Job[R], live: Live, draw: Callable[[Job[R]], None], one_at_a_time: str, done: Callable[[R], str]) -> R | None:
    """Start ``job`` in its turn of the queue and draw it (``draw(job)`` every JOB_POLL_S) until it ends; its result.

    Interrupted by a rerun, this script asks the job to stop: it ends after its current step, and the next run
    of the page shows its result. A refusal is shown as a message, and gives None.
    """

    def on_wait(ahead: int) -> None:
        live.progress.progress(0.0, text=f"{ahead} timing(s) ahead of you ({one_at_a_time}, so figures are not distorted)")

    try:
        TURNSTILE.enter(on_wait=on_wait)
    except BaseException:  # a rerun while waiting for a turn: the job never starts, and nothing waits for it
        job.done.set()
        raise
    try:
        job.start()
    except BaseException:
        TURNSTILE.leave()
        job.done.set()
        raise
    try:
        live.status.update(label="Running", state="running", expanded=True)
        while not job.done.wait(JOB_POLL_S):
            draw(job)
    finally:
        if not job.done.is_set():
            job.stop.set()
    result = job.wait()
    if result is None:
        live.status.update(label="Refused", state="error")
        st.error(markdown_literal(str(job.refusal)))
        return None
    draw(job)
    live.status.update(label=done(result), state="complete", expanded=False)
    live.chart.empty()
    return result
