"""The layout every page works on: the sidebar's draft, validated, or the last valid one."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from explorer.analysis import Report, analyze
from explorer.errors import ExplorerError
from explorer.layout import Layout, parse_layout
from explorer.targets import Target
from ui import share_panel, sidebar, state, target_view


@dataclass
class Current:
    layout: Layout
    report: Report
    valid: bool  # False: the sidebar holds an invalid draft and this is the last valid layout
    slots: sidebar.Slots
    target: Target | None = None  # the TPU slice chosen in the sidebar; None: this process's devices


def current_layout(page: str) -> Current:
    """Draw ``page``'s sidebar and validate what it holds; errors go next to the widget concerned."""
    draft, slots = sidebar.render(page)
    try:
        layout = parse_layout(draft)
        report = analyze(layout)
        st.session_state[state.LAST_VALID] = layout.to_dict()
        valid = True
    except ExplorerError as error:
        slots.for_field(error.field).error(str(error))
        st.warning(
            f"The layout in the sidebar is not valid ({error.field}); this page shows the last valid one. "
            "Your edits are kept: fix the field marked in red."
        )
        layout = parse_layout(st.session_state[state.LAST_VALID])
        report = analyze(layout)
        valid = False
    _flag_layout_problems(report, slots)
    share_panel.show_message("link")
    if valid:
        share_panel.sync_address(layout)
    with st.sidebar:
        target = target_view.choose()
        share_panel.render(layout)
    return Current(layout, report, valid, slots, target)


def _flag_layout_problems(report: Report, slots: sidebar.Slots) -> None:
    indivisible = [w for w in report.warnings if w.code == "indivisible"]
    if indivisible:
        slots.rules.error(f"{len(indivisible)} sharded dimension(s) do not divide evenly, e.g. {indivisible[0].message}")
    if report.mesh.abstract:
        slots.mesh.info(
            f"Planned mesh: {report.mesh.size:,} devices, more than this process has. Shapes, bytes and tiles come "
            "from an AbstractMesh with hypothetical device ids 0..N-1 in mesh order; it cannot be timed here."
        )
