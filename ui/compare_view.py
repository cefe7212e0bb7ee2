"""The Compare page's steps: the layouts picked, their differences, memory and warnings, the timings and the race.

The comparison itself is ``explorer.timing.compare`` (``spec_differences``, ``race``); the race runs through ``ui.race_view``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.sharing import library
from explorer.plots.memory import compare_memory
from explorer.analysis.report import Report
from explorer.timing.compare import spec_differences
from explorer.compile.compiled import check_timeable
from explorer.errors import ExplorerError
from explorer.hlo.program import used as used_collectives
from explorer.layout import MAX_FILE_BYTES, Layout, load_layout_bytes
from explorer.sharing.share import layout_from_link
from explorer.hardware.targets import Target
from explorer.formats import human_bytes, human_seconds, short_path
from explorer.text import markdown_literal
from ui import report_view, tables
from ui.current import simulated_devices_note
from ui.fields import whole_number
from ui.race_view import RACE, RACE_ROUNDS, race_now, raced_medians, show_race
from ui.state import ACROSS_PAGES, TIMING_RESULTS, as_shared
from ui.target_view import predicted_steps

CURRENT = "Current layout (sidebar)"
MAX_WARNINGS = 8  # per layout; the rest are counted


def chosen_layouts(current: Layout) -> list[tuple[str, Layout]]:
    """Layouts picked from the current one, the team library, files and links; problems shown per source."""
    try:
        entries = library.names()
    except ExplorerError as error:  # a bad library folder: said here, the rest of the page works
        st.error(markdown_literal(f"The team library cannot be used: {error}"))
        entries = []
    options = [CURRENT] + entries
    # Kept across pages (so no default=); an entry someone deleted from the library since is dropped.
    picked_before = st.session_state.get("compare_sources", [CURRENT])
    st.session_state["compare_sources"] = [source for source in picked_before if source in options]
    sources = st.multiselect("From the current layout and the team library", options, key="compare_sources", persist_state=ACROSS_PAGES)
    files_column, links_column = st.columns(2)
    files = files_column.file_uploader(
        "Layout files",
        type=["json"],
        accept_multiple_files=True,
        key="compare_files",
        max_upload_size=1,
        help=f"Layout files (JSON, UTF-8), each at most {MAX_FILE_BYTES:,} bytes",
    )
    links = links_column.text_area(
        "Links (one per line)", key="compare_links", persist_state=ACROSS_PAGES, placeholder="http://…/?name=…&mesh=2x4&…"
    )
    picked: list[tuple[str, Layout]] = []
    for source in sources:
        if source == CURRENT:
            picked.append((f"current: {as_shared(current).name}", current))  # "(edited)" as the Layout page says
            continue
        try:
            picked.append((f"library: {source}", library.load(source).layout))
        except ExplorerError as error:
            st.error(markdown_literal(f"Library entry '{source}': {error}"))
    for uploaded in files or []:
        try:
            picked.append((f"file: {uploaded.name}", load_layout_bytes(uploaded.getvalue(), "file")))
        except ExplorerError as error:
            st.error(markdown_literal(f"{uploaded.name}: {error}"))
    for number, line in enumerate((links or "").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            layout = layout_from_link(line)
            picked.append((f"link {number}: {layout.name}", layout))
        except ExplorerError as error:
            st.error(markdown_literal(f"Link {number}: {error}"))
    return picked


def show_differences(labels: list[str], reports: list[Report]) -> None:
    """The arrays whose spec differs between the layouts, each cell its spec and shard shape."""
    differences = spec_differences(reports)
    compared = len({info.path for report in reports for info in report.arrays})  # layouts may hold different arrays
    st.subheader(f"Arrays sharded differently ({len(differences)} of {compared})")
    if not differences:
        st.success("Every array has the same spec in every layout.")
        return
    rows = []
    for difference in differences:
        row = {"array": short_path(difference.path), "path": difference.path, "kind": difference.kind}
        row |= dict(zip(labels, difference.specs))
        row |= {f"{label} · shard": str(shard) for label, shard in zip(labels, difference.shard_shapes)}
        rows.append(row)
    # The point of the page in view at 1024 px: each array (its leaf) and its spec in every layout, side by side;
    # the whole path, the kind and the shard shapes in the table's Show/hide columns menu.
    spec_width = max(110, (600 - 270) // len(labels))
    with st.container(key="spec_diff"):
        tables.fitted(pd.DataFrame(rows), {"array": 270} | {label: spec_width for label in labels})
    st.caption(
        "Each layout's spec of the arrays sharded differently; arrays with the same spec everywhere are left out. "
        "The whole path, the kind and each layout's shard shape: the table's Show/hide columns menu."
    )


def show_memory(labels: list[str], reports: list[Report]) -> None:
    """Each layout's memory per device, side by side."""
    st.subheader("Memory per device")
    st.plotly_chart(compare_memory(labels, [r.totals for r in reports]), key="compare_memory")


