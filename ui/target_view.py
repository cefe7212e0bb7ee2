"""The target a layout is planned for: the sidebar's choice, the compile action, and what XLA says.

The compile itself runs in a child process (``explorer.compile.target_compile``), one at a
time per server through the turnstile timings use, and can be stopped. Results are
kept on disk by (layout, target, versions), so returning to a layout is instant.
"""

from __future__ import annotations

import os
import time

import pandas as pd
import streamlit as st

from explorer.plots.memory import target_memory_figure
from explorer.plots.roofline import compare_roofline_figure, roofline_figure
from explorer.analysis.analyzer import analyze
from explorer.analysis.report import Report
from explorer.analysis.findings import indivisible_error
from explorer.compile.compile_result import TargetCompile
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.models import MAXTEXT, STEP
from explorer.predict.roofline import Estimate
from explorer.compile.compile_cache import cached
from explorer.predict.step_model import SCOPE
from explorer.target_text import fp8_note
from explorer.hardware.targets import Target, check_mesh_fits, parse_target, slice_split, valid_names
from explorer.formats import counted, human_bytes, human_flops, human_seconds, plain_number, share
from explorer.text import markdown_literal, memory_relation
from explorer.target_text import compiled_as, judged_peak_note, mfu_ceiling_words, prediction_gap
from explorer.compile.compile_result import memory_room
from explorer.compile.xla_results import memory_limit
from explorer.compile.compile_pool import POOL, queue_text
from explorer.hardware.targets import TARGET_FORMS
from explorer.analysis.stage_plan import stage_mesh_axes
from explorer.compile.compile_cache import cache_folder
from ui import memory_view, state, tables
from ui.communication_view import top_lines
from ui.turnstile import session_id

CHOICE = state.TARGET_CHOICE
HERE = state.TARGET_HERE
STOPPED = "target_stopped"
AGAIN = "target_compile_again"  # the (layout, target) whose cached result the user asked to compile again
# Every column in view at 1024 px, "time ≥" included (widths in pixels).
COLLECTIVE_WIDTHS = {"op": 120, "mesh axes": 110, "count": 60, "bytes": 90, "group": 60, "rides": 75, "time ≥": 95}
# The Compare page's decision on a target (does each fit, how fast at best) in view; headroom and the collectives' time
# in the table's Show/hide columns menu.
SUMMARY_COLUMNS = {"layout": 120, "fits": 80, "XLA peak / device": 100, "predicted step": 100, "step ≥ (lower bound)": 100, "bound": 80}


def choose() -> Target | None:
    """The sidebar's Target section: None means this process's devices (as before).

    The box lists examples of every form and takes any name typed into it (Enter), as the docs write them: ``v5e:4x4``,
    ``h100:3x8``, ``2xv5litepod-4``, ``v5e-256``. A name that is no target gets one line under the box, naming it.
    """
    st.subheader("Target")
    options = [HERE] + valid_names()
    typed = st.session_state.get(CHOICE)
    if typed is None:
        st.session_state[CHOICE] = HERE
    elif typed not in options:
        options.append(typed)  # a name typed or opened from a link: listed, so that the box shows it
    choice = st.selectbox(
        "Plan for",
        options,
        key=CHOICE,
        persist_state=state.ACROSS_PAGES,
        accept_new_options=True,
        placeholder="Type a slice or GPU cluster, then Enter",
        help="A TPU slice or an NVIDIA GPU cluster to compile the train step for, without owning it (libtpu's or JAX's CUDA "
        "plugin's compiler runs on this machine). Pick one or type any name, then Enter: a Cloud TPU type (v5litepod-N, v5e-N "
        "and v6e-N count chips, v5p-N and v4-N TensorCores, 2 per chip), a libtpu topology (v5e:4x4, v5p:4x4x4), N slices of "
        "one (2xv5p-16) or a GPU cluster a100, h100, h200 or b200:HOSTSxGPUS (h100:8x8 is 8 hosts of 8 H100s).",
    )
    if choice in (None, HERE):
        return None
    try:
        target = parse_target(choice)
    except ExplorerError as error:
        with st.container(key="target_error"):
            st.error(markdown_literal(str(error)))
            with st.expander("Every form and listed name"):
                st.caption(markdown_literal(f"A target is {TARGET_FORMS}. Listed: {', '.join(valid_names())}."))
        return None
    if target.is_gpu:
        gpu = target.chip
        st.caption(
            f"{target.topology}: {target.hosts} host{'s' if target.hosts > 1 else ''} × {target.gpus_per_host} {gpu.device_kind}, "
            f"{human_bytes(gpu.hbm_bytes)} and {gpu.peak_flops / 1e12:,.0f} bf16 TFLOP/s per GPU; NVLink {gpu.nvlink_bandwidth / 1e9:,.0f} GB/s "
            f"inside a host, the network {gpu.network_bandwidth / 1e9:,.0f} GB/s per GPU between hosts"
        )
        return target
    st.caption(
        f"{target.topology}: {target.chips} × {target.chip.device_kind}, {human_bytes(target.chip.hbm_bytes)} HBM, "
        f"{target.chip.peak_flops / 1e12:,.0f} bf16 TFLOP/s per chip"
        + (
            f"; {target.num_slices} slices joined by the DCN, {plain_number(target.dcn.bandwidth / 1e9)} GB/s per chip"
            if target.multislice
            else ""
        )
    )
    return target


