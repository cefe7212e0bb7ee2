"""The Arrays page's steps: the op's widgets, its analysis (or the arrays valid alone), the grids, Share, the timing.

The op itself is ``explorer.ops`` (``parse_op``, ``analyze_op``, ``time_op``); its widgets' keys are
``ui.op_state``'s; the timing runs through ``ui.live_timing``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from explorer.plots.grid import mesh_figure, sharding_grid
from explorer.plots.times import op_times_figure
from explorer.errors import ExplorerError
from explorer.hlo.program import used as used_collectives
from explorer.layout import seed_layout
from explorer.ops.op_spec import DTYPES, MATMUL_PRESET, PRESETS, OpSpec, parse_op
from explorer.ops.ops import (
    ArrayView,
    OpAnalysis,
    OpTiming,
    analyze_op,
    check_op_timeable,
    host_bytes_to_time,
    op_key,
    time_op,
)
from explorer.specs import spec_axes, spec_text
from explorer.sharing.share import op_to_query
from explorer.formats import human_bytes, human_seconds, plain_number
from explorer.text import code_literal, markdown_literal
from explorer.tiles import grid_view, shard_counts
from ui import live_timing, op_state, share_panel, sidebar, state
from ui.fields import whole_number
from ui.turnstile import TURNSTILE
from explorer.formats import counted

TIMINGS = "arrays_timings"  # op key -> OpTiming
PARTIAL = "arrays_partial"  # the samples of a timing in progress, kept if Stop interrupts it
GRID_WIDTH = 400  # two grids side by side at 1440 px; at 1024 px beside the sidebar they wrap, one per row


def open_session() -> None:
    """The session on this page: the layout pages' widgets kept for them, the op's widgets loaded, a bad link said."""
    state.ensure_initialised(seed_layout)  # the layout pages' widgets start from the seed, not from this page's link
    state.keep_widgets_across_pages("arrays")
    state.keep_rules_edits("arrays", [])  # the layout's rules editor is not drawn here: its edits come back on the next page
    op_state.ensure_initialised()
    op_state.show_link_message()


def mesh_text(axes, shape) -> str:
    """``a=4 × b=2``."""
    return " × ".join(f"{a}={n}" for a, n in zip(axes, shape))


def sidebar_inputs() -> DeltaGenerator:
    """The sidebar: the guide's presets and the mesh; returns the slot Share is drawn in once the op is known."""
    with st.sidebar:
        sidebar.devices_line()
        st.subheader("Guide presets")
        st.session_state.setdefault("op_preset_choice", MATMUL_PRESET)
        preset = st.selectbox(
            "Preset",
            list(PRESETS),
            key="op_preset_choice",
            persist_state=state.ACROSS_PAGES,
            help="The examples of JAX's guide 'Distributed arrays and automatic parallelization'",
        )
        st.caption(PRESETS[preset][0])
        st.button("Load preset", key="arrays_load_preset", on_click=op_state.load_preset, args=(preset,), width="stretch")
        st.subheader("Mesh")
        st.radio(
            "Mesh",
            [op_state.OWN, op_state.LAYOUT],
            key=op_state.MESH_SOURCE,
            persist_state=state.ACROSS_PAGES,
            label_visibility="collapsed",
        )
        if st.session_state[op_state.MESH_SOURCE] == op_state.OWN:
            left, right = st.columns(2)
            left.text_input("Shape", key=op_state.MESH_SHAPE, persist_state=state.ACROSS_PAGES, help="Sizes of the mesh axes, e.g. 4, 2")
            right.text_input("Axis names", key=op_state.MESH_AXES, persist_state=state.ACROSS_PAGES, help="One name per axis, e.g. x, y")
            st.toggle(
                "Explicit axes",
                key=op_state.MESH_EXPLICIT,
                persist_state=state.ACROSS_PAGES,
                help="Explicit axes put the sharding in every value's type (jax.make_mesh's default since JAX 0.9): the "
                "page shows jax.typeof of the result beside what XLA compiled. Off: Auto axes, XLA chooses.",
            )
        else:
            mesh = op_state.layout_mesh()
            st.caption(f"{mesh_text(mesh['axes'], mesh['shape'])} (change it on the Layout page)")
        return st.container()