def show_warnings(labels: list[str], reports: list[Report]) -> None:
    """Each layout's warnings in its own column, the first few in full."""
    st.subheader("Warnings")
    for column, label, report in zip(st.columns(len(reports)), labels, reports):
        with column:
            st.markdown(f"**{markdown_literal(label)}**")
            if not report.warnings:
                st.caption("none")
            for warning in report.warnings[:MAX_WARNINGS]:
                title = report_view.WARNING_TITLES.get(warning.code, warning.code)
                st.caption(f"**{markdown_literal(title)}:** {markdown_literal(warning.message)}")
            if len(report.warnings) > MAX_WARNINGS:
                st.caption(f"…and {len(report.warnings) - MAX_WARNINGS} more")


def show_timings(labels: list[str], layouts: list[Layout]) -> None:
    """Each layout's median step and collectives: from the Timing page's results, else from the last race."""
    results = st.session_state.get(TIMING_RESULTS, {})
    raced = raced_medians()
    rows = []
    for label, layout in zip(labels, layouts):
        result = results.get(layout.key)
        if result is None:
            median = raced.get(layout.key)
            if median is None:
                rows.append({"layout": label, "median step": "not timed", "collectives": "—"})
            else:
                rows.append({"layout": label, "median step": f"{human_seconds(median)}, race", "collectives": "time it on the Timing page"})
            continue
        used = (
            ", ".join(f"{op} ×{c['count']} ({human_bytes(c['bytes'])})" for op, c in used_collectives(result.collectives).items()) or "none"
        )
        ran = len(result.step_s.samples)
        stopped = f", stopped after {ran} of {result.planned_steps} steps" if result.stopped else ""  # the median of fewer steps: said
        rows.append({"layout": label, "median step": f"{human_seconds(result.step_s.median)}{stopped}", "collectives": used})
    st.subheader("Step times and collectives")
    with st.container(key="compare_timings"):  # a few rows of sentences: a static table wraps them, none is cut
        st.table(pd.DataFrame(rows), hide_index=True)
    st.caption(
        "From the Timing page's results in this session, else from the race below (its rounds' median), which "
        "times them fairly against each other."
    )


def race_section(labels: list[str], layouts: list[Layout], reports: list[Report], target: Target | None = None) -> None:
    """The race's controls, the race when started, and the last race's result while it raced these layouts (with the
    ratios the prediction expects on ``target``, the sidebar's, when one is chosen)."""
    st.subheader("Race")
    st.caption(
        "Times the layouts in alternation (A B A B …): each round's ratio compares runs made moments apart, so machine noise largely cancels."
    )
    simulated_devices_note()
    timeable = []
    for label, layout, report in zip(labels, layouts, reports):
        try:
            check_timeable(report)
            timeable.append((label, layout))
        except ExplorerError as error:
            st.warning(markdown_literal(f"{label} cannot race: {error}"))
    racing = [layout.key for _, layout in timeable]
    left, middle, right = st.columns([1, 1, 2], vertical_alignment="bottom")
    messages = st.container(key="race_messages")
    rounds = whole_number(left, "Rounds", "race_rounds", 1, 50, 5, messages)
    steps = whole_number(middle, "Steps per round", "race_steps", 1, 500, 10, messages)
    can_race = len(timeable) >= 2 and rounds is not None and steps is not None
    start = right.button(
        "Start race",
        type="primary",
        key="race_button",
        disabled=not can_race,
        help=None if can_race else "At least two of the layouts must be timeable here, and the boxes in range: see the messages",
    )
    if start and can_race:
        race_now([label for label, _ in timeable], [layout for _, layout in timeable], racing, int(rounds), int(steps))
    stored = st.session_state.get(RACE)
    if stored and stored[0] == racing:
        labels_raced, result, finished = stored[1:]
        if not finished:
            asked = st.session_state.get(RACE_ROUNDS)
            st.info(f"Stopped after {len(result.round_medians[0])} of {asked} rounds; the rounds finished are shown.")
        if result.round_medians and result.round_medians[0]:
            expected = predicted_steps([layout for _, layout in timeable], target) if target else None
            show_race(labels_raced, result, expected=expected, on=target.name if target else "")
    elif stored:
        st.caption("The last race was run on other layouts; start a new one to compare these.")
