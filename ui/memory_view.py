"""What fills the memory at the peak, on the pages: the Layout page's target verdict (the bytes held over the program,
the buffers live at the peak, and what to change), the Timing page's compile, and Compare's peaks side by side.

Reads ``explorer.compile.memory_breakdown`` and ``explorer.advisor.levers``; the levers compile in the server's pool.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from explorer.advisor.levers import LeverOutcome, compile_levers, levers, needs_levers
from explorer.compile.compile_pool import queue_text
from explorer.compile.compile_result import TargetCompile
from explorer.compile.memory_breakdown import KIND_RULES, MemoryBreakdown
from explorer.formats import counted, human_bytes, share, short_path
from explorer.layout import Layout
from explorer.memory_text import buffer_rows, peak_headline
from explorer.plots.peak import heap_figure, kind_bars
from explorer.text import markdown_literal
from ui import state, tables
from ui.turnstile import session_id

BUFFER_WIDTHS = {"size": 75, "kind": 105, "shape": 120, "line": 150, "what": 140}  # together under 600 px: in view at 1024
LEVER_WIDTHS = {"lever": 160, "shrinks": 130, "frees (estimate)": 80, "XLA's new peak": 130, "fits": 45}
LEVERS = "memory_levers"  # (layout, target) -> the levers' outcomes this session compiled


def breakdown_section(breakdown: MemoryBreakdown | None, key: str, limit: tuple[int, str] | None = None, per: str = "device") -> None:
    """The peak explained: the bytes held over the program with the peak marked, then what is live there, largest first."""
    st.markdown(f"**What fills the memory at the peak** (per {per}, from XLA's buffer assignment)")
    if breakdown is None:
        st.caption("Not available for this result: an extrapolation in depth, or a result without XLA's dump read (compile it on its own).")
        return
    with st.container(key=f"{key}_headline"):
        st.caption(markdown_literal(peak_headline(breakdown)[0].upper() + peak_headline(breakdown)[1:] + "."))
    with st.container(key=f"{key}_chart"):
        st.plotly_chart(heap_figure(breakdown, limit, per), key=f"{key}_heap")
    st.caption(
        "Bytes held at each point of XLA's schedule of the step (the x axis is program order, not time), as XProf's "
        "Memory Viewer draws it: arguments held throughout, then XLA's heap as its buffers come and go."
    )
    kinds = [g for g in breakdown.by_kind if g.bytes]
    st.markdown(
        markdown_literal(
            "By kind: " + "; ".join(f"{g.name} {human_bytes(g.bytes)} ({share(g.bytes / breakdown.peak_bytes)})" for g in kinds)
        )
    )
    frame = pd.DataFrame(buffer_rows(breakdown.buffers))
    with st.container(key=f"{key}_buffers"):
        tables.fitted(frame, BUFFER_WIDTHS, key=f"{key}_buffers_table", height=min(420, 38 + 35 * len(frame)))
    rest = breakdown.others_count
    st.caption(
        f"The {counted(len(breakdown.buffers), 'largest buffer')} live at the peak"
        + (f"; {counted(rest, 'other')}, {human_bytes(breakdown.others_bytes)}, not listed" if rest else "")
        + ". Size as laid out (padded to the device's tiles), unpadded the elements alone."
    )
    with st.expander("By line of the model's code, by layer, and how each kind is decided"):
        lined = [g for g in breakdown.by_line if g.name]
        if lined:
            st.dataframe(
                pd.DataFrame([{"bytes": human_bytes(g.bytes), "line": short_path(g.name, 60), "kinds": _kinds(g.kinds)} for g in lined]),
                hide_index=True,
                width="stretch",
                key=f"{key}_lines",
            )
        if breakdown.by_layer:
            st.dataframe(
                pd.DataFrame([{"layer": g.name, "bytes": human_bytes(g.bytes), "kinds": _kinds(g.kinds)} for g in breakdown.by_layer]),
                hide_index=True,
                width="stretch",
                key=f"{key}_layers",
            )
            st.caption("A scanned stack's buffers (one slice per layer) are shared equally by its layers.")
        st.markdown("\n".join(f"- **{kind}**: {markdown_literal(rule)}" for kind, rule in KIND_RULES.items()))
    if breakdown.host_bytes:
        st.caption(f"In host memory (offloaded, not in the device's peak): {human_bytes(breakdown.host_bytes)}.")


def _kinds(kinds) -> str:
    return ", ".join(f"{k} {human_bytes(b)}" for k, b in kinds)


def target_section(result: TargetCompile, layout: Layout, per: str) -> None:
    """The Layout page's breakdown under the verdict, and what to change where the layout does not fit or fits tightly."""
    limit = result.memory_limit
    label = (
        f"JAX's {limit.fraction:.0%}: {human_bytes(limit.bytes)}"
        if result.target.is_gpu
        else f"XLA lets a program use {human_bytes(limit.bytes)}"
    )
    breakdown_section(result.memory_breakdown, "target_peak", (limit.bytes, label), per)
    if result.memory_breakdown is not None and needs_levers(result):
        levers_section(result, layout)