def op_inputs() -> None:
    """The arrays (name, shape, dtype, spec each), the expression and the output constraint."""
    st.caption(
        "Put arrays on the mesh with a PartitionSpec each (`x, None`; `(x, y), None` shards over both; empty = replicated), "
        "write an expression over them, and see the output sharding XLA chooses when it compiles `jax.jit(expr)`."
    )
    st.number_input("Arrays", 1, op_state.MAX_ARRAYS, key=op_state.COUNT, persist_state=state.ACROSS_PAGES)
    for index in range(int(st.session_state[op_state.COUNT])):
        name, shape, dtype, spec = st.columns([1, 1.8, 1.7, 1.8])  # the dtype box shows "bfloat16" whole at 1024 px
        st.session_state.setdefault(op_state.array_key("name", index), "abcd"[index])
        st.session_state.setdefault(op_state.array_key("shape", index), "1024, 1024")
        st.session_state.setdefault(op_state.array_key("dtype", index), "float32")
        st.session_state.setdefault(op_state.array_key("spec", index), "")
        name.text_input("Name", key=op_state.array_key("name", index), persist_state=state.ACROSS_PAGES)
        shape.text_input("Shape", key=op_state.array_key("shape", index), persist_state=state.ACROSS_PAGES)
        dtype.selectbox("Dtype", DTYPES, key=op_state.array_key("dtype", index), persist_state=state.ACROSS_PAGES)
        spec.text_input(
            "Spec",
            key=op_state.array_key("spec", index),
            persist_state=state.ACROSS_PAGES,
            help="e.g. x, None  or  (x, y), None; empty = replicated",
        )
    st.text_input(
        "Expression",
        key=op_state.EXPR,
        persist_state=state.ACROSS_PAGES,
        help="Array names, numbers, + - * / @, unary -, .T, and jnp.sin/cos/exp/tanh/dot/matmul/transpose/sum/mean/max/reshape, jax.nn.relu",
    )
    constrain_column, out_column = st.columns([1, 2], vertical_alignment="bottom")
    constrain_column.checkbox(
        "Constrain the output",
        key=op_state.CONSTRAIN,
        persist_state=state.ACROSS_PAGES,
        help="Wrap the result in jax.lax.with_sharding_constraint",
    )
    out_column.text_input(
        "Output spec",
        key=op_state.OUT_SPEC,
        persist_state=state.ACROSS_PAGES,
        disabled=not st.session_state[op_state.CONSTRAIN],
        help="empty = replicated, P()",
    )


def analyzed_op() -> tuple[OpSpec, OpAnalysis]:
    """The op the widgets hold and its analysis; where it is invalid, the error and the arrays valid alone, then the page stops."""
    try:
        op = parse_op(op_state.draft())
        return op, analyze_op(op)
    except ExplorerError as error:
        st.container(key="arrays_messages").error(markdown_literal(str(error)))
    alone = valid_alone()
    if alone:
        st.caption("The arrays that are valid on their own, while the op is not:")
        for index, (partial_analysis, slot) in enumerate(zip(alone, side_by_side(len(alone)))):
            view = partial_analysis.inputs[0]
            with slot:
                draw(view, partial_analysis, array_title(view), f"arrays_alone_{index}")
    st.stop()


def valid_alone() -> list[OpAnalysis]:
    """After an error, each array the widgets hold that is valid on its own, analyzed alone (so its grid still shows)."""
    found = []
    for index in range(int(st.session_state[op_state.COUNT])):
        try:
            draft = op_state.draft_of_array(index)
            found.append(analyze_op(parse_op(draft)))
        except ExplorerError:
            continue
    return found


def share_section(slot: DeltaGenerator, op: OpSpec) -> None:
    """The address bar carries the op; the sidebar's Share says so and shows the link readable."""
    op_state.sync_address(op)
    with slot:
        st.subheader("Share")
        page_url = (st.context.url or "").split("?")[0]
        share_panel.show_refused_link(op_state.REFUSED_LINK, page_url)
        st.caption("The address bar carries this op: copy it to share.")
        with st.expander("Readable link"):
            st.caption("The same link as the address bar's, without `,:;()` escaped:")
            st.container(key="arrays_share_link").code(page_url + op_to_query(op), language=None, wrap_lines=True)


def show_inputs(op: OpSpec, analysis: OpAnalysis) -> None:
    """The mesh and the expression in one line, then each input's grid."""
    mesh = analysis.mesh
    where = "planned: hypothetical device ids, nothing compiles or runs" if analysis.planned else "real devices of this process"
    st.markdown(f"Mesh {mesh_text(mesh.axes, mesh.shape)} · {counted(mesh.size, 'device')} ({where}) · {code_literal(op.expr)}")
    for index, (view, slot) in enumerate(zip(analysis.inputs, side_by_side(len(analysis.inputs)))):
        with slot:
            draw(view, analysis, array_title(view), f"arrays_grid_{index}")


