"""The sidebar: devices, mesh, rules and model in; a draft layout (file format) out.

Each section leaves an empty slot under its widgets so that a validation error can
be shown next to the widget it concerns.
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from explorer.hardware import devices
from explorer.models import MAXTEXT, MODELS, STEP, allowed_factories, is_factory
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.analysis.presets import EXAMPLES, fit_preset, model_preset
from explorer.rules import PRESET_DESCRIPTIONS, PRESETS, preset_rules
from explorer.specs import spec_axes, spec_entry
from explorer.hardware.targets import parse_target
from explorer.text import markdown_literal
from ui import share_panel, state

RULE_COLUMNS = ["#", "logical name", "mesh axes"]
# Glide's cell editor throws a typed name away on Escape, and Streamlit has no setting for it: this fixed script (no
# user input in it; app.py puts it on every page, where it takes no room in the sidebar) turns an Escape in a text cell's editor into the Enter that keeps the text. The rules editor is the
# app's only editable grid. A mesh-axes cell keeps its chips on a click outside; Escape there still cancels (glide's).
ESCAPE_KEEPS_TEXT = """<script>
if (!window.__escapeKeepsText) {
  window.__escapeKeepsText = true;
  const root = window.parent ? window.parent.document : document;
  root.addEventListener('keydown', (event) => {
    const field = event.target;
    if (event.key !== 'Escape' || !(field instanceof HTMLElement) || !field.matches('textarea.gdg-input')) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    const enter = () => field.isConnected &&
      field.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', code: 'Enter', keyCode: 13, which: 13, bubbles: true}));
    requestAnimationFrame(() => requestAnimationFrame(enter));  // after React has the last key typed
  }, true);
}
</script>"""
PRESET_DESCRIPTIONS_HELP = (
    "Rules written for the current mesh, model and size: the first axis plays data, the last plays model; "
    "the model's other logical names are replicated explicitly, and a name whose dimension the mesh axis does not "
    "divide is left unsharded (the note under the rules says which)."
)


@dataclass
class Slots:
    """Where each section's messages go."""

    name: Any
    mesh: Any
    rules: Any
    model: Any

    def for_field(self, field: str) -> Any:
        for prefix in ("mesh", "rules", "model", "name"):
            if field.startswith(prefix):
                return getattr(self, prefix)
        return self.model


def render(page: str) -> tuple[dict[str, Any], Slots]:
    """Draw the sidebar of ``page``; return the draft layout dict and the message slots."""
    state.ensure_initialised(share_panel.initial_layout)
    state.keep_widgets_across_pages(page)
    with st.sidebar:
        _devices_section()
        _examples_section()
        st.text_input("Layout name", key=state.NAME, persist_state=state.ACROSS_PAGES)
        name_slot = st.container(key="name_messages")
        mesh, mesh_slot = _mesh_section()
        rules, rules_slot = _rules_section(page, mesh)
        model, model_slot = _model_section()
    draft = {"name": st.session_state[state.NAME], "mesh": mesh, "rules": rules, "model": model}
    return draft, Slots(name_slot, mesh_slot, rules_slot, model_slot)


def devices_line() -> None:
    """``Devices: 8 × cpu (simulated)``: the devices this process has, as every page's sidebar says it."""
    info = devices.describe()
    simulated = " (simulated)" if info["platform"] == "cpu" and info["count"] > 1 else ""
    st.markdown(f"**Devices:** {info['count']} × {info['platform']}{simulated}")


def _devices_section() -> None:
    devices_line()
    st.caption(f"Set {devices.DEVICES_ENV} before starting the app to simulate another count.")


def _examples_section() -> None:
    st.selectbox(
        "Examples",
        list(EXAMPLES),
        index=None,
        placeholder="open an example layout",
        key=state.EXAMPLE,
        on_change=state.open_example,
        help="A whole layout (mesh, rules, model) in one pick; it replaces the sidebar's layout.",
    )


