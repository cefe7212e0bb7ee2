"""The Timing page's steps: the gate before any compile, the controls, the live timing, and what XLA compiled.

The timing itself is ``explorer.timing.timing.time_layout`` (or ``explorer.timing.workers.time_local_processes`` over several
local processes), run through ``ui.live_timing``; the results are kept per layout key in ``ui.state.TIMING_RESULTS``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.plots.times import step_times_figure
from explorer.analysis.report import Report
from explorer.compile.compiled import check_timeable, device_footprint_bytes, host_footprint_bytes, memory_budget
from explorer.errors import ExplorerError
from explorer.hlo.program import used as used_collectives
from explorer.layout import Layout
from explorer.formats import human_bytes, human_seconds
from explorer.text import markdown_literal, memory_relation, peak_in_use_text
from explorer.timing.timing import TimingResult, time_layout
from explorer.timing.workers import time_local_processes
from ui import live_timing, memory_view
from ui.current import simulated_devices_note
from ui.fields import whole_number
from ui.state import ACROSS_PAGES, TIMING_RESULTS as RESULTS
from ui.turnstile import TURNSTILE

PROCESS_CHOICES = (1, 2, 4)  # local jax.distributed processes offered, where they divide the mesh


def intro(layout: Layout, report: Report) -> None:
    """What is timed, and the note on simulated devices."""
    st.caption(
        f"**{markdown_literal(layout.name)}** · {report.mesh.size} devices · the Flax guide's step: grad of the model's loss, "
        "Adam's apply_gradients, jitted with in/out shardings from the analysis under the mesh and the rules."
    )
    simulated_devices_note()


def timeable(report: Report) -> bool:
    """The first gate (planned mesh, indivisible dimensions, estimated memory), checked before any compile."""
    try:
        check_timeable(report)
        return True
    except ExplorerError as error:
        st.error(markdown_literal(str(error)))
        if report.mesh.abstract:
            st.page_link("views/0_Layout.py", label="See the planned analysis on the Layout page", icon=":material/grid_view:")
        return False


def controls(report: Report, can_time: bool) -> tuple[int, int, int, bool]:
    """Timed steps, warm-up steps, processes, and whether the button was pressed (never with a value out of range:
    the button is disabled and the box's message says why)."""
    left, middle, spread_column, right = st.columns([1, 1, 1.2, 1.8], vertical_alignment="bottom")  # "Processes" on one line
    messages = st.container(key="timing_messages")  # under the row: a value out of range, named
    steps = whole_number(left, "Timed steps", "timing_steps", 1, 1000, 20, messages)
    warmup = whole_number(middle, "Warm-up steps", "timing_warmup", 0, 100, 2, messages)
    ready = can_time and steps is not None and warmup is not None
    choices = [n for n in PROCESS_CHOICES if report.mesh.size % n == 0]
    if st.session_state.get("timing_processes") not in choices:
        st.session_state["timing_processes"] = 1
    processes = spread_column.selectbox(
        "Processes",
        choices,
        key="timing_processes",
        persist_state=ACROSS_PAGES,
        disabled=not can_time,
        help=f"Local processes joined with jax.distributed, the mesh's {report.mesh.size} devices split evenly "
        "(gloo collectives between processes), as a multi-host run would be. Counts that do not divide the mesh are not offered.",
    )
    start = right.button(
        "Time train step",
        type="primary",
        key="time_button",
        disabled=not ready,
        help=None if ready else "This layout cannot be timed here, or a box holds a value out of range: see the message",
    )
    return steps or 0, warmup or 0, int(processes), start


def host_note(report: Report) -> None:
    """The memory a timing needs (the host's for simulated devices, else one device's), and the queue."""
    budget = memory_budget()
    needed = (
        f"Host memory needed on {report.mesh.size} simulated devices: at most about {human_bytes(host_footprint_bytes(report))}"
        if budget.simulated
        else f"Memory needed on each {budget.device}: at most about {human_bytes(device_footprint_bytes(report))} of its "
        f"{human_bytes(budget.available_bytes)} ({budget.source})"
    )
    st.caption(
        f"{needed} (an estimate that bounds XLA's buffers for the step; XLA's compiled memory analysis is checked again before "
        "anything is allocated). "
        f"Timings queued right now: {TURNSTILE.queue_length()}."
    )


def time_now(layout: Layout, steps: int, warmup: int, processes: int) -> None:
    """Start timing the layout: a ``live_timing.Job`` in its own thread, drawn live by ``show_last`` until it ends.

    Stop (or any run of a page: an edit, another page) ends it after its current step with every figure of the steps
    that ran, in one process or in several local ones (``time_local_processes``'s ``should_stop``: the workers agree
    on the step to stop after, and return their whole result).
    """
    st.session_state.get(RESULTS, {}).pop(layout.key, None)

    def work(job: live_timing.Job[TimingResult]) -> TimingResult:
        def on_phase(phase: str) -> None:
            job.phase = phase

        options = dict(
            steps=steps,
            warmup=warmup,
            on_step=lambda _, seconds: job.samples.append(seconds),
            should_stop=job.stop.is_set,
            on_phase=on_phase,
        )
        return time_local_processes(layout, processes, **options) if processes > 1 else time_layout(layout, **options)

    live_timing.start(live_timing.Job(layout.key, steps, work))


def draw(job: live_timing.Job[TimingResult]) -> None:
    """A running timing: Stop, its stage or step in a box, and its chart so far (``live_timing.follow``'s drawing)."""
    steps, ran = job.steps, len(job.samples)
    st.button(
        "Stop",
        key="stop_button",
        help="Stops after the current step; every figure of the steps so far is kept",
        on_click=job.stop.set,
        disabled=job.stop.is_set(),
    )
    queued = job.phase == "queued"
    # A plain box, not st.status: each redraw is a script run of its own, and Streamlit ticks a status box "complete"
    # when the run that drew it ends, so it read "✓ Running" while the timing ran.
    with st.container(border=True, key="timing_live"):
        st.markdown(
            ":material/hourglass_top: **" + ("Waiting for a turn…" if queued else "Stopping…" if job.stop.is_set() else "Running") + "**"
        )
        if job.stop.is_set():
            st.progress(ran / steps, text=f"stopping after step {ran + 1}…" if ran else "stopping after the first step…")
        elif queued:
            st.progress(0.0, text=f"{job.ahead} timing(s) ahead of you (one timing runs at a time, so figures are not distorted)")
        elif ran == 0:
            st.progress(0.0 if job.phase != "timing" else 0.01, text=job.phase + "…")
        else:
            st.progress(ran / steps, text=f"step {ran} of {steps}: {human_seconds(job.samples[ran - 1])}")
    # a new chart only for new steps (each drawing has its own key); an empty one before the first, so the browser
    # has loaded Plotly by the time the first step arrives and the chart fills from its first point
    st.plotly_chart(step_times_figure(job.samples[:ran], steps), key=f"live_{ran - 1}" if ran else "live_frame")


def done_label(result: TimingResult) -> str:
    """The status box's label once the timing has ended."""
    ran = len(result.step_s.samples)
    return f"Stopped after {ran} of {result.planned_steps} steps" if result.stopped else f"Timed {ran} steps"


def collect_stopped() -> None:
    """The timing that ended (finished, or stopped: by Stop, an edit, this run): wait for its current step and keep
    its result under its layout's key; a refusal is shown."""
    job = live_timing.collect("Stopping after the current step (a run still compiling or warming up finishes that first)…")
    if job is None:
        return
    if job.result is not None:
        st.session_state.setdefault(RESULTS, {})[job.key] = job.result
    elif job.refusal is not None:
        st.error(markdown_literal(str(job.refusal)))
    else:
        st.info("Stopped before its turn in the queue came: nothing was timed.")


def show_last(key: str) -> None:
    """The layout's timing in this session: live while it runs, else its result (a stopped one's too), else how to
    start one."""
    job = live_timing.running()
    if job is not None and job.key == key:
        live_timing.follow(draw)
        return
    results = st.session_state.get(RESULTS, {})
    if key in results:
        if not results[key].stopped:  # a stopped run's note leads its figures (show_steps): said once
            st.status(done_label(results[key]), state="complete", expanded=False)
        show_result(results[key])
    else:
        st.info("Press **Time train step** to compile and time this layout on this process's devices.")


def show_result(result: TimingResult) -> None:
    """The figures, the step times, what was expected, memory and collectives one above the other, then the activations."""
    show_steps(result)
    show_expectations(result)
    # One above the other: side by side, both tables lost their last column at 1024 px.
    memory_column, collective_column = st.container(), st.container()
    with memory_column:
        show_memory(result)
    with collective_column:
        show_collectives(result)
    show_activations(result)


def show_steps(result: TimingResult) -> None:
    """The headline figures, the step times chart and how they were taken."""
    steps = result.step_s
    if result.stopped:  # first: every figure below is of the steps that ran
        with st.container(key="timing_stopped"):
            st.info(result.stopped_note())
    row = st.container(horizontal=True, key="timing_metrics")  # wraps on a narrow page instead of cutting values off
    metric = lambda label, value, help=None: row.metric(label, value, help=help, width="content", border=True)  # noqa: E731
    if result.cached:  # the compile was not run for this timing: say so, with the time it took when it was
        metric("Compile", "cached", f"compiled earlier in this process, in {result.compile_s:.2f} s; not compiled again for this timing")
    else:
        metric("Compile", f"{result.compile_s:.2f} s")
    metric("Median step", human_seconds(steps.median))
    metric("p10", human_seconds(steps.p10))
    metric("p90", human_seconds(steps.p90))
    metric("Steps / s", f"{result.steps_per_s:.2f}")
    metric(
        "GFLOP/s achieved", f"{result.flops_per_s / 1e9:.2f}", f"{result.flops:,.0f} FLOP per step ({result.flops_source}) / median step"
    )
    metric("MFU", "—" if result.mfu is None else f"{result.mfu:.1%}", result.peak_note)
    st.plotly_chart(step_times_figure(steps.samples), key="step_times")
    spread = (
        f" In {result.processes} processes × {result.devices_per_process} devices (jax.distributed, gloo between "
        "processes); the times are process 0's."
        if result.processes > 1
        else ""
    )
    st.caption(
        f"{len(steps.samples)} timed steps after {result.warmup} warm-up; min {human_seconds(steps.min)}, max {human_seconds(steps.max)}. "
        "Each sample is one call plus block_until_ready on the whole new state." + spread
    )


def show_expectations(result: TimingResult) -> None:
    """The measured step beside the predicted step and the lower bound, with the ratio, or why one is missing."""
    frame = pd.DataFrame(
        [
            {
                "step": row["what"],
                "seconds": "—" if row["step_s"] is None else human_seconds(row["step_s"]),
                "measured / it": "—" if row["ratio"] is None else f"{row['ratio']:.2f}x",
                "what it is": row["note"],
            }
            for row in result.expectations()
        ]
    )
    with st.container(key="timing_expectations"):  # three rows of sentences: a static table wraps them, none is cut
        st.table(frame, hide_index=True)


def show_memory(result: TimingResult) -> None:
    """XLA's memory per device beside the analysis' figures."""
    st.subheader("Memory per device")
    rows = [
        ("arguments", result.memory["argument_bytes"], human_bytes(result.estimate["argument_bytes"]), result.estimate["argument_bytes"]),
        ("outputs", result.memory["output_bytes"], human_bytes(result.estimate["output_bytes"]), result.estimate["output_bytes"]),
        ("temporaries", result.memory["temp_bytes"], f"({human_bytes(result.estimate['declared_activation_bytes'])} activations)", None),
        ("aliased", result.memory["alias_bytes"], "—", None),
        ("peak", result.memory.get("peak_bytes", 0), "—", None),
    ]
    st.dataframe(
        pd.DataFrame(
            [
                {"": name, "XLA": human_bytes(xla), "analysis": estimate, "Δ B": "—" if comparable is None else f"{xla - comparable:+,}"}
                for name, xla, estimate, comparable in rows
            ]
        ),
        hide_index=True,
        width="stretch",
        key="timing_memory_table",
        column_config={
            "XLA": st.column_config.TextColumn("XLA", help="memory_analysis() of the compiled step"),
            "analysis": st.column_config.TextColumn("analysis", help="the analysis' exact state and inputs"),
            "Δ B": st.column_config.TextColumn("Δ B", help="XLA minus the analysis, in bytes"),
        },
    )
    if "peak_bytes" in result.memory:
        fullest = result.memory_breakdown.peak_bytes if result.memory_breakdown is not None else None
        st.caption(memory_relation(result.memory, "memory_analysis()'s peak", fullest))
    for note in result.memory_notes():
        st.caption("• " + note)
    st.caption(peak_in_use_text(result))
    memory_view.breakdown_section(result.memory_breakdown, "timing_peak", per="device")


def show_collectives(result: TimingResult) -> None:
    """The collectives XLA inserted in the compiled step."""
    st.subheader("Collectives XLA inserted")
    used = used_collectives(result.collectives)
    if used:
        st.dataframe(
            pd.DataFrame([{"op": op, "count": c["count"], "bytes per device": human_bytes(c["bytes"])} for op, c in used.items()]),
            hide_index=True,
            width="stretch",
        )
    else:
        st.success("None: every device computes on its own data.")
    st.caption(
        "Parsed from the compiled HLO, per train step: bytes are each op's result on one device, and an op in a "
        "loop body (nn.scan) counts once per iteration, by XLA's known trip count."
    )
    if result.loops_without_trip_count:
        st.warning(
            f"{result.loops_without_trip_count} loop(s) have no trip count XLA knows: the collectives in their "
            "bodies are counted once each, so these totals are a lower bound."
        )


def show_activations(result: TimingResult) -> None:
    """Each module output's sharding as the model declares it and as XLA chose it."""
    st.subheader("Activation shardings: declared vs chosen by XLA")
    if not result.activations:
        st.info(
            "No module outputs to compare: XLA's choice is read through Flax Linen's capture_intermediates, which "
            "Flax NNX has no counterpart of. The declared activations and their specs are on the Layout page."
        )
        return
    frame = pd.DataFrame(
        [
            {
                "module output": a.path,
                "shape": str(a.shape),
                "declared": "—" if a.declared is None else str(a.declared),
                "XLA chose": str(a.chosen),
                "differs": "⚠ differs" if a.differs else "",
            }
            for a in result.activations
        ]
    )
    differing = sum(a.differs for a in result.activations)
    if differing:
        st.warning(f"{differing} module output(s) are sharded differently from what the model declares.")
    st.dataframe(
        frame.style.apply(lambda row: ["background-color: #fde2e1" if row["differs"] else "" for _ in row], axis=1),
        hide_index=True,
        width="stretch",
        key="activation_shardings",
        # "differs" first and the shape last: at 1024 px beside the sidebar the verdict and both specs are in view
        column_order=("differs", "module output", "declared", "XLA chose", "shape"),
        column_config={
            "differs": st.column_config.TextColumn("differs", width=70),
            "module output": st.column_config.TextColumn("module output", width=140),
            "declared": st.column_config.TextColumn("declared", width=105),
            "XLA chose": st.column_config.TextColumn("XLA chose", width=105),
            "shape": st.column_config.TextColumn("shape", width="small"),
        },
    )
    st.caption("XLA's choice is read from a compiled forward pass returning every module output (capture_intermediates).")
