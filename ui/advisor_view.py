"""The Advisor page's Streamlit side: roles, the run with its stages and Stop, the ranked table, the chart, row actions."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from explorer import advisor
from explorer.plots.advisor import AdvisorPoint, advisor_figure
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.sharing.share import layout_to_query
from explorer.hardware.targets import Target
from explorer.formats import clock, counted
from explorer.text import markdown_literal
from ui import race_view, state, tables
from ui.fields import whole_number
from ui.turnstile import session_id

RACE = "advisor_race_result"  # the race of the top three, as ui.race_view keeps a race
SEARCH = "advisor_search"  # the last search (an advisor.Search), kept while it runs so Stop keeps what was compiled
RUNNING = "advisor_running"  # set while a search runs; still set on the next run = it was stopped
ROLE_PREFIX = "advisor_role::"
# In view, with their widths in pixels; the others one click away.
ADVISOR_COLUMNS = {"rank": 40, "layout": 140, "fits": 100, "predicted step": 120, "step ≥": 120, "XLA peak / device": 100}


def roles_editor(names: tuple[str, ...]) -> dict[str, str]:
    """One role per logical name (defaults by convention); the search writes rules from these."""
    defaults = advisor.default_roles(names)
    chosen = {}
    with st.expander("Roles of the model's logical names (the rules are written from these)", expanded=False):
        columns = st.columns(4)
        for index, name in enumerate(names):
            key = ROLE_PREFIX + name
            if key not in st.session_state:
                st.session_state[key] = defaults[name]
            chosen[name] = columns[index % 4].selectbox(name, advisor.ROLES, key=key)
        st.caption(
            "batch → data, fsdp (and expert) axes; embed → fsdp (FSDP); tensor → tensor (Megatron); "
            "sequence → sequence; expert → expert; none → replicated."
        )
    return {n: r for n, r in chosen.items() if r != defaults[n]}


def depth_option_refused(layout: Layout, option: str | None, messages) -> bool:
    """Whether the Depth option box names no depth of the layout's model: checked before the run (the search would refuse
    it only at stage 2), said in ``messages`` under the box's own label."""
    if option is None:
        return False
    try:
        advisor.depth_of(layout, option)
        return False
    except ExplorerError as error:
        messages.error(markdown_literal(str(ExplorerError("Depth option", error.value, error.problem))))
        return True


def run(
    layout: Layout,
    target: Target,
    compiles: int,
    roles: dict[str, str],
    shortcut: bool | None = None,
    depth_option: str | None = None,
    beside=None,
) -> None:
    """Stage 1, then stage 2 in the server-wide queue, showing the stage and elapsed time; Stop keeps what was compiled.

    Stop goes in ``beside`` (the Advise button's row), the progress in the status's one-line label under it: both
    in view at 768 px.
    """
    stop_slot = (beside or st).empty()
    stop_slot.button("Stop", key="advisor_stop", help="Kills the running compile; the candidates compiled so far are kept")
    status = st.status("Stage 1: analyzing every candidate…", expanded=False)
    line = status.empty()
    try:
        if depth_option:
            advisor.depth_of(layout, depth_option)  # a bad name is refused before any work
        search = advisor.stage1(layout, target, roles)
    except ExplorerError as error:
        status.update(label="Failed", state="error")
        st.error(markdown_literal(str(error)))
        return
    st.session_state[SEARCH] = search
    st.session_state[RUNNING] = True
    line.write(f"**stage 1** · {len(search.candidates)} candidates analyzed, {search.refused} refused · {clock(search.stage1_s)}")
    status.update(label=f"Stage 2: compiling the shortlist for {target.name}", state="running")
    advisor.stage2(  # in the server's compile pool: the place in its queue is in the progress line
        search,
        compiles,
        on_progress=lambda stage, elapsed: _progress(status, line, stage, elapsed),
        shortcut=shortcut,
        depth_option=depth_option,
        session=session_id(),
    )
    st.session_state.pop(RUNNING, None)
    stop_slot.empty()
    status.update(label=f"Done: {counted(search.compiles, 'compile')}, {clock(search.elapsed_s)}", state="complete", expanded=False)


def _progress(status, line, stage: str, elapsed: float) -> None:
    """A stage of the search: in the status's label (seen collapsed) and its body."""
    text = markdown_literal(f"{stage} · {clock(elapsed)}")
    status.update(label=text)
    line.write(text)


def last_search() -> advisor.Search | None:
    search = st.session_state.get(SEARCH)
    if search is not None and st.session_state.pop(RUNNING, None):  # the run before this one was interrupted: Stop
        search.stopped, search.stage = True, "stopped"
    return search


def figure(search: advisor.Search) -> go.Figure:
    """Peak memory per device against the step bound, with the HBM line: XLA's where verified, else stage 1's estimate and state."""
    return advisor_figure([_point(c) for c in search.ranked()], search.limit_bytes, advisor.limit_text(search.target))