def device_word(target: Target) -> str:
    """What one device of ``target`` is called on the page: a GPU, or a TPU chip."""
    return "GPU" if target.is_gpu else "chip"


def render(layout: Layout, target: Target | None, report: Report) -> TargetCompile | None:
    """The compile section of a page for ``target``; returns the result when one exists.

    ``report`` is ``layout``'s analysis: a layout JAX refuses is not compiled (the Timing
    page's message, the button disabled), and before any compile the state per chip,
    which is exact, is set against the chip's HBM.
    """
    if target is None:
        return None
    st.subheader(f"Planned for {markdown_literal(target.name)}")
    try:
        check_mesh_fits(target, layout_size(layout))
        slice_split(target, tuple(layout.mesh.shape), tuple(layout.mesh.axes), layout.mesh.dcn)  # several slices: which axes span them
    except ExplorerError as error:
        st.error(markdown_literal(str(error)))
        return None
    result = cached(layout, target)
    again = st.session_state.pop(AGAIN, None) == _wall_key(layout, target)
    if result is not None and not again and _wall_key(layout, target) not in st.session_state.get(WALL, {}):
        _from_the_cache(layout, target, result)
    if result is None or again:
        before = st.empty()  # what is certain before compiling; XLA's verdict replaces it once the compile is done
        with before.container():
            _state_verdict(report, target)
        refusal = refused(report)
        if refusal is not None:
            with st.container(key="target_refused"):
                st.error(markdown_literal(str(refusal)))
        result = _compile_action(layout, target, disabled=refusal is not None, now=again)
        if result is not None:
            before.empty()
    if result is not None:
        show(result, wall_s=st.session_state.get(WALL, {}).get(_wall_key(layout, target)), layout=layout)
        pipeline_sends(result, stage_mesh_axes(layout))
    return result


def bubble_text(result: TargetCompile) -> str:
    """The pipeline's bubble in the predicted step, labelled as the estimate it is, beside MaxText's formula."""
    b = result.bubble
    return (
        f"Pipeline bubble (estimate): {human_seconds(b.bubble_s)} of the predicted {human_seconds(b.step_s)} step, "
        f"{b.share:.1%}: {b.loops} pipeline loop(s) of {b.iterations} iterations as the program runs them, "
        f"{b.stages - 1} of each stage's {b.iterations} idle (formula for one pass: (stages − 1) / iterations = "
        f"{(b.stages - 1) / b.iterations:.1%} of the loops)."
    )