def show_output(analysis: OpAnalysis) -> None:
    """The output's spec (and its type on Explicit axes), its grid, the mesh, and the collectives XLA inserted."""
    st.subheader("Output")
    chosen = spec_text(analysis.output.spec)
    source = "JAX's type-level propagation chose" if analysis.planned else "XLA chose"
    st.container(key="arrays_output_spec").markdown(
        f"**{source} `{chosen}`** for the {analysis.output.dtype}{list(analysis.output.shape)} result."
    )
    if analysis.typed_spec is not None:
        st.container(key="arrays_typed_spec").markdown(
            f"Its type (`jax.typeof`) on these Explicit axes: **`{spec_text(analysis.typed_spec)}`**."
        )
    st.caption(analysis.note)
    grid_column, side_column = st.columns([3, 2])
    with grid_column:
        draw(analysis.output, analysis, "", "arrays_grid_out")  # titled by the line above
    with side_column:
        st.plotly_chart(mesh_figure(analysis.mesh), key="arrays_mesh")
        if analysis.collectives is not None:
            show_collectives(analysis)


def show_collectives(analysis: OpAnalysis) -> None:
    """The compiled op's collectives and memory per device."""
    used = used_collectives(analysis.collectives)
    if used:
        st.dataframe(
            pd.DataFrame(
                [{"collective": name, "count": c["count"], "bytes per device": human_bytes(c["bytes"])} for name, c in used.items()]
            ),
            hide_index=True,
            width="stretch",
            key="arrays_collectives",
        )
    else:
        st.success("No collectives: every device computes its output block from the input blocks it holds.")
    st.caption(f"Parsed from the compiled HLO (bytes: each op's result on one device). Compiled in {analysis.compile_s:.2f} s.")
    if analysis.memory:
        st.caption(
            "Per device (memory_analysis): "
            + ", ".join(f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in analysis.memory.items() if k != "generated_code_bytes")
        )


def array_title(view: ArrayView) -> str:
    """``**y**: float32[8192, 8192] · `P('a', None)` ``."""
    return f"**{markdown_literal(view.name)}**: {view.dtype}{list(view.shape)} · `{spec_text(view.spec)}`"


def dim_labels(view: ArrayView) -> list[str]:
    """``dim 0 · 8192 → a``, one per dimension, for the grid's axes."""
    labels = []
    for dim, size in enumerate(view.shape):
        axes = spec_axes(view.spec[dim] if view.spec is not None else None)
        labels.append(f"dim {dim} · {size} → {' × '.join(axes) or 'replicated'}")
    return labels


def draw(view: ArrayView, analysis: OpAnalysis, title: str, key: str) -> None:
    """The array's blocks on the mesh (its two most sharded dimensions where it has more than two), and its shard."""
    if view.spec is None:
        st.info(f"No sharding known. {markdown_literal(analysis.note)}")
        return
    rank = len(view.shape)
    counts = shard_counts(view.spec, analysis.mesh)
    if rank <= 2:
        rows, cols = (0 if rank == 2 else None), (rank - 1 if rank else None)
    else:
        rows, cols = sorted(sorted(range(rank), key=lambda d: (counts[d], d))[-2:])
    grid = grid_view(view.shape, view.spec, analysis.mesh, rows, cols)
    if title:
        st.markdown(title)
    st.plotly_chart(sharding_grid(grid, analysis.mesh, view.itemsize, dim_labels(view)), key=key)
    caption = (
        f"shard {tuple(view.shard_shape)} = {human_bytes(view.bytes_per_device())} per device · each block on {view.replication} device(s)"
    )
    if grid.fixed:
        caption += " · drawn at block 0 of " + ", ".join(f"dim {d}" for d, _ in grid.fixed)
    st.caption(caption)


def side_by_side(count: int) -> list:
    """``count`` containers for grids, side by side where the page is wide enough and wrapped below where it is not
    (columns would squeeze two grids into half of a narrow page, their labels running together)."""
    row = st.container(horizontal=True, wrap=True, gap="medium")
    return [row.container(width=GRID_WIDTH) for _ in range(count)]