def levers_section(result: TargetCompile, layout: Layout) -> None:
    """The largest contributors, each with the lever that shrinks it; a button compiles them all and shows each new peak."""
    found = levers(result, layout)
    st.markdown("**What to change**: the largest contributors at the peak, each with the lever that shrinks it")
    if not found:
        st.caption("No lever this explorer knows shrinks this peak's largest contributors.")
        return
    slot = f"{result.target.topology}|{layout.key}"
    outcomes: tuple[LeverOutcome, ...] | None = st.session_state.get(LEVERS, {}).get(slot)
    runnable = [lever for lever in found if lever.layout is not None]
    button = st.empty()  # gone once the levers are compiled, in the run that compiles them too
    label = f"Compile {counted(len(runnable), 'lever')} for {result.target.name}"
    if outcomes is None and runnable and button.button(label, key="levers_compile_button"):
        button.empty()
        outcomes = _compile(found, result)
        st.session_state.setdefault(LEVERS, {})[slot] = outcomes
    shown = outcomes if outcomes is not None else tuple(LeverOutcome(lever, None, lever.unavailable) for lever in found)
    rows = [_lever_row(outcome, result) for outcome in shown]
    why_not = [(outcome.lever.name, _why_not(outcome)) for outcome in shown if _why_not(outcome)]
    with st.container(key="target_levers"):
        tables.fitted(
            pd.DataFrame(rows),
            LEVER_WIDTHS,
            key="target_levers_table",
            row_height=tables.WRAPPED_ROW_PX,
            height=tables.wrapped_height(len(rows)),
        )
    st.caption(
        "Frees (estimate): the bytes the lever is expected to free at the peak, an estimate; XLA's new peak is the compile's, "
        "the verdict's figure for the lever's layout."
    )
    for name, why in why_not:  # a sentence, whole here: in the table's narrow cell it was cut after three lines
        st.caption(f"{markdown_literal(name)}: {markdown_literal(why)}")
    made = [lever for lever in found if lever.layout is not None]
    if made:
        row = st.container(horizontal=True, vertical_alignment="bottom")
        names = [lever.layout.name for lever in made]
        pick = row.selectbox("Lever's layout", names, key="levers_pick")
        row.button(
            "Open on the Layout page",
            key="levers_open",
            on_click=state.open_layout,
            args=(made[names.index(pick)].layout, result.target.name),
            help="Replaces the layout in the sidebar with this lever's (the target stays)",
        )


def _compile(found, result: TargetCompile) -> tuple[LeverOutcome, ...]:
    status = st.status("Waiting for a turn…", expanded=True)
    line = status.empty()
    started = time.monotonic()

    def on_progress(jobs) -> None:
        if jobs:
            status.update(label=f"Compiling the levers for {result.target.name} · {time.monotonic() - started:.0f} s", state="running")
            line.write(" · ".join(f"{markdown_literal(j.layout.name)}: **{j.stage}**" for j in jobs))

    outcomes = compile_levers(
        found,
        result.target,
        session_id(),
        on_progress=on_progress,
        on_wait=lambda ahead, running: line.write(markdown_literal(queue_text(ahead, running))),
    )
    status.update(label=f"Compiled the levers in {time.monotonic() - started:.0f} s", state="complete", expanded=False)
    return outcomes


def _why_not(outcome: LeverOutcome) -> str:
    """Why a lever has no compiled peak: its compile's error, or why the model cannot make its layout ("" if neither)."""
    if outcome.result is not None:
        return ""
    return outcome.error or ("" if outcome.lever.layout is not None else outcome.lever.unavailable)


def _lever_row(outcome: LeverOutcome, base: TargetCompile) -> dict:
    lever = outcome.lever
    compiled = outcome.result
    if compiled is not None:
        peak = f"{human_bytes(outcome.peak_bytes)} ({human_bytes(base.judged_peak_bytes - outcome.peak_bytes)} less)"
        fits = "yes" if compiled.fits else "NO"
    else:
        peak = "not compiled: see below" if _why_not(outcome) else "not compiled yet"
        fits = "—"
    return {
        "lever": lever.name,
        "shrinks": f"{', '.join(lever.shrinks)}: {human_bytes(lever.target_bytes)}",
        "frees (estimate)": human_bytes(lever.saving_bytes),
        "XLA's new peak": peak,
        "fits": fits,
        "cost": lever.cost,
        "layout": lever.layout.name if lever.layout is not None else "—",
    }


def compare_section(labels: list[str], results: list[TargetCompile | None], per: str) -> None:
    """Compare: each layout's peak stacked by kind, side by side, and the table of the same figures."""
    breakdowns = [r.memory_breakdown if r is not None else None for r in results]
    if not any(b is not None for b in breakdowns):
        return
    st.markdown(f"**What each peak is made of** (per {per}, from XLA's buffer assignment)")
    with st.container(key="compare_peaks"):
        st.plotly_chart(kind_bars(labels, breakdowns, per), key="compare_peaks_chart")
    kinds = [k for k in KIND_RULES if any(b is not None and b.kind_bytes(k) for b in breakdowns)]
    rows = [
        {"kind": kind} | {label: (human_bytes(b.kind_bytes(kind)) if b is not None else "—") for label, b in zip(labels, breakdowns)}
        for kind in kinds
    ]
    rows.append(
        {"kind": "XLA's total"}
        | {label: (human_bytes(b.allocated_bytes) if b is not None else "—") for label, b in zip(labels, breakdowns)}
    )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="compare_peaks_table")