def pipeline_sends(result: TargetCompile, stage_axes: tuple[str, ...]) -> None:
    """A pipelined layout's sends between stages (``TargetCompile.pipeline_sends``): count, bytes, link, source line."""
    if result.bubble is not None:
        st.markdown(markdown_literal(bubble_text(result)))
    sends = result.pipeline_sends(stage_axes)
    if not sends:
        return
    st.markdown(
        f"**Pipeline sends** (collective-permutes over {markdown_literal(' × '.join(stage_axes))}, per {device_word(result.target)} per step)"
    )
    frame = pd.DataFrame(
        [
            {
                "count": c.count,
                "bytes": human_bytes(c.bytes),
                "link": c.link.upper() if c.link in ("ici", "dcn") else "NVLink" if c.link == "nvlink" else c.link,
                # file:line as the Communication view writes it (its table has the whole path): "/work/…/models/
                # pipeline.py:123, /work/…" was cut at 1024 px
                "source": ", ".join(f"{os.path.basename(s.file)}:{s.line}" for s in c.sources[:2] if s.file) or "—",
                "time ≥": human_seconds(c.seconds),
            }
            for c in sends
        ]
    )
    with st.container(key="target_pipeline_sends"):
        tables.fitted(
            frame,
            {"count": 60, "bytes": 90, "link": 60, "source": 260, "time ≥": 95},
            row_height=tables.WRAPPED_ROW_PX,  # two sources wrap in their column, not cut
            height=tables.wrapped_height(len(frame)),
        )
    st.caption("Each runs once per iteration of the pipeline's loop (its trip count is in the count); time ≥ is a lower bound.")


PREDICTION_CAPTION = (
    f"Predicted step: the step model's prediction on the target, kernel by kernel from XLA's program ({SCOPE}). "
    "Step ≥: the roofline, a lower bound."
)
WALL = "target_wall_s"  # (layout, target) -> seconds from the click to the result, for compiles this session ran


def _wall_key(layout: Layout, target: Target) -> str:
    return f"{target.topology}|{layout.key}"


def refused(report: Report) -> ExplorerError | None:
    """Why JAX would refuse to compile this layout (the Timing page's first gate, without its host limits), or None."""
    found = [w for w in report.warnings if w.code in ("unknown-mesh-axis", "mesh-axis-twice")]
    if found:
        return ExplorerError("rules", [list(r) for r in report.layout.rules_for_flax()], f"give a sharding JAX refuses: {found[0].message}")
    return indivisible_error(report)


def _state_verdict(report: Report, target: Target) -> None:
    """What is certain before compiling: the exact state per device against the memory the compile's verdict uses (a chip's
    HBM; on a GPU, JAX's share of it, the whole memory said beside it)."""
    limit = memory_limit(target)
    state_bytes, room, per = report.totals.state_bytes, memory_room(target, limit), device_word(target)
    with st.container(key="target_state_verdict"):
        if state_bytes > limit.bytes:
            st.error(
                f"Does not fit: the state alone (parameters, optimizer state, inputs) is {human_bytes(state_bytes)} per {per}, "
                f"{human_bytes(state_bytes - limit.bytes)} more than {room}. This is exact, before any compile."
            )
        else:
            st.info(
                f"The state alone (parameters, optimizer state, inputs; exact) takes {human_bytes(state_bytes)} of {room} "
                f"({share(state_bytes / limit.bytes)}). XLA's peak adds gradients, the optimizer's update and activations: "
                "compile for it."
            )


def layout_size(layout: Layout) -> int:
    size = 1
    for s in layout.mesh.shape:
        size *= s
    return size


def _from_the_cache(layout: Layout, target: Target, result: TargetCompile) -> None:
    """A result this session did not compile (an earlier session's, another server's sharing the cache folder): when and
    where it was compiled, and a button to compile it again."""
    when = f"compiled on {result.compiled_when}" if result.compiled_when else "compiled at a time it does not record"
    with st.container(key="target_cached", horizontal=True, vertical_alignment="center"):
        st.caption(
            f"Read from the compile cache ({markdown_literal(cache_folder() or '')}): {when}, for this layout, target and "
            "library versions. Not compiled by you in this session."
        )
        st.button(
            "Compile again",
            key="target_compile_again_button",
            on_click=lambda: st.session_state.__setitem__(AGAIN, _wall_key(layout, target)),
            help="Compiles the train step for this target anew and replaces the cached result",
        )