def _mesh_section() -> tuple[dict[str, Any], Any]:
    st.subheader("Mesh")
    left, right = st.columns(2)
    left.text_input("Shape", key=state.MESH_SHAPE, persist_state=state.ACROSS_PAGES, help="Sizes of the mesh axes, e.g. 2, 4 or 16x16")
    right.text_input("Axis names", key=state.MESH_AXES, persist_state=state.ACROSS_PAGES, help="One name per axis, e.g. data, model")
    shape = state.parse_list(st.session_state[state.MESH_SHAPE])
    axes = state.parse_names(st.session_state[state.MESH_AXES])
    # axes renamed or removed drop out of the choice (a multiselect refuses values it does not offer)
    kept = [axis for axis in st.session_state.get(state.MESH_EXPLICIT, []) if axis in axes]
    st.session_state[state.MESH_EXPLICIT] = list(dict.fromkeys(kept))
    st.multiselect(
        "Explicit axes",
        options=list(dict.fromkeys(axes)),
        key=state.MESH_EXPLICIT,
        persist_state=state.ACROSS_PAGES,
        placeholder="none: every axis is Auto",
        help="Explicit axes put the sharding in every value's type (jax.make_mesh's default since JAX 0.9): models "
        "written with out_sharding= and reshard need them. Auto axes let XLA choose intermediate shardings, as "
        "in JAX's 2023 guides and Flax Linen's logical constraints. Flax NNX refuses a mesh that mixes both.",
    )
    explicit = set(st.session_state[state.MESH_EXPLICIT])
    if st.session_state.get(state.MESH_DCN, "").strip() or _multislice(state.chosen_target()):
        st.text_input(
            "Slices per axis (mesh.dcn)",
            key=state.MESH_DCN,
            persist_state=state.ACROSS_PAGES,
            placeholder="empty: the first axis spans every slice",
            help="On a target of several TPU slices (2xv5p-16): how many slices each mesh axis spans, as MaxText's "
            "dcn_*_parallelism, e.g. 2, 1 (their product is the slice count; the devices are ordered as "
            "mesh_utils.create_hybrid_device_mesh orders them). Empty: the outermost axis spans them all, MaxText's "
            "default (data parallelism over the data-center network).",
        )
    dcn = state.parse_list(st.session_state.get(state.MESH_DCN, ""))
    slot = st.container(key="mesh_messages")
    if shape and all(isinstance(s, int) and s > 0 for s in shape):
        needed, have = math.prod(shape), devices.describe()["count"]
        if needed <= have:
            st.caption(f"Needs {needed} of the {have} devices: runs on **real** devices.")
    mesh = {"shape": shape, "axes": axes}
    if explicit:
        mesh["axis_types"] = ["explicit" if axis in explicit else "auto" for axis in axes]
    if dcn:
        mesh["dcn"] = dcn
    return mesh, slot


def _multislice(name: str | None) -> bool:
    """Whether ``name`` is a target of several TPU slices (a name the Target section cannot read is not: it says why)."""
    if not name:
        return False
    try:
        return parse_target(name).multislice
    except ExplorerError:
        return False


