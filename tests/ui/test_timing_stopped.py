"""A timing in its own thread (``ui.live_timing.Job``): it takes its turn of the queue, stops after its current step when asked,
and keeps the figures of the steps it ran."""

import threading
import time

import pytest

from explorer.errors import ExplorerError
from ui.live_timing import Job
from ui.turnstile import TURNSTILE


def test_a_job_asked_to_stop_ends_after_its_current_step_with_its_result_and_leaves_the_queue():
    """What Stop relies on: the job, in its own thread, finishes the step it is in and returns its whole result;
    the queue's turn is free again once it has ended."""
    in_step, go_on = threading.Event(), threading.Event()

    def work(job: Job) -> list[float]:
        while not job.stop.is_set():
            if len(job.samples) == 2:  # the third step is under way when Stop comes
                in_step.set()
                go_on.wait(10)
            job.samples.append(0.001 * (len(job.samples) + 1))
        return list(job.samples)

    job = Job("key", 1000, work)
    job.start()
    assert in_step.wait(10)
    job.stop.set()
    assert not job.done.wait(0.2)  # the step under way is not cut short
    go_on.set()
    assert job.wait() == [0.001, 0.002, 0.003]
    assert TURNSTILE.queue_length() == 0


def test_a_refused_job_gives_no_result_and_keeps_the_refusal():
    def work(job: Job) -> None:
        raise ExplorerError("steps", 0, "must be between 1 and 10,000")

    job = Job("key", 0, work)
    job.start()
    assert job.wait() is None and "steps" in str(job.refusal)
    assert TURNSTILE.queue_length() == 0


def test_a_failing_job_raises_in_the_script_that_shows_it():
    def work(job: Job) -> None:
        raise RuntimeError("boom")

    job = Job("key", 1, work)
    job.start()
    with pytest.raises(RuntimeError, match="boom"):
        job.wait()


def test_a_job_stopped_while_waiting_for_its_turn_never_runs_and_leaves_the_queue_as_it_was():
    """Stop pressed while another timing holds the queue: this job leaves the queue without running, the page's next
    run does not wait for it, and the timing holding the queue keeps its turn."""
    ran = []
    job = Job("key", 10, lambda job: ran.append(1))
    TURNSTILE.enter()  # another timing runs
    try:
        job.start()
        deadline = time.monotonic() + 10
        while TURNSTILE.queue_length() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert TURNSTILE.queue_length() == 2 and job.ahead == 1  # waiting, behind the one running
        job.stop.set()
        assert job.done.wait(10) and job.wait() is None and job.refusal is None and not ran
        assert TURNSTILE.queue_length() == 1  # the other timing's turn, untouched
    finally:
        TURNSTILE.leave()
    assert TURNSTILE.queue_length() == 0


def test_streamlits_own_stop_during_a_redraw_stops_the_timing(monkeypatch):
    """Issue 55: Streamlit's Stop (its header shows one while a script runs) ended the page's script, not the timing,
    and left the page frozen. Now the timing's page only redraws it (``live_timing.follow``, a fragment), and
    Streamlit's Stop during a redraw, which raises StopException at the redraw's next element, stops the timing too."""
    import streamlit as st
    from streamlit.runtime.scriptrunner import StopException

    from ui import live_timing

    gate = threading.Event()
    job = Job("key", 1000, lambda job: gate.wait(10) and None)
    monkeypatch.setattr(st, "session_state", {live_timing.JOB: job})

    def draw(job: Job) -> None:
        raise StopException()  # what an element call raises once Stop was pressed

    with pytest.raises(StopException):
        live_timing.redraw(draw)
    assert job.stop.is_set()
    drawn = []
    live_timing.redraw(drawn.append)  # a redraw not stopped leaves the timing alone
    assert drawn == [job]


def test_every_stop_button_of_the_pages_hides_streamlits_own():
    """Streamlit's header Stop ends a script run and nothing it started (a timing, a race, a compile): where a page shows
    its own Stop, ``live_timing.ONE_STOP`` hides Streamlit's. Every Stop the pages draw is one of ``PAGE_STOPS``."""
    import re

    from tests.paths import ROOT
    from ui import live_timing

    source = "\n".join(path.read_text() for path in sorted((ROOT / "ui").glob("*.py")))
    keys = set(re.findall(r'button\(\s*"Stop",\s*key="(\w+)"', source))  # a literal key
    keys |= set(re.findall(r'stop_key(?:: str)? ?= ?"(\w+)"', source))  # a key handed to a Stop (race_view's, the advisor's)
    keys |= set(re.findall(r'time_with_stop\(\s*\w+,\s*[^,]+,\s*"(\w+)"', source))  # the Arrays page's
    assert keys == set(live_timing.PAGE_STOPS), keys ^ set(live_timing.PAGE_STOPS)
    assert all(f".stApp:has(.st-key-{key})" in live_timing.ONE_STOP for key in keys)