def _compile_action(layout: Layout, target: Target, disabled: bool = False, now: bool = False) -> TargetCompile | None:
    """The compile button, and the compile when it is clicked (``now``: at once, replacing a cached result)."""
    start = st.button(f"Compile for {target.name}", type="primary", key="target_compile_button", disabled=disabled)
    where, per = ("GPU cluster", "GPU") if target.is_gpu else ("slice", "chip")
    program = {
        MAXTEXT: "MaxText's own train step (the program its train_compile.py compiles for these keys)",
        STEP: "your own step (its factory, given this mesh on the target's devices)",
    }.get(layout.model.name, "the Timing page's train step (state donated, as training loops do)")
    st.caption(
        f"Compiles {program} for this {where} in a child process, under this server's LIBTPU_INIT_ARGS and XLA_FLAGS: "
        f"XLA's memory per {per}, the collectives and a roofline. Small models take seconds, 7B-parameter ones minutes."
    )
    if st.session_state.pop(STOPPED, None):
        st.info("The last compile was stopped.")
    if not (start or now):
        return None
    stop_slot = st.empty()
    stop_slot.button("Stop", key="target_stop_button", help="Kills the compile process")
    # The stage and the time so far are in the status label itself: readable without opening the box.
    status = st.status("Waiting for a turn…", expanded=True)
    line = status.empty()
    st.session_state[STOPPED] = True  # cleared below unless Stop interrupts this run
    clicked = time.monotonic()

    def on_stage(stage: str, elapsed: float) -> None:
        label = f"Compiling for {target.name}: {stage} · {time.monotonic() - clicked:.0f} s elapsed"
        status.update(label=label, state="running")
        line.write(f"**{stage}** · {elapsed:.1f} s elapsed")

    def on_wait(ahead: int, running: int) -> None:
        status.update(label=f"Waiting for a turn: {queue_text(ahead, running)}")

    (outcome,) = POOL.compile_many(
        session_id(),
        [(layout, target)],
        on_wait=on_wait,
        on_progress=lambda jobs: jobs and on_stage(jobs[0].stage, time.monotonic() - jobs[0].started),
        fresh=now,
    )
    if outcome.stopped:
        status.update(label="Stopped", state="error")
        return None
    if outcome.error is not None:
        st.session_state.pop(STOPPED, None)
        stop_slot.empty()
        status.update(label=f"Failed after {time.monotonic() - clicked:.1f} s", state="error", expanded=False)
        with st.container(key="target_compile_error"):
            st.error(markdown_literal(str(outcome.error)))
        return None
    result = outcome.result
    st.session_state.pop(STOPPED, None)
    wall = time.monotonic() - clicked
    st.session_state.setdefault(WALL, {})[_wall_key(layout, target)] = wall
    status.update(label=f"Compiled for {target.name} in {wall:.1f} s (everything, from the click)", state="complete", expanded=False)
    stop_slot.empty()
    return result


def verdict(result: TargetCompile) -> str:
    """The headline: XLA's peak against the figure the verdict used (a chip's HBM; on a GPU, JAX's share of it)."""
    peak, room = human_bytes(result.judged_peak_bytes), memory_room(result.target, result.memory_limit)
    if result.fits:
        return f"Fits: XLA's peak is {peak} of {room}, {human_bytes(result.headroom_bytes)} to spare."
    return f"Does not fit: XLA's peak is {peak}, {human_bytes(-result.headroom_bytes)} more than {room}."


def step_verdict(estimate: Estimate) -> str:
    """The step's headline, as the CLI's ``compile`` prints it: the step model's prediction first, labelled as one, the
    roofline's lower bound beside it (plain text: the caller escapes it)."""
    bound = f"Step ≥ {human_seconds(estimate.step_s)}, {estimate.bound}-bound (the roofline, a lower bound)"
    if not estimate.predicted_s:
        return bound + "."
    return f"Predicted step: {human_seconds(estimate.predicted_s)} (a prediction: the step model, kernel by kernel; {SCOPE}). {bound}."