def _point(c: advisor.Candidate) -> AdvisorPoint:
    kind = "extrapolated" if c.extrapolated else "xla" if c.verified else "estimate"
    return AdvisorPoint(c.layout.name, kind, c.step_s, c.state_bytes if kind == "estimate" else c.peak_bytes)


def _open(layout: Layout, target: str) -> None:
    state.load_layout(layout.model_copy(update={"target": target}))  # the slice it was advised for comes along
    # The rules editor restores the rows it showed last when it becomes a new widget (a page switch):
    # forget which editor that was, so it starts from the loaded rules.
    st.session_state.pop(state.RULES_EDITOR, None)


def _add_to_compare(layout: Layout) -> None:
    links = st.session_state.get("compare_links", "") or ""
    st.session_state["compare_links"] = (links.rstrip("\n") + "\n" if links.strip() else "") + "/?" + layout_to_query(layout)[1:]


def own_layout_note(search: advisor.Search, layout: Layout) -> str | None:
    """Why the user's own layout is not among the ranked candidates (None when it is): a mesh of another device count
    than the target's, or what the analysis refused in it."""
    if any(c.own for c in search.candidates):
        return None
    target, size = search.target, layout.mesh.size
    if size != target.devices:
        return (
            f"Your layout {layout.name} is not ranked: its mesh has {size} devices and {target.name} has {target.devices}, "
            f"so it cannot run there as it is. Every candidate below uses all {target.devices}."
        )
    why = next((example.split(": ", 1)[1] for example in search.refused_examples if example.startswith(f"{layout.name}: ")), None)
    return f"Your layout {layout.name} is not ranked: JAX would refuse it on {target.name}" + (f" ({why})." if why else ".")


def show(search: advisor.Search, layout: Layout) -> None:
    """The ranking for ``search``; ``layout`` is the user's own (the sidebar's), said when it is not among the candidates."""
    ranked = search.ranked()
    if search.stopped:
        st.warning(f"Stopped: {search.compiles} candidate(s) were compiled before Stop; they are kept below.")
    note = own_layout_note(search, layout)
    if note:
        with st.container(key="advisor_own_layout"):
            st.info(markdown_literal(note))
    # The advice is always a layout XLA compiled in full (issue 56); a warning where it is the best so far
    advice = search.advice()
    if advice is not None:  # a warning where it is the best compiled so far and uncompiled ones are estimated faster
        box = st.warning if search.ahead_of_advice() else st.success
    else:  # nothing compiled fits (an error), or nothing was compiled yet (stage 1 only: no advice, said so)
        closest = search.closest()
        box = st.error if closest is not None and (closest.verified or closest.state_bytes > search.limit_bytes) else st.info
    box(markdown_literal(advisor.verdict_text(search)))
    if search.memory_steps:  # nothing compiled fitted at first: what the memory search changed, and what XLA said
        st.info(
            markdown_literal("Memory search (nothing compiled fitted at first): ")
            + "\n".join(f"\n- {markdown_literal(step)}" for step in search.memory_steps)
        )
    keys = advisor.maxtext_advice_text(search)
    if keys:  # a MaxText config: the advice as the keys to set, ready to paste
        label, _, line = keys.partition(": ")
        st.caption(markdown_literal(label + ":"))
        st.code(line, language="bash", wrap_lines=True)
    st.caption(
        f"Searched {search.searched} candidate(s), of which {search.refused} refused (layouts JAX would refuse), {search.compiles} compiled "
        f"({search.cached_compiles} from the disk cache); stage 1 {search.stage1_s:.1f} s, whole search {search.elapsed_s:.1f} s. "
        f"**predicted step** is {markdown_literal(advisor.PREDICTION_NOTE)}. **step ≥** is a lower bound: the roofline of XLA's compiled program where *verified*, else an *estimate* "
        f"({advisor.STAGE1_NOTE}). **fits** is XLA's verdict where verified, else whether the exact state fits "
        f"({advisor.limit_text(search.target)})."
    )
    st.caption(markdown_literal(advisor.target_text(search.target) + "."))
    if search.depth is not None:
        if search.depth.usable:
            st.caption(
                f"Depth shortcut: each candidate estimated to fit was compiled at depths {' and '.join(map(str, advisor.SHORTCUT_DEPTHS))} "
                f"of {', '.join(search.depth.options)} and its figures extrapolated linearly to {search.depth.full} (rows marked "
                f"*extrapolated*; the others in full); the best was then compiled in full ({search.full_compiles} full compile(s))."
            )
        else:
            where = (
                " Name the option that sets the depth in **Depth option** above."
                if search.depth.why.startswith(advisor.NO_DEPTH_OPTION)
                else ""
            )
            st.caption(markdown_literal(f"Depth shortcut not used: {search.depth.why}.") + where)
    for c in search.ranked():
        if c.extrapolation_error:
            error = c.extrapolation_error
            st.info(
                markdown_literal(
                    f"{c.layout.name}, compiled in full after its extrapolation: extrapolated / compiled = "
                    + ", ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in error.items() if v is not None)
                    + f". {advisor.extrapolation_text(c)}."
                )
            )
    if advisor.pipeline_text(search):  # why a pipeline won or lost: its bubble and sends against the gathers it saves
        st.info(markdown_literal(advisor.pipeline_text(search)))
    for failure in search.failures:
        st.error(markdown_literal(f"Compile failed: {failure}"))
    with st.container(key="advisor_table"):
        # The ranking's decision in view at 1024 px; the mesh, rules, bound, MFU and the rest in Show/hide columns.
        rows = advisor.table_rows(search)
        tables.fitted(  # rows of three lines: "0.0845 ms (estimate)" wraps in its column, not cut
            pd.DataFrame(rows),
            ADVISOR_COLUMNS,
            {"XLA peak / device": "XLA peak", "predicted step": "predicted"},
            row_height=tables.WRAPPED_ROW_PX,
            height=tables.wrapped_height(len(rows)),
        )
    st.caption(
        "The mesh, rules, bound, MFU ceiling, placement and the rest of each row: the table's Show/hide columns menu. "
        f"Its rules: {advisor.RULES_NOTE}; a candidate's rules whole: pick it below."
    )
    if search.guessed_roles:
        st.caption(markdown_literal(advisor.guessed_text(search) + ".") + " Change one under **Roles of the model's logical names** above.")
    st.plotly_chart(figure(search), key="advisor_chart")
    names = [c.layout.name for c in ranked]
    first = names.index(advice.layout.name) if advice is not None else 0  # the advice (compiled), else the first row
    pick = st.selectbox("Candidate", names, index=first, key="advisor_pick", format_func=lambda n: f"{names.index(n) + 1}. {n}")
    chosen = ranked[names.index(pick)]
    # A wrapping row of content-sized buttons: whole labels at any width (quarter columns cut them to "Open on …").
    buttons = st.container(horizontal=True)
    if buttons.button(
        "Open on the Layout page", key="advisor_open", on_click=_open, args=(chosen.layout, search.target.name), type="primary"
    ):
        st.switch_page("views/0_Layout.py")
    buttons.button(
        "Add to Compare",
        key="advisor_compare",
        on_click=_add_to_compare,
        args=(chosen.layout,),
        help="Adds its link to the Compare page's links",
    )
    with st.expander(f"Its rules, all {len(chosen.layout.rules)}"):
        st.code("\n".join(advisor.rules_text(chosen.layout).split("; ")), language=None, wrap_lines=True)
    st.markdown("Share link")
    st.code("/?" + layout_to_query(chosen.layout)[1:], language=None, wrap_lines=True)
    if chosen.links:  # where its axes lie, as the compile places them (stage 1 costs its collectives on those links)
        where = "Placed on the hosts and GPUs (host-major)" if search.target.is_gpu else "Placed on the torus"
        st.caption(markdown_literal(f"{where}: " + "; ".join(link.text for link in chosen.links if link.size > 1) + "."))
    race_section(search)