def _rules_section(page: str, mesh: dict[str, Any]) -> tuple[list[Any], Any]:
    mesh_axes = mesh["axes"]
    st.subheader("Rules")
    preset = st.selectbox(
        "Preset",
        list(PRESETS),
        index=None,
        placeholder="choose a preset",
        key="rules_preset",
        help=PRESET_DESCRIPTIONS_HELP,
    )
    if preset:
        st.caption(PRESET_DESCRIPTIONS[preset])
    if st.button("Apply preset", key="apply_preset", disabled=not (mesh_axes and preset), width="stretch"):
        _apply_preset(preset, mesh)
    model = st.session_state.get(state.MODEL)
    written_for = st.session_state.get(state.RULES_MODEL)
    if written_for not in (None, model):
        offered = model_preset(model)
        with st.container(key="rules_offer"):
            st.info(
                f"These rules were written for {markdown_literal(repr(written_for))}; the model is now {markdown_literal(repr(model))}."
            )
            if st.button(f"Use the {offered} preset for {model}", key="rules_offer_button", disabled=not mesh_axes, width="stretch"):
                _apply_preset(offered, mesh)
                st.rerun()
    notes = st.session_state.get(state.PRESET_NOTES)
    if notes:
        with st.container(key="preset_notes"):
            st.info(notes)
    state.keep_rules_edits(page, mesh_axes)
    base = pd.DataFrame([[i, logical, list(axes)] for i, (logical, axes) in enumerate(st.session_state[state.RULES])], columns=RULE_COLUMNS)
    edited = st.container(key="rules_editor").data_editor(
        base,
        key=f"rules_editor_{st.session_state[state.RULES_VERSION]}",
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        column_config={
            # A new row gets the next number (not "None"): added rules apply last until renumbered.
            "#": st.column_config.NumberColumn(
                "#", help="Priority: rules apply in this order; edit to reorder", step=1, width=28, default=len(base)
            ),
            # Short headers: the sidebar may open at Streamlit's default 300 px, where "logical name" was cut off.
            # A new row starts empty, not "None" (it is ignored until a name or an axis is filled in).
            "logical name": st.column_config.TextColumn("logical", help="A logical axis name, e.g. batch", width=86, default=""),
            # Typed (Enter adds it, even an axis the mesh does not have yet: the rules' message then names it) or picked.
            "mesh axes": st.column_config.MultiselectColumn(
                "mesh",
                options=mesh_axes,
                accept_new_options=True,
                default=[],
                help="Mesh axes, typed (Enter adds one) or picked: none replicates; several shard over their product",
                width=96,
            ),
        },
    )
    st.caption(
        "Order matters. Linen models: the first rule whose mesh axes are still free wins; later rules are fallbacks. "
        "NNX models: the last rule for a name wins; a name with no rule is used as a mesh axis."
    )
    rows = _rule_rows(edited)
    st.session_state[state.RULES_SHOWN] = [[logical, axes] for _, logical, axes in rows]
    if _reordered(rows):  # show the rules in the order they now apply
        state.set_rules([[logical, axes] for _, logical, axes in rows])
        st.rerun()
    return [[logical, spec_entry(axes)] for _, logical, axes in rows], st.container(key="rules_messages")


def _apply_preset(preset: str, mesh: dict[str, Any]) -> None:
    """Write ``preset`` for the sidebar's mesh and model, fitted so that JAX accepts the layout; say what it left unsharded."""
    model = st.session_state.get(state.MODEL)
    options = _factory_options() if is_factory(model) else state.model_options(model)
    draft = {"name": "preset", "mesh": mesh, "rules": [], "model": {"name": model, "options": options}}
    try:
        fitted = fit_preset(preset, parse_layout(draft))
    except ExplorerError as error:  # the mesh or the model is invalid right now: write the preset for the mesh axes only
        rules = preset_rules(preset, mesh["axes"])
        text = (
            f"The {preset} preset was written for the mesh axes only, not checked against the model, because "
            f"the layout is not valid yet: {markdown_literal(str(error))}"
        )
    else:
        rules = fitted.rules
        lines = [f"The {preset} preset, written for {markdown_literal(model)} on this mesh"]
        lines += [f"- {markdown_literal(note)}" for note in fitted.notes]
        lines += [f"- JAX would still refuse (not a rule's doing): {markdown_literal(r)}" for r in fitted.refused[:3]]
        text = "\n".join(lines) if len(lines) > 1 else None
    state.set_rules([[logical, list(spec_axes(axes))] for logical, axes in rules], model=model)
    st.session_state[state.PRESET_NOTES] = text