def show(result: TargetCompile, wall_s: float | None = None, layout: Layout | None = None) -> None:
    """XLA's verdict, the memory (and, with ``layout``, what fills it at the peak and what to change), the roofline and
    the collectives."""
    memory, target, estimate = result.memory, result.target, result.estimate
    per = device_word(target)
    with st.container(key="target_verdict"):
        (st.success if result.fits else st.error)(verdict(result))
        if peak_note := judged_peak_note(result):
            st.caption(markdown_literal(peak_note))
        if estimate is not None:
            st.markdown(markdown_literal(step_verdict(estimate)))
            if gap := prediction_gap(estimate):  # why the prediction is far above the bound, or equal to it
                st.caption(markdown_literal(gap[0].upper() + gap[1:] + "."))
            if fp8 := fp8_note(estimate.prediction_parts, target.chip):
                st.caption(markdown_literal(fp8[0].upper() + fp8[1:] + "."))
        st.caption(markdown_literal(compiled_as(result)[0].upper() + compiled_as(result)[1:] + "."))  # the program and its flags
    with st.container(key="target_placement"):
        st.caption(markdown_literal(placement_text(result)))
    # One above the other: side by side at 1024 px the bar labels and the table's last column were cut.
    memory_column, roofline_column = st.container(), st.container()
    with memory_column:
        st.markdown(
            f"**Memory per {per}** (XLA's memory_analysis, as it gives them"
            + (", and the peak in HBM its memory-usage report gives)" if peak_note else ")")
        )
        limit = result.memory_limit
        usable = (
            (limit.bytes, f"JAX's {limit.fraction:.0%}: {human_bytes(limit.bytes)}")
            if target.is_gpu
            else (limit.bytes, f"XLA lets a program use {human_bytes(limit.bytes)}")
        )
        st.plotly_chart(
            target_memory_figure(memory, target.chip.device_hbm_bytes, per, usable, result.judged_peak_bytes), key="target_memory"
        )
        st.caption(memory_relation(memory.to_json(), "memory_analysis()'s peak" if peak_note else "XLA's peak"))
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "": "memory_analysis() peak" if k == "peak_bytes" and peak_note else k.removesuffix("_bytes").replace("_", " "),
                        "size": human_bytes(v),
                        "bytes (exact)": v,
                    }
                    for k, v in memory.figures().items()
                ]
            ),
            hide_index=True,
            width="stretch",
            key="target_memory_table",
        )
        padded = result.padding.padded if result.padding else ()
        if padded:
            st.caption(
                f"Arguments include {sum(p.padded_bytes - p.bytes for p in padded):,} B of TPU tile padding "
                f"({len(padded)} small array(s), e.g. a scalar occupies 512 B)."
            )
    if result.oom:
        st.caption(
            "XLA refused this program for HBM (" + result.oom.message[:200] + "); the figures are read from its "
            "buffer assignment, and flops count the optimized program's dots and convolutions only."
        )
    if layout is not None:
        memory_view.target_section(result, layout, per)
    if estimate is None:
        return
    with roofline_column:
        st.markdown("**Roofline** — a lower bound on the step, not a measurement")
        with st.container(key="target_roofline"):
            st.plotly_chart(roofline_figure(estimate), key="roofline")
        links = (
            f"; collectives at NVLink's {target.chip.nvlink_bandwidth / 1e9:,.0f} GB/s inside a host and the network's "
            f"{target.chip.network_bandwidth / 1e9:,.0f} GB/s per GPU between hosts"
            if target.is_gpu
            else ""
        )
        st.caption(
            f"{human_flops(result.flops)} and {human_bytes(int(result.bytes_accessed))} per {per} per step "
            f"(loop bodies times their trip count) against {target.chip.device_peak_flops / 1e12:,.0f} TFLOP/s and "
            f"{target.chip.device_hbm_bandwidth / 1e9:,.0f} GB/s{links}; collectives by the formulas of “How to Scale Your Model”. "
            f"{mfu_ceiling_words(estimate)[0].upper()}{mfu_ceiling_words(estimate)[1:]}. Lowering and compiling took {result.compile_s:.1f} s"
            + (
                f" of the {wall_s:.1f} s from the click (the rest: starting the compile process, tracing, reading the program)."
                if wall_s
                else (f" on {result.compiled_when}" if result.compiled_when else "")
                + " (read from the compile cache; tracing and starting the compile process not included)."
            )
        )
    st.markdown(f"**Collectives per mesh axis** (per {per} per step)")
    if result.collectives:
        frame = pd.DataFrame(
            [
                {
                    "op": c.op,
                    "mesh axes": " × ".join(c.mesh_axes) or "—",
                    "count": c.count,
                    "bytes": human_bytes(c.bytes),
                    "group": c.group_size,
                }
                | ({"rides": "NVLink" if c.link == "nvlink" else "network"} if target.is_gpu else {})
                | ({"rides": c.link.upper()} if target.multislice else {})
                | {"time ≥": human_seconds(c.seconds)}
                for c in result.collectives
            ]
        )
        with st.container(key="target_collectives"):  # every column in view at 1024 px, "time ≥" included
            tables.fitted(frame, {c: COLLECTIVE_WIDTHS[c] for c in frame.columns})
    else:
        st.caption(f"None: every {per} computes on its own data.")