def race_section(search: advisor.Search) -> None:
    """Race the top three on this process's devices with the Compare page's race, when it has as many devices as the target."""
    st.subheader("Race the top three here")
    why = advisor.race_refusal(search)
    if why:
        st.caption(markdown_literal(why))
        return
    import jax

    top = advisor.race_candidates(search)
    labels, layouts = [f"{i}. {c.layout.name}" for i, c in enumerate(top, 1)], [c.layout for c in top]
    st.caption(
        f"This process has {jax.device_count()} {jax.devices()[0].platform.upper()} device(s), as many as {search.target.name}: "
        "the race times each candidate's real train step on them in alternation (A B C A B C …), as the Compare page's race "
        "does. The times are this machine's devices', not the target's."
    )
    left, middle, right = st.columns([1, 1, 2], vertical_alignment="bottom")
    messages = st.container(key="advisor_race_messages")
    rounds = whole_number(left, "Rounds", "advisor_race_rounds", 1, 50, 3, messages)
    steps = whole_number(middle, "Steps per round", "advisor_race_steps", 1, 500, 5, messages)
    racing = [layout.key for layout in layouts]
    ready = rounds is not None and steps is not None
    if right.button("Race the top three", key="advisor_race_button", type="primary", disabled=not ready) and ready:
        race_view.race_now(labels, layouts, racing, int(rounds), int(steps), key=RACE, stop_key="advisor_race_stop")
    stored = st.session_state.get(RACE)
    if stored and stored[0] == racing and stored[2].round_medians and stored[2].round_medians[0]:
        if not stored[3]:
            st.info(
                f"Stopped after {len(stored[2].round_medians[0])} of {st.session_state.get(RACE + '_rounds')} rounds; the rounds finished are shown."
            )
        race_view.show_race(stored[1], stored[2], "advisor_race_chart", [c.predicted_s for c in top], search.target.name)
