"""The main area of the Layout page: summary, warnings, the array table, the device grid and the trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from explorer.plots.grid import mesh_figure, sharding_grid
from explorer.plots.memory import memory_bars
from explorer.plots.stages import stage_bars
from explorer.analysis.stage_plan import stage_plan
from explorer.analysis.report import KIND_LABELS, ArrayInfo, Report
from explorer.analysis.report import ERROR_CODES, INFO_CODES
from explorer.rules import RESOLUTION_ORDERS
from explorer.formats import counted, human_bytes, short_path
from explorer.text import arrays_frame, markdown_literal
from explorer.tiles import MeshInfo, default_dims, grid_view, shard_counts
from ui import propagated_view, share_panel, tables

from ui.state import ACROSS_PAGES, SELECTED

WARNING_TITLES = {
    "indivisible": "Dimensions the mesh does not divide",
    "indivisible-padded": "Activations XLA pads (the mesh does not divide a dimension)",
    "rule-unused": "Rules that never apply",
    "name-unmatched": "Logical names no rule covers",
    "replicated-large": "Largest fully replicated arrays",
    "unknown-mesh-axis": "Mesh axes the mesh lacks (JAX refuses these)",
    "mesh-axis-twice": "A mesh axis used twice in one array (JAX refuses these)",
    "semantics-differ": "Where Flax Linen and NNX rule semantics disagree",
    "loop-without-length": "Activations in loops of unknown length",
    "activation-names-unknown": "Activations shown by their mesh axes (their logical names unknown)",
    "activations-unresolved": "Activations not traced under this layout",
}


def render(report: Report, compiled_peak: tuple[str, int] | None = None, edited: bool = False) -> None:
    """``compiled_peak``: (which peak it is, bytes) of XLA's peak for this layout when a compiled program exists;
    ``edited``: the layout differs from the one loaded under its name (the header says so)."""
    _summary(report, compiled_peak, edited)
    _stages(report)
    _warnings(report)
    info = _array_table(report)
    if info is not None:
        _selected_array(report, info)
    if report.typed:
        _values_view(report)
    else:
        propagated_view.render(report)


def _values_view(report: Report) -> None:
    """Explicit axes: every value of the forward pass with the sharding in its type, searchable, grouped by place."""
    from explorer.analysis.values import grouped, matching, spec_text

    st.subheader("Values and their types")
    st.caption(
        f"On this mesh's Explicit axes every value's sharding is part of its type (jax.typeof prints f32[8@data,64@model]). "
        f"All {len(report.values):,} values of the forward pass, in program order, where the model's code computed them. "
        "'communication': what the types imply. The op, the runs per step, 'set by model' (a reshard, sharding_constraint "
        "or out_sharding= wrote it) and the spec: the table's Show/hide columns menu."
    )
    # a wrapping row: the toggle keeps its whole label at any width (a quarter column cut it to "Comm…")
    row = st.container(horizontal=True, vertical_alignment="bottom")
    query = row.text_input("Search values", key="values_search", placeholder="e.g. attention reshard, 'model', dot_general")
    only = row.toggle("Communication only", key="values_communication_only")
    chosen = matching(report.values, query, communication_only=only)
    groups = grouped(chosen)
    communicating = sum(group.communicating for group in groups)
    st.caption(f"{len(chosen):,} value(s) in {len(groups):,} place(s); {communicating:,} imply communication.")
    if not chosen:
        return
    # The type next to its place, so both show in a narrow main area; the spec, which restates the type, last.
    frame = pd.DataFrame(
        {
            "where": value.where,
            "type": value.type_text,
            "op": value.op,
            "set by model": "yes" if value.sets_sharding else "",
            "runs/step": value.runs,
            "communication": value.communication,
            "spec": spec_text(value),
        }
        for value in chosen
    )
    # Where, the type and what it implies in view at 1024 px; op, runs, set-by-model and the spec (which restates
    # the type) in the table's Show/hide columns menu.
    with st.container(key="values_table"):
        # rows of three lines: a deep module path's file:line and a reshard's sentence wrap in their columns, not cut
        tables.fitted(
            frame,
            {"where": 210, "type": 140, "communication": 250},
            {"set by model": "set"},
            row_height=tables.WRAPPED_ROW_PX,
            height=tables.wrapped_height(len(frame), most=700),  # ten rows in view, as many as before they wrapped
        )


def _summary(report: Report, compiled_peak: tuple[str, int] | None = None, edited: bool = False) -> None:
    mesh, totals = report.mesh, report.totals
    where = "planned mesh: hypothetical device ids, nothing runs" if mesh.abstract else "real devices of this process"
    st.markdown(
        f"**{markdown_literal(report.layout.name)}**{' (edited)' if edited else ''} · mesh {' × '.join(f'{a}={n}' for a, n in zip(mesh.axes, mesh.shape))} · "
        f"{mesh.size:,} devices ({where}) · {markdown_literal(report.layout.model.name)} "
        f"(Flax {'NNX' if report.framework == 'nnx' else 'Linen'}): {totals.param_count:,} parameters "
        f"({human_bytes(totals.global_param_bytes)} unsharded)"
    )
    st.caption("Bytes each device holds")
    # A wrapping row of content-sized metrics: whole numbers at any page width, never "298.1 ...".
    row = st.container(horizontal=True, key="memory_metrics")
    if compiled_peak:
        row.metric(
            "XLA peak / device",
            human_bytes(compiled_peak[1]),
            width="content",
            border=True,
            help=compiled_peak[0].strip(),
        )
    row.metric(
        "State / device — exact",
        human_bytes(totals.state_bytes),
        width="content",
        border=True,
        help="Parameters, optimizer state and inputs: what the train step's arguments hold. Not a peak: "
        "XLA adds gradients, Adam's update and activations kept for the backward pass.",
    )
    for kind, value in totals.by_kind().items():
        row.metric(f"{KIND_LABELS[kind].capitalize()} / device", human_bytes(value), width="content", border=True)
    st.caption(
        "State (parameters, optimizer state, inputs) is exact. Declared activations are listed, not added to it: "
        "what XLA keeps alive at once depends on the compiled program"
        + (" — its peak is shown first." if compiled_peak else "; compile for a target (sidebar) or time the step for XLA's peak.")
    )
    with st.expander("Memory per device", expanded=mesh.size <= 64):
        st.plotly_chart(memory_bars(mesh.ids_array().reshape(-1).tolist(), totals), key="memory_bars")
        st.caption(
            "Every device holds the same amount under NamedSharding (uneven dimensions are padded). "
            "Declared activations count every sharding constraint of the forward pass, each as many times as it "
            "runs per step (a scanned body times its length), drawn beside the state, not on top; XLA's own "
            "temporaries are not included."
        )


def _stages(report: Report) -> None:
    """A pipelined transformer: which blocks each stage runs on which devices, its weights per device, the bubble."""
    plan = stage_plan(report.layout.model.options, report) if report.layout.model.name == "transformer" else None
    if plan is None:
        return
    title = f"Pipeline: {counted(plan.stages, 'stage')} × {counted(plan.microbatches, 'microbatch')}"
    if plan.repeats > 1:  # a circular pipeline: each stage holds that many groups of blocks
        title += f" × {counted(plan.repeats, 'repeat')}"
    with st.expander(title, expanded=True):
        st.plotly_chart(stage_bars(plan), key="stage_bars")
        st.caption(
            f"Bubble — formula, for one pass: (stages − 1) / (microbatches × repeats + stages − 1) = {plan.bubble:.1%}: the loop "
            f"runs {plan.iterations} iterations and each stage works in {plan.microbatches * plan.repeats} of them. Devices are where "
            "JAX places each stage's stacked weights"
            + (
                "."
                if plan.placed
                else "; no rule shards 'stage', so every device holds every stage (add a rule such as stage → a mesh axis)."
            )
        )


def _warnings(report: Report) -> None:
    findings = [w for w in report.warnings if w.level != "info"]
    notes = [w for w in report.warnings if w.level == "info"]
    if not findings:
        st.success("No warnings: every rule applies, every logical name is covered, every sharded dimension divides evenly.")
    if notes:
        with st.expander(f"Notes ({len(notes)})", expanded=False):
            for note in notes:
                st.info(f"**{WARNING_TITLES.get(note.code, note.code)}**\n\n{markdown_literal(note.message)}")
    if not findings:
        return
    grouped: dict[str, list] = {}
    for warning in findings:
        grouped.setdefault(warning.code, []).append(warning)
    with st.container(key="warnings"), st.expander(f"Warnings ({len(findings)})", expanded=True):
        for code, warnings in grouped.items():
            show = st.error if code in ERROR_CODES else st.info if code in INFO_CODES else st.warning
            shown = warnings[:5]
            more = f"\n\n…and {len(warnings) - 5} more" if len(warnings) > 5 else ""
            show(f"**{WARNING_TITLES.get(code, code)}**\n\n" + "\n\n".join(f"- {markdown_literal(w.message)}" for w in shown) + more)
            for warning in (w for w in shown if w.items):  # one finding for many: each of them on demand
                with st.popover(f"Each of the {len(warning.items)}"):  # an expander may not hold another
                    st.caption("\n\n".join(markdown_literal(item) for item in warning.items))


# What the layout decides, the path shortened to its leaf (the whole path is the selected array's title below);
# what the model fixes (kind, shape, dtype, names) and the whole path are in the table's Show/hide columns menu.
ARRAY_COLUMNS = {"array": 270, "spec": 140, "shard shape": 100, "bytes/device": 90}  # widths in pixels
KINDS = ("param", "opt_state", "input", "activation")


def _array_table(report: Report) -> ArrayInfo | None:
    st.subheader("Arrays")
    frame = arrays_frame(report)
    frame.insert(0, "array", frame["path"].map(short_path))
    # bytes in the units a person reads (issue 55: "721420288"); the exact count one click away, for sorting by size
    frame["bytes (exact)"] = frame["bytes/device"]
    frame["bytes/device"] = frame["bytes/device"].map(human_bytes)
    query = st.text_input("Search paths, names or specs", key="array_search", placeholder="e.g. kernel, hidden, 'model'")
    # Pills keep their whole labels at any width (a multiselect's chips read "activa…" at 1024 px).
    st.session_state.setdefault("array_kinds", ["param", "input", "activation"])
    kinds = st.pills("Kinds", KINDS, selection_mode="multi", key="array_kinds") or []
    shown = frame[frame["kind"].isin(kinds)]
    if query:
        needle = query.lower()
        shown = shown[shown.apply(lambda row: needle in " ".join(str(v) for v in row.values).lower(), axis=1)]
    shown = shown.reset_index(drop=True)
    event = tables.fitted(
        shown,
        ARRAY_COLUMNS,
        config={
            "array": {"help": "The path, its middle elided; the whole path: Show/hide columns"},
            "bytes/device": {"help": "Per device; the exact count, to sort by size: Show/hide columns, bytes (exact)"},
            "bytes (exact)": st.column_config.NumberColumn(format="%d"),
        },
        height=320,
        on_select="rerun",
        # A click on any cell picks its row (with "single-row" alone only the row's checkbox did, and a click drew nothing).
        selection_mode=["single-row", "single-cell"],
        key="arrays_table",
    )
    st.caption(
        f"{len(shown)} of {len(frame)} arrays · click a row (or pick below) to draw it · click a header to sort · "
        "kind, shape, dtype, logical axes, replication and the whole path: the table's Show/hide columns menu"
    )
    paths = frame["path"].tolist()
    rows = (event.selection.rows or [row for row, _ in event.selection.cells]) if event is not None else []
    if rows and rows[0] < len(shown):
        picked = shown.iloc[rows[0]]["path"]
        if picked != st.session_state.get("_last_table_pick"):
            st.session_state["_last_table_pick"] = picked
            st.session_state[SELECTED] = picked
    if st.session_state.get(SELECTED) not in paths:
        missing = st.session_state.get(SELECTED)
        st.session_state[SELECTED] = _default_selection(report)
        if missing is not None and st.session_state.pop(share_panel.LINK_ARRAY, None) == missing:
            with st.container(key="array_missing"):
                st.warning(
                    f"The link names the array {markdown_literal(repr(missing))}, which this layout does not have; "
                    f"showing {markdown_literal(st.session_state[SELECTED])} instead."
                )
    st.session_state.pop(share_panel.LINK_ARRAY, None)
    path = st.selectbox("Array", paths, key=SELECTED, persist_state=ACROSS_PAGES)
    share_panel.sync_selection(path)
    return report.array(path)


def _default_selection(report: Report) -> str:
    params = [a for a in report.arrays if a.kind == "param" and len(a.shape) >= 2]
    return (params or list(report.arrays))[0].path


def _dim_labels(info: ArrayInfo, mesh: MeshInfo) -> list[str]:
    """``dim 0 'embed' · 256 → fsdp``: a grid axis' title, the mesh axes that shard it (MaxText's rules name 4 where
    3 are of size 1: the title ran off the picture at 1024 px), the others counted."""
    sizes = dict(zip(mesh.axes, mesh.shape))
    labels = []
    for dim, size in enumerate(info.shape):
        name = info.logical_axes[dim] if info.logical_axes else None
        axes = info.trace[dim].mesh_axes if dim < len(info.trace) else ()
        sharding = [axis for axis in axes if sizes.get(axis, 2) > 1]
        ones = len(axes) - len(sharding)
        target = (" × ".join(sharding) or "replicated") + (f" (+{ones} of size 1)" if ones else "") if axes else "replicated"
        label = f" '{name}'" if isinstance(name, str) else " (fixed)" if name else ""
        labels.append(f"dim {dim}{label} · {size} → {target}")
    return labels


def _selected_array(report: Report, info: ArrayInfo) -> None:
    labels = _dim_labels(info, report.mesh)
    st.container(key="selected_summary").markdown(
        f"**{markdown_literal(info.path)}** · {info.kind} · shape {tuple(info.shape)} {info.dtype} · spec `{info.spec_text()}` · "
        f"shard {tuple(info.shard_shape)} = {human_bytes(info.bytes_per_device)} per device · "
        f"each block on {info.replication} device(s)"
    )
    if info.note:
        st.caption(markdown_literal(info.note))
    row_dim, col_dim, fixed = _choose_dims(info, labels, report.mesh)
    view = grid_view(info.shape, info.spec, report.mesh, row_dim, col_dim, fixed)
    # One above the other, each the page's width: side by side, a 16-column grid and mesh were unreadable at 1024 px.
    event = st.plotly_chart(
        sharding_grid(view, report.mesh, np.dtype(info.dtype).itemsize, labels),
        key="sharding_grid",
        on_select="rerun",
        selection_mode=("points", "box"),
    )
    st.caption("Each block shows the devices holding it; replicas are stripes, one colour per device. Click or box-select blocks.")
    highlight = _selected_devices(event, view)
    st.plotly_chart(mesh_figure(report.mesh, highlight), key="mesh_figure")
    st.caption(
        "The mesh; the devices holding the selected blocks keep their colour."
        if highlight
        else "The mesh: device ids at their mesh coordinates."
    )
    _trace_table(report, info)


def _choose_dims(info: ArrayInfo, labels: list[str], mesh: MeshInfo) -> tuple[int | None, int | None, dict[int, int]]:
    """Which two dimensions to draw (``default_dims`` first) and the block of every other one."""
    first, second = default_dims(info.shape, info.spec, mesh)
    ndim = len(info.shape)
    if ndim <= 2:
        return first, second, {}
    options = list(range(ndim))
    counts = shard_counts(info.spec, mesh)
    left, right = st.columns(2)
    # Keyed by the spec too: after a rule edit the defaults follow the newly sharded dimensions.
    ident = f"{info.path}::{info.spec_text()}"
    row_dim = left.selectbox("Rows", options, index=first, format_func=lambda d: labels[d], key=f"rows::{ident}")
    col_choices = [d for d in options if d != row_dim]
    col_default = col_choices.index(second) if second in col_choices else len(col_choices) - 1
    col_dim = right.selectbox("Columns", col_choices, index=col_default, format_func=lambda d: labels[d], key=f"cols::{ident}")
    fixed = {}
    for dim in options:
        if dim in (row_dim, col_dim):
            continue
        if counts[dim] > 1:
            fixed[dim] = st.slider(f"Block of {labels[dim]}", 0, counts[dim] - 1, 0, key=f"block::{ident}::{dim}")
        else:
            fixed[dim] = 0
    return row_dim, col_dim, fixed


def _selected_devices(event, view) -> set[int]:
    points = event.selection.points if event is not None and event.selection else []
    devices: set[int] = set()
    for point in points:
        data = point.get("customdata")
        if isinstance(data, (list, tuple)) and len(data) == 2:
            devices.update(view.cells[int(data[0])][int(data[1])].devices)
    return devices


def _trace_table(report: Report, info: ArrayInfo) -> None:
    rules = report.layout.rules_for_flax()
    st.markdown("**Why this spec** — the rule trace, dimension by dimension")
    if report.typed:
        how = {  # the semantics are the call's (Linen's or NNX's), not the model's: say the ones this array's call has
            "nnx": "NNX applies the rules to Variable metadata only (nnx.logical_axis_rules)",
            "linen": "Linen's calls (nn.with_logical_partitioning, nn.with_logical_constraint) map its logical names by the rules",
        }.get(info.semantics, "no rule decides it: the code wrote it into the type")
        st.caption(
            f"Explicit axes: the spec shown is the one in this value's type. {how}; a call's out_sharding= takes mesh axes, "
            "not logical names" + (f". Here: {markdown_literal(info.note)}." if info.note else ".")
        )
        if info.semantics == "explicit":
            return
    caller = "" if info.semantics == report.framework else " (the call that declared it decides, not the model)"
    st.caption(f"Rule semantics of this array: {RESOLUTION_ORDERS.get(info.semantics, '')}{caller}.")
    rows = []
    for dim in info.trace:
        decided = dim.decided_by(rules) or "—"
        rows.append(
            {
                "dim": dim.dim,
                "logical name": dim.logical or "—",
                "mesh axes": " × ".join(dim.mesh_axes) or "replicated",
                "decided by": decided,
                "skipped rules": "; ".join(
                    f"NNX: rule {dim.rule} overrides rule {s.rule}" if s.reason == "overridden" else f"rule {s.rule}: {s.detail}"
                    for s in dim.skipped
                )
                or "—",
                "status": dim.status,
            }
        )
    if rows:
        # Four columns fit the page at 1024 px, in rows that wrap (MaxText's rules name four mesh axes: "rule 51 (mlp,
        # (fsdp_transpose, tensor, tensor_sequence, autoregressive))" was cut); the skipped rules follow as a list.
        frame = pd.DataFrame(rows)[["dim", "logical name", "mesh axes", "decided by"]]
        long = any(len(row["decided by"]) > 40 or len(row["mesh axes"]) > 20 for row in rows)
        with st.container(key="trace_table"):
            tables.fitted(
                frame,
                {"dim": 40, "logical name": 105, "mesh axes": 150, "decided by": 300},  # "logical name" whole at 1024 px
                **(dict(row_height=tables.WRAPPED_ROW_PX, height=tables.wrapped_height(len(frame))) if long else {}),
            )
        skipped = [
            f"- dim {row['dim']} ({row['status']}): {markdown_literal(row['skipped rules'])}" for row in rows if row["skipped rules"] != "—"
        ]
        if skipped:
            st.markdown("Rules that named a dimension but did not decide it:\n" + "\n".join(skipped))
    else:
        st.caption("A scalar: nothing to shard, every device holds it.")
