"""A timing as the pages run it live (the Timing page's train step, the Arrays page's op): its turn, its stage, its chart, Stop.

``run_timing`` waits for the server-wide queue (one timing at a time, so figures are not distorted), shows the
stage and a chart that fills as samples arrive, and shows a refusal as a message; ``time_with_stop`` puts a Stop
button above it (Stop is a rerun: it interrupts the run, whose samples so far the page keeps) and stores the result.

``Job`` runs a timing that can stop itself after a step (``should_stop``) in a thread of its own instead, and the
page's script ends: ``follow`` (a fragment) redraws its stage and chart every JOB_REDRAW_S, and its Stop (or any
run of a page: an edit, another page) asks the job to stop; the job ends after its current step with a whole result
(compile, memory, collectives) for the steps that ran, and the page runs again and shows it (``collect``) as it
would a finished one.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.scriptrunner import StopException

from explorer.errors import ExplorerError
from explorer.text import markdown_literal
from ui.turnstile import TURNSTILE

R = TypeVar("R")

# The pages' own Stop buttons (their keys). Streamlit's header shows a Stop of its own while a script runs, which ends
# that script run and nothing it started: the page stays as last drawn (the Timing page froze on "Running · step 13 of
# 60"; a race, the advisor or a compile would too). Where one of the page's own is on the page, Streamlit's is hidden.
PAGE_STOPS = ("stop_button", "arrays_stop_button", "race_stop", "advisor_race_stop", "advisor_stop", "target_stop_button")
ONE_STOP = (
    "<style>"
    + ", ".join(f".stApp:has(.st-key-{key}) [data-testid='stStatusWidget'] button" for key in PAGE_STOPS)
    + " {display: none;}</style>"
)
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


# How often the page redraws a running job (a fragment's run_every): each redraw is a short script run of its own.
JOB_REDRAW_S = 0.5
JOB = "live_timing_job"  # this session's Job, from its start until a page keeps its result (``collect``)


class Job(Generic[R]):
    """A timing in a thread of its own that stops after its current step when asked (``stop``), its result kept.

    ``work(job)`` runs the timing with ``job.stop.is_set`` as its ``should_stop`` and records its stage in
    ``phase`` and its step times in ``samples``. The thread waits for its turn of the server's queue first (``ahead``:
    the timings before it), and leaves it when it ends; asked to stop while waiting, it ends without running.
    """

    def __init__(self, key: str, steps: int, work: Callable[["Job[R]"], R]) -> None:
        self.key, self.steps, self.work = key, steps, work
        self.phase = "queued"
        self.ahead = 0
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.done = threading.Event()
        self.result: R | None = None
        self.refusal: ExplorerError | None = None
        self.failure: BaseException | None = None  # anything else: raised again in the script that shows the job

    def start(self) -> None:
        """Run ``work`` in a thread, in its turn of the server's queue."""

        def on_wait(ahead: int) -> None:
            self.ahead = ahead

        def body() -> None:
            try:
                if not TURNSTILE.enter(on_wait=on_wait, give_up=self.stop.is_set):
                    return  # stopped before its turn came: nothing ran
                try:
                    self.result = self.work(self)
                finally:
                    TURNSTILE.leave()
            except ExplorerError as error:
                self.refusal = error
            except BaseException as error:  # noqa: BLE001 - handed to the script thread, which raises it
                self.failure = error
            finally:
                self.done.set()

        threading.Thread(target=body, name=f"timing {self.key}", daemon=True).start()

    def wait(self) -> R | None:
        """The result once the job has ended (after its current step, where stopped); None where it was refused or
        stopped before its turn."""
        self.done.wait()
        if self.failure is not None:
            raise self.failure
        return self.result


def start(job: Job) -> None:
    """Start ``job`` as this session's timing (``follow`` draws it, ``collect`` keeps its result)."""
    st.session_state[JOB] = job
    job.start()


def stop_running() -> None:
    """A run of a page (an edit, another page, Time again) stops this session's timing after its current step.

    Called once per run of the app, before the page: only the live drawing (``follow``, a fragment) reruns without
    stopping it. The page that shows timings keeps the result (``collect``).
    """
    job = st.session_state.get(JOB)
    if job is not None:
        job.stop.set()


def collect(wait_label: str) -> Job | None:
    """This session's timing once it has ended (waiting for its current step, with ``wait_label`` on show), taken
    out of the session: the page keeps its result. None when there is none."""
    job = st.session_state.get(JOB)
    if job is None:
        return None
    if not job.done.is_set():
        job.stop.set()
        with st.spinner(wait_label):
            job.done.wait()
    st.session_state.pop(JOB, None)
    job.wait()  # raises a failure here, in the script
    return job


def running() -> Job | None:
    """This session's timing while it runs (or has ended and not been collected)."""
    return st.session_state.get(JOB)


def redraw(draw: Callable[[Job], None]) -> None:
    """One drawing of this session's timing (``draw(job)``); once it has ended, the page runs again and shows its
    result. Streamlit's own Stop, which its header shows while a drawing runs (it ends that script run, not the
    timing), stops the timing as the page's Stop does: the next drawing shows it stopping, then its result."""
    job = st.session_state.get(JOB)
    if job is None:
        return
    if job.done.is_set():
        st.rerun(scope="app")
    try:
        draw(job)
    except StopException:
        job.stop.set()
        raise


# A fragment: the page's script ends while the timing runs in its thread, and only this redraws every JOB_REDRAW_S,
# so a click (Stop) is handled at once. Before, the page's script ran as long as the timing: Streamlit's own Stop
# ended it and left the page frozen on its last drawing ("Running · step 13 of 60").
follow = st.fragment(run_every=JOB_REDRAW_S)(redraw)
