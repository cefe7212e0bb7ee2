"""The layout every page works on: the sidebar's draft, validated, or the last valid one."""

from __future__ import annotations

import os
from dataclasses import dataclass

import streamlit as st

from explorer.hardware import devices
from explorer.analysis.analyzer import analyze
from explorer.analysis.report import Report
from explorer.analysis.findings import indivisible_error
from explorer.errors import ExplorerError, NeedsExplicitAxes, shown as shown_value
from explorer.layout import Layout, layout_errors, parse_layout, seed_layout
from explorer.formats import counted
from explorer.hardware.targets import Target
from explorer.text import markdown_literal
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
    with st.sidebar:
        target = target_view.choose()  # part of the layout: links and files carry it
    if target is not None:
        draft["target"] = target.name
    errors = layout_errors(draft)
    report = None
    if not errors:
        layout = parse_layout(draft)
        try:
            report = analyze(layout)
        except ExplorerError as error:  # the model refuses it: a factory's options, a model that cannot be traced
            errors = [error]
    if report is not None:
        st.session_state[state.LAST_VALID] = layout.to_dict()
        valid = True
    else:
        for error in errors:
            slots.for_field(error.field).error(describe(error))
            if isinstance(error, NeedsExplicitAxes):
                slots.for_field(error.field).button(
                    "Make the mesh's axes Explicit",
                    key="make_axes_explicit",
                    on_click=state.make_axes_explicit,
                    type="primary",
                    width="stretch",
                )
        fields = ", ".join(error.field for error in errors)
        st.warning(
            f"The layout in the sidebar has {counted(len(errors), 'problem')} ({fields}), each explained in the sidebar under "
            "its section. This page shows the last valid layout; your edits are kept."
        )
        if any(isinstance(error, NeedsExplicitAxes) for error in errors):  # the sidebar's button is far below the fold
            row = st.container(horizontal=True, vertical_alignment="center")
            row.button(
                "Make the mesh's axes Explicit",
                key="make_axes_explicit_main",
                on_click=state.make_axes_explicit,
                type="primary",
            )
            row.caption(
                "The model sets shardings in its values' types, so it needs a mesh with Explicit axes "
                "(the sidebar's Model section says more)."
            )
        refused = _explicit_refusal(draft, errors)
        if refused is not None:
            _show_explicit_refusal(refused)
        layout, report = _last_valid()
        valid = False
    _flag_layout_problems(report, slots)
    if state.edited_since_loaded(layout):
        slots.name.caption(
            f"Edited since {markdown_literal(repr(layout.name))} was loaded: rename it before saving or sharing it as a new layout."
        )
    share_panel.show_message("link")
    # The layout shown, which is what the Share section offers: the address bar, the readable link
    # and the file always agree (while the sidebar holds an invalid draft, that is the last valid layout).
    shared = state.as_shared(layout)
    share_panel.sync_address(shared)
    with st.sidebar:
        share_panel.render(shared)
    return Current(layout, report, valid, slots, target)


def _explicit_refusal(draft: dict, errors: list[ExplorerError]) -> ExplorerError | None:
    """The model's refusal of a mesh with Explicit axes among ``errors`` (a model that needs them is another case)."""
    if "explicit" not in (draft.get("mesh") or {}).get("axis_types", ()):
        return None
    return next((e for e in errors if e.field == "model" and not isinstance(e, NeedsExplicitAxes)), None)


def _show_explicit_refusal(error: ExplorerError) -> None:
    """The refusal in the main area, where a user looks: the reason and the fix on one line, JAX's own words under it,
    and the one-click fix of Auto axes (the sidebar's Model section says it too)."""
    reason, _, jax_words = str(error).partition(" (JAX: ")
    with st.container(key="explicit_refusal"):
        st.error(f"**Refused on Explicit axes.** {markdown_literal(reason)}" + ("" if reason.endswith(".") else "."))
        if jax_words:
            st.caption(f"JAX's own words: {markdown_literal(jax_words.removesuffix(')'))}")
        row = st.container(horizontal=True, vertical_alignment="center")
        row.button("Make the mesh's axes Auto", key="make_axes_auto_main", on_click=state.make_axes_auto)
        row.caption("On Auto axes XLA chooses the shardings the model leaves open; Flax Linen's constraints work there.")


def _last_valid() -> tuple[Layout, Report]:
    """The last layout that analyzed, or the seed layout when that one no longer does (a link loaded a model
    whose own code refuses it before anything analyzed)."""
    try:
        layout = parse_layout(st.session_state[state.LAST_VALID])
        return layout, analyze(layout)
    except ExplorerError:
        layout = seed_layout()
        st.session_state[state.LAST_VALID] = layout.to_dict()
        return layout, analyze(layout)


# Where each field is typed in the sidebar, and what it accepts.
_WHERE = (
    ("name", "Layout name", state.NAME, "1 to 120 characters"),
    ("mesh.shape", "Mesh › Shape", state.MESH_SHAPE, "positive whole numbers separated by ',' or 'x', e.g. 2, 4 or 16x16"),
    ("mesh.axes", "Mesh › Axis names", state.MESH_AXES, "one name per size, separated by ',', e.g. data, model"),
    ("mesh.axis_types", "Mesh › Explicit axes", None, "all of the mesh's axes or none, for a Flax NNX model"),
    ("mesh", "Mesh", None, ""),
    ("rules", "Rules", None, "a logical name and mesh axes of this mesh (none replicates)"),
    ("model.options", "Model › Options", None, ""),
    ("model", "Model", None, ""),
)


def describe(error: ExplorerError) -> str:
    """The error with where it was typed, what was typed there, and what that field accepts."""
    for prefix, where, key, allowed in _WHERE:
        if error.field.startswith(prefix):
            if prefix == "rules" and error.field.startswith("rules["):
                where = f"Rules › row {error.field[len('rules[') :].split(']')[0]}"
            typed = st.session_state.get(key) if key else None
            quoted = markdown_literal(shown_value(str(typed))) if typed else "nothing"
            text = f"**{where}**" + (f" (you typed {quoted})" if typed is not None else "")
            text += f": {markdown_literal(str(error))}" + ("" if str(error).endswith(".") else ".")
            return text + (f" Allowed: {allowed}." if allowed else "")
    return markdown_literal(str(error))


def simulated_devices_note() -> None:
    """On simulated CPU devices, say what timings there can and cannot tell."""
    info = devices.describe()
    if info["platform"] == "cpu" and info["count"] > 1:
        st.info(
            f"These {info['count']} devices are simulated on this machine's CPU and share its {os.cpu_count()} cores: "
            "step times and ratios here speak about the program XLA compiled (its collectives, the work each device "
            "does), not about how fast the layout would run on accelerators."
        )


def _flag_layout_problems(report: Report, slots: sidebar.Slots) -> None:
    indivisible = indivisible_error(report)
    if indivisible:
        slots.rules.error(markdown_literal(str(indivisible)))
    refused = [w for w in report.warnings if w.code in ("unknown-mesh-axis", "mesh-axis-twice")]
    if refused:
        slots.rules.error(markdown_literal(f"{len(refused)} array(s) have a sharding JAX refuses, e.g. {refused[0].message}"))
    if report.mesh.abstract:
        slots.mesh.info(
            f"Planned mesh: {report.mesh.size:,} devices, more than this process has. Shapes, bytes and tiles come "
            "from an AbstractMesh with hypothetical device ids 0..N-1 in mesh order; it cannot be timed here."
        )
