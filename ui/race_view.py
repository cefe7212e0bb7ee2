"""The alternating timing race as the pages run it (Compare, and the Advisor's top three): its stage, Stop, the result.

The race itself is ``explorer.timing.compare.race``; this runs it in the server-wide queue with its true stage
on show, keeps the finished rounds in the session (Stop is a rerun), and draws the result.
"""

from __future__ import annotations

import statistics

import pandas as pd
import streamlit as st

from explorer.plots.times import race_figure
from explorer.timing.compare import RaceResult, race
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.predict.step_model import SCOPE
from explorer.text import markdown_literal
from ui.turnstile import TURNSTILE

RACE = "compare_race"  # (layout keys raced, labels, RaceResult so far, finished)
RACE_ROUNDS = "compare_race_rounds"  # the rounds the last race was asked for


def race_now(
    labels: list[str], layouts: list[Layout], racing: list[str], rounds: int, steps: int, key: str = RACE, stop_key: str = "race_stop"
) -> None:
    """Run the race with its true stage on show; Stop (a rerun) ends it and keeps the finished rounds."""
    stop_slot = st.empty()
    stop_slot.button("Stop", key=stop_key, help="Stops the race; the rounds finished so far are kept")
    status = st.status("Race: waiting for a turn…", expanded=True)
    progress = status.progress(0.0, text="queued")
    st.session_state[key + "_rounds"] = rounds
    st.session_state[key] = (racing, labels, RaceResult(tuple(l.name for l in layouts), tuple(() for _ in layouts), steps), False)

    def on_wait(ahead: int) -> None:
        progress.progress(0.0, text=f"waiting for a turn: {ahead} timing(s) ahead of you (one runs at a time)")

    def on_phase(round_index: int, index: int, phase: str) -> None:
        done = (round_index * len(layouts) + index) / (rounds * len(layouts))
        progress.progress(done, text=f"round {round_index + 1} of {rounds} · {labels[index]}: {phase}…")

    def on_round(round_index: int, result: RaceResult) -> None:
        st.session_state[key] = (racing, labels, result, round_index + 1 == rounds)

    TURNSTILE.enter(on_wait=on_wait)
    try:
        status.update(label="Racing", state="running", expanded=True)
        race(layouts, rounds=rounds, steps=steps, on_round=on_round, on_phase=on_phase)
    except ExplorerError as error:
        status.update(label="The race was refused", state="error", expanded=True)
        status.error(markdown_literal(f"The race was refused: {error}"))
        stop_slot.empty()
        return
    finally:
        TURNSTILE.leave()
    status.update(label=f"Raced {rounds} round(s)", state="complete", expanded=False)
    stop_slot.empty()


def raced_medians() -> dict[str, float]:
    """layout key -> the median of its round medians in the last race (finished rounds), for the timings table."""
    stored = st.session_state.get(RACE)
    if not stored:
        return {}
    racing, _, result, _ = stored
    return {key: statistics.median(medians) for key, medians in zip(racing, result.round_medians) if medians}


def show_race(
    labels: list[str], result: RaceResult, chart_key: str = "race_chart", expected: list[float | None] | None = None, on: str = ""
) -> None:
    """The race's rounds; with ``expected`` (each layout's predicted step on the target ``on``), the ratio the
    prediction expects beside the one measured here."""
    rows = []
    for index, label in enumerate(labels):
        medians = result.round_medians[index]
        summary = result.summary(index)
        row = {
            "layout": label,
            "median step (ms)": round(statistics.median(medians) * 1e3, 2),
            f"ratio to {labels[0]}": f"{summary['median']:.3f} (min {summary['min']:.3f}, max {summary['max']:.3f})",
        }
        if expected is not None:
            ratio = expected[index] / expected[0] if expected[index] and expected[0] else None
            row[f"predicted ratio on {on}"] = f"{ratio:.3f}" if ratio else "not compiled"
        rows.append(row)
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        # two decimals on every row: a median of 69.0 ms showed as "69" beside "159.74"
        column_config={"median step (ms)": st.column_config.NumberColumn("median step (ms)", format="%.2f")},
    )
    if expected is not None:
        st.caption(
            f"Predicted ratio: the step model's prediction on {on} (kernel by kernel from XLA's program; {SCOPE}), the ratio "
            "a race on that target is expected to show; the race runs on this machine's devices."
        )
    st.plotly_chart(race_figure(labels, result.round_medians), key=chart_key)