def _rule_rows(edited: pd.DataFrame) -> list[list[Any]]:
    """Rows of the editor as [order, logical, axes], sorted by the # column (blank rows dropped)."""
    rows = []
    for position, row in enumerate(edited.itertuples(index=False)):
        order, logical, axes = row
        logical = logical.strip() if isinstance(logical, str) else ""
        axes = [str(a) for a in axes] if axes is not None and not isinstance(axes, float) else []
        if not logical and not axes:
            continue
        order = position if order is None or (isinstance(order, float) and math.isnan(order)) else float(order)
        rows.append([order, logical, axes])
    return sorted(rows, key=lambda r: r[0])


def _reordered(rows: list[list[Any]]) -> bool:
    return [r[0] for r in rows] != list(range(len(rows)))


def _model_section() -> tuple[dict[str, Any], Any]:
    st.subheader("Model")
    names = list(MODELS) + [MAXTEXT, STEP] + list(allowed_factories())
    if st.session_state.get(state.MODEL) not in names:
        names.append(st.session_state[state.MODEL])
    # The box holds the name; what it is, under it where it wraps (at 1024 px "name: description" was cut in the box).
    name = st.selectbox(
        "Model",
        names,
        key=state.MODEL,
        persist_state=state.ACROSS_PAGES,
        help="\n".join(f"- {_model_label(n)}" for n in names),
    )
    st.caption(markdown_literal(_model_label(name).partition(": ")[2] or "a factory of your own (allow-listed)"))
    if name == MAXTEXT:
        return _maxtext_section()
    if name == STEP:
        return _step_section()
    if is_factory(name):
        st.session_state.setdefault(state.FACTORY_OPTIONS, "{}")
        st.text_area("Factory options (JSON)", key=state.FACTORY_OPTIONS, persist_state=state.ACROSS_PAGES)
        return {"name": name, "options": _factory_options()}, st.container(key="model_messages")
    entry = MODELS[name]
    if entry.presets:
        st.session_state[f"size_preset::{name}"] = _matching_preset(entry, state.model_options(name))
        st.selectbox(
            "Size preset",
            ["custom"] + list(entry.presets),
            key=f"size_preset::{name}",
            persist_state=state.ACROSS_PAGES,
            on_change=_apply_size_preset,
            args=(name,),
        )
    with st.expander("Options", expanded=not entry.presets):
        for field, info in entry.options.model_fields.items():
            _option_widget(name, field, info)
    return {"name": name, "options": state.model_options(name)}, st.container(key="model_messages")


def _matching_preset(entry, options: dict[str, Any]) -> str:
    """The size preset whose every value the options carry (a link or file of a preset names it), else "custom"."""
    for preset, values in entry.presets.items():
        if all(options.get(field) == value for field, value in values.items()):
            return preset
    return "custom"


def _apply_size_preset(model: str) -> None:
    preset = st.session_state[f"size_preset::{model}"]
    for field, value in MODELS[model].presets.get(preset, {}).items():
        st.session_state[state.option_key(model, field)] = value


def _model_label(name: str) -> str:
    if name == MAXTEXT:
        return f"{MAXTEXT}: a MaxText config, by its own keys (optional extra)"
    if name == STEP:
        return f"{STEP}: your own jitted step, from an allow-listed factory given the mesh"
    return name if is_factory(name) else f"{name}: {MODELS[name].description}"