def placement_text(result: TargetCompile) -> str:
    """Where the layout's mesh axes fall on the target, from the compile: on a GPU cluster the hosts and GPUs of one group and
    what it rides; on a TPU slice the torus axes it moves along."""
    axes = [p for p in result.mesh.placement if p.size > 1]
    if result.target.multislice:
        return f"Placed on {result.target.num_slices} slices: " + "; ".join(p.text for p in axes) + "." + dcn_traffic(result)
    if result.target.is_gpu:
        return "Placed on the hosts and GPUs (host-major): " + ("; ".join(p.text for p in axes) or "no axis larger than 1") + "."
    return (
        "Placed on the torus: "
        + ("; ".join(f"{p.axis} ({p.size}) along {' and '.join(p.torus_axes)}" for p in axes) or "no axis larger than 1")
        + "."
    )


def dcn_traffic(result: TargetCompile) -> str:
    """Several slices: the bytes per device per step that cross the DCN, and their time at the DCN figure (an estimate)."""
    seconds = sum(c.seconds for c in result.dcn_collectives)
    return f" Across the DCN: {human_bytes(result.dcn_bytes)} per chip per step, ≥ {human_seconds(seconds)} (an estimate)."


def predicted_steps(layouts: list[Layout], target: Target) -> list[float | None]:
    """Each layout's predicted step on ``target`` from its cached compile (None: not compiled for it yet)."""
    results = [cached(layout, target) for layout in layouts]
    return [r.estimate.predicted_s if r is not None and r.estimate is not None else None for r in results]


def summary_row(label: str, result: TargetCompile | None) -> dict:
    """One Compare-page row for a layout's result on the chosen target."""
    if result is None:
        return {
            "layout": label,
            "fits": "not compiled",
            "XLA peak / device": "—",
            "headroom": "—",
            "predicted step": "—",
            "step ≥ (lower bound)": "—",
            "bound": "—",
            "collective time ≥": "—",
            "flags": "—",
        }
    estimate = result.estimate
    step_s, bound, collective_s = (
        (estimate.step_s, estimate.bound, estimate.collective_s) if estimate else (float("nan"), "—", float("nan"))
    )
    return {
        "layout": label,
        "fits": "yes" if result.fits else "NO",
        "XLA peak / device": human_bytes(result.judged_peak_bytes),
        "headroom": human_bytes(result.headroom_bytes),
        "predicted step": human_seconds(estimate.predicted_s) if estimate and estimate.predicted_s else "—",
        "step ≥ (lower bound)": human_seconds(step_s) if estimate else "—",
        "bound": bound,
        "collective time ≥": human_seconds(collective_s) if estimate else "—",
        "flags": result.flags_text,
    } | ({"DCN / step": human_bytes(result.dcn_bytes)} if result.target.multislice else {})