def timing_section(op: OpSpec, analysis: OpAnalysis) -> None:
    """Sharded against one device: the controls, the timing when asked, then its result (or why the op is not timed)."""
    st.subheader("Sharded against one device")
    try:
        check_op_timeable(op)
    except ExplorerError as error:
        st.info(f"Not timed here: {markdown_literal(str(error))}")
        st.stop()
    left, middle, right = st.columns([1, 1, 2], vertical_alignment="bottom")
    messages = st.container(key="op_timing_messages")
    steps = whole_number(left, "Timed calls (each)", "op_steps", 1, 200, 3, messages)
    warmup = whole_number(middle, "Warm-up calls", "op_warmup", 0, 20, 1, messages)
    ready = steps is not None and warmup is not None
    start = right.button("Time sharded vs one device", type="primary", key="arrays_time_button", disabled=not ready) and ready
    st.caption(
        f"Host memory needed: about {human_bytes(host_bytes_to_time(op))} (inputs and output, sharded and on one device). "
        f"Timings queued right now: {TURNSTILE.queue_length()}. On simulated CPU devices all 'devices' share this machine's cores."
    )
    labels = {"sharded": f"sharded over {counted(analysis.mesh.size, 'device')}", "single": "one device"}
    if start:
        live_timing.time_with_stop(
            TIMINGS,
            op_key(op),
            "arrays_stop_button",
            "Stops after the current call; the calls so far are kept",
            lambda: run_timing(op, labels, steps, warmup),
        )
    show_timing(op_key(op), labels)


def run_timing(op: OpSpec, labels: dict[str, str], steps: int, warmup: int) -> OpTiming | None:
    """Time the op sharded and on one device, its calls drawn as they come."""
    samples: dict[str, list[float]] = {"sharded": [], "single": []}
    st.session_state[PARTIAL] = {"key": op_key(op), "samples": samples}

    def time_it(live: live_timing.Live) -> OpTiming:
        def on_phase(phase: str) -> None:
            live.progress.progress(0.0, text=phase + "…")

        def on_step(which: str, index: int, seconds: float) -> None:
            samples[which].append(seconds)
            done = len(samples["sharded"]) + len(samples["single"])
            live.progress.progress(done / (2 * steps), text=f"{labels[which]}: call {index + 1} of {steps}, {human_seconds(seconds)}")
            live.redraw(lambda: op_times_figure(samples, labels, steps), f"arrays_live_{which}_{index}", last=done == 2 * steps)

        return time_op(op, steps=steps, warmup=warmup, on_step=on_step, on_phase=on_phase)

    return live_timing.run_timing(
        time_it,
        first_frame=op_times_figure(samples, labels, steps),
        frame_key="arrays_live_frame",
        one_at_a_time="one at a time",
        done=lambda _: f"Timed {steps} calls each",
    )


def show_timing(key: str, labels: dict[str, str]) -> None:
    """The op's timing in this session, else the calls of one stopped, else how to start one."""
    timing = st.session_state.get(TIMINGS, {}).get(key)
    partial = st.session_state.get(PARTIAL)
    if timing is None and partial and partial["key"] == key and partial["samples"]["sharded"]:
        counts = {which: len(values) for which, values in partial["samples"].items()}
        st.info(f"Stopped after {counts['sharded']} sharded and {counts['single']} one-device call(s).")
        st.plotly_chart(op_times_figure(partial["samples"], labels), key="arrays_partial_times")
    elif timing is None:
        st.info("Press **Time sharded vs one device** to run the compiled op on the mesh and the same expression on one device.")
    else:
        metrics = st.columns(4)
        metrics[0].metric(f"Sharded ({counted(timing.devices, 'device')}), median", human_seconds(timing.sharded.median))
        metrics[1].metric("One device, median", human_seconds(timing.single.median))
        metrics[2].metric("Speedup", f"{timing.speedup:.2f}×", help="one-device median / sharded median")
        metrics[3].metric("max |difference|", plain_number(timing.max_abs_difference), help="between the sharded and the one-device result")
        st.plotly_chart(op_times_figure({"sharded": timing.sharded.samples, "single": timing.single.samples}, labels), key="arrays_times")
        st.caption(
            f"p10–p90: sharded {human_seconds(timing.sharded.p10)}–{human_seconds(timing.sharded.p90)}, one device "
            f"{human_seconds(timing.single.p10)}–{human_seconds(timing.single.p90)}; {timing.warmup} untimed warm-up call(s) each; "
            "each sample is one call plus block_until_ready."
        )