def _maxtext_section() -> tuple[dict[str, Any], Any]:
    """A MaxText config: its keys as KEY=VALUE lines (MaxText's own, as train_compile.py takes them), and a button
    that writes MaxText's mesh, rules and target for them into the sidebar (MaxText builds them: docs/maxtext.md)."""
    from explorer.models import maxtext

    st.session_state.setdefault(state.MAXTEXT_KEYS, "model_name=llama2-7b\nper_device_batch_size=1\ncompile_topology=v5e-8")
    st.text_area("MaxText keys (KEY=VALUE, one a line)", key=state.MAXTEXT_KEYS, persist_state=state.ACROSS_PAGES, height=160)
    lines = [line for line in st.session_state[state.MAXTEXT_KEYS].splitlines() if line.strip()]
    messages = st.container(key="model_messages")
    try:
        options = maxtext.parse_keys(lines)
    except ExplorerError as error:
        messages.error(markdown_literal(str(error)))
        return {"name": MAXTEXT, "options": st.session_state[state.MAXTEXT_KEYS]}, messages
    st.button("Use MaxText's mesh and rules for these keys", key="maxtext_apply", on_click=_apply_maxtext, args=(lines,))
    error = st.session_state.get(MAXTEXT_ERROR)
    if error and maxtext.INSTALL_LINE not in error:  # MaxText missing: the page's analysis of the model says it, once
        messages.error(markdown_literal(error))
    return {"name": MAXTEXT, "options": options}, messages


def _step_section() -> tuple[dict[str, Any], Any]:
    """Your own jitted step: its factory (``package.module:function``, allow-listed in EXPLORER_ALLOWED_FACTORIES), given
    the mesh above (the target's, when compiled for one) and these options (docs/step.md)."""
    allowed = [name for name in allowed_factories()]
    st.session_state.setdefault(state.STEP_FACTORY, allowed[0] if allowed else "")
    st.text_input(
        "Step factory (package.module:function)",
        key=state.STEP_FACTORY,
        persist_state=state.ACROSS_PAGES,
        help="factory(mesh, **options) -> (fn, args)",
    )
    st.session_state.setdefault(state.FACTORY_OPTIONS, "{}")
    st.text_area("Factory options (JSON)", key=state.FACTORY_OPTIONS, persist_state=state.ACROSS_PAGES)
    options = _factory_options()
    options = {"factory": st.session_state[state.STEP_FACTORY].strip(), **options} if isinstance(options, dict) else options
    return {"name": STEP, "options": options}, st.container(key="model_messages")


MAXTEXT_ERROR = "maxtext_error"  # why the last "Use MaxText's mesh" failed (MaxText not installed, a refused key)


def _apply_maxtext(lines: list[str]) -> None:
    """The button's callback (it runs before the next script run, so loading can set the widgets' values): MaxText's
    layout for the keys, or the one message why not; the keys typed are kept either way."""
    from explorer.models import maxtext

    st.session_state.pop(MAXTEXT_ERROR, None)
    try:
        layout = parse_layout(maxtext.layout_data(lines))
    except ExplorerError as error:  # MaxText not installed (the install line), or a key or value it refuses
        st.session_state[MAXTEXT_ERROR] = str(error)
        return
    state.load_layout(layout)
    st.session_state.pop(state.RULES_EDITOR, None)


def _factory_options() -> Any:
    text = st.session_state.get(state.FACTORY_OPTIONS) or "{}"
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, or nested past the recursion limit
        return text  # the validator names the field and shows the text


def _bounds(info) -> tuple[int | None, int | None]:
    low = high = None
    for item in info.metadata:
        low = getattr(item, "ge", low)
        high = getattr(item, "le", high)
    return low, high


def _option_widget(model: str, field: str, info) -> None:
    key = state.option_key(model, field)
    if key not in st.session_state:
        st.session_state[key] = info.default
    label = field.replace("_", " ")
    annotation = info.annotation
    if annotation is bool:
        st.checkbox(label, key=key, persist_state=state.ACROSS_PAGES, help=info.description)
    elif typing.get_origin(annotation) is typing.Literal:
        st.selectbox(label, list(typing.get_args(annotation)), key=key, persist_state=state.ACROSS_PAGES, help=info.description)
    else:
        # No min/max here: the model's own validation names the field and the value next to the
        # widget, where Streamlit's bounds would only turn the box red and keep the old value.
        low, high = _bounds(info)
        bounds = f" ({'' if low is None else low}..{'' if high is None else high})" if (low, high) != (None, None) else ""
        st.number_input(label, step=1, key=key, persist_state=state.ACROSS_PAGES, help=f"{info.description}{bounds}")