def compare_section(labels: list[str], layouts: list[Layout], target: Target | None) -> None:
    """The Compare page's view of every layout on the sidebar's target: verdict, peak, roofline, collectives."""
    if target is None:
        st.caption(
            "Choose a target in the sidebar (a TPU slice or an NVIDIA GPU cluster) to compare these layouts on it: "
            "XLA's memory per device, its verdict and a roofline."
        )
        return
    st.subheader(f"On {markdown_literal(target.name)} ({target.topology})")
    results, missing = [], []
    for label, layout in zip(labels, layouts):
        try:
            check_mesh_fits(target, layout_size(layout))
        except ExplorerError as error:
            st.warning(f"{markdown_literal(label)}: {markdown_literal(str(error))}")
            results.append(None)
            continue
        result = cached(layout, target)
        results.append(result)
        refusal = refused(analyze(layout)) if result is None else None
        if refusal is not None:  # not compiled: JAX refuses it (the Layout page says why next to the rules)
            st.warning(f"{markdown_literal(label)}: not compiled: {markdown_literal(str(refusal))}")
        elif result is None:
            missing.append((label, layout))
    if missing and st.button(f"Compile {counted(len(missing), 'layout')} for {target.name}", type="primary", key="compare_compile_button"):
        status = st.status("Waiting for a turn…", expanded=True)
        line = status.empty()
        names = {id(layout): label for label, layout in missing}

        def on_progress(jobs) -> None:
            if jobs:
                status.update(label=f"Compiling {len(missing)} layout(s) for {target.name}", state="running")
                line.write(" · ".join(f"{markdown_literal(names[id(j.layout)])}: **{j.stage}**" for j in jobs))

        outcomes = POOL.compile_many(
            session_id(),
            [(layout, target) for _, layout in missing],
            on_wait=lambda ahead, running: line.write(markdown_literal(queue_text(ahead, running))),
            on_progress=on_progress,
        )
        for (label, _), outcome in zip(missing, outcomes):
            if outcome.error is not None:
                st.error(f"{markdown_literal(label)}: {markdown_literal(str(outcome.error))}")
            elif outcome.result is not None:
                results[labels.index(label)] = outcome.result
        status.update(label="Compiled", state="complete", expanded=False)
    with st.container(key="compare_targets_table"):
        tables.fitted(
            pd.DataFrame([summary_row(l, r) for l, r in zip(labels, results)]),
            # several slices: what crosses the DCN in view, in the place of the bound (one click away)
            {k: v for k, v in SUMMARY_COLUMNS.items() if k != "bound"} | {"DCN / step": 80} if target.multislice else SUMMARY_COLUMNS,
            {"XLA peak / device": "XLA peak", "predicted step": "predicted", "step ≥ (lower bound)": "step ≥"},
            key="compare_targets",
            row_height=tables.WRAPPED_ROW_PX,  # "not compiled", a fits verdict with its label: wrapped, not cut
            height=tables.wrapped_height(len(labels)),
        )
        st.caption(PREDICTION_CAPTION)
    memory_view.compare_section(labels, results, device_word(target))
    shown = [(l, r) for l, r in zip(labels, results) if r is not None]
    if shown:
        st.markdown("**Roofline** — lower bounds on the step, not measurements; the term that bounds each layout's step outlined")
        with st.container(key="compare_roofline"):
            st.plotly_chart(compare_roofline_figure([l for l, _ in shown], [r.estimate for _, r in shown]), key="compare_roofline_chart")
        for column, (label, result) in zip(st.columns(len(shown)), shown):
            with column:
                st.markdown(f"**{markdown_literal(label)}**")
                per_axis = {}
                for c in result.collectives:
                    per_axis[" × ".join(c.mesh_axes) or "—"] = per_axis.get(" × ".join(c.mesh_axes) or "—", 0) + c.bytes
                st.caption("Collectives per mesh axis: " + (", ".join(f"{a} {human_bytes(b)}" for a, b in per_axis.items()) or "none"))
                with st.container(key=f"compare_lines_{labels.index(label)}"):
                    st.caption("  \n".join(["Top lines by communication:"] + [markdown_literal(t) for t in top_lines(result.traced())]))
                with st.container(key=f"compare_verdict_{labels.index(label)}"):
                    st.caption(markdown_literal(verdict(result)))
                st.caption(markdown_literal(placement_text(result)))
    st.caption(f"Lower bounds from each compiled program and the {device_word(target)}'s figures, not measurements.")
