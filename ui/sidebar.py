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

from explorer import devices
from explorer.analysis import logical_names
from explorer.layout import ModelSpec
from explorer.models import MODELS, allowed_factories, is_factory, validate_model
from explorer.rules import PRESET_DESCRIPTIONS, PRESETS, preset_rules, spec_axes, spec_entry
from ui import share_panel, state

RULE_COLUMNS = ["#", "logical name", "mesh axes"]
PRESET_DESCRIPTIONS_HELP = (
    "Rules written for the current mesh axes and model: the first axis plays data, the last plays model; "
    "the model's other logical names are replicated explicitly."
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
        st.text_input("Layout name", key=state.NAME)
        name_slot = st.container(key="name_messages")
        mesh, mesh_slot = _mesh_section()
        rules, rules_slot = _rules_section(page, mesh["axes"])
        model, model_slot = _model_section()
    draft = {"name": st.session_state[state.NAME], "mesh": mesh, "rules": rules, "model": model}
    return draft, Slots(name_slot, mesh_slot, rules_slot, model_slot)


def _devices_section() -> None:
    info = devices.describe()
    simulated = " (simulated)" if info["platform"] == "cpu" and info["count"] > 1 else ""
    st.markdown(f"**Devices:** {info['count']} × {info['platform']}{simulated}")
    st.caption(f"Set {devices.DEVICES_ENV} before starting the app to simulate another count.")


def _mesh_section() -> tuple[dict[str, Any], Any]:
    st.subheader("Mesh")
    left, right = st.columns(2)
    left.text_input("Shape", key=state.MESH_SHAPE, help="Sizes of the mesh axes, e.g. 2, 4 or 16x16")
    right.text_input("Axis names", key=state.MESH_AXES, help="One name per axis, e.g. data, model")
    shape = state.parse_list(st.session_state[state.MESH_SHAPE])
    axes = state.parse_names(st.session_state[state.MESH_AXES])
    slot = st.container(key="mesh_messages")
    if shape and all(isinstance(s, int) and s > 0 for s in shape):
        needed, have = math.prod(shape), devices.describe()["count"]
        if needed <= have:
            st.caption(f"Needs {needed} of the {have} devices: runs on **real** devices.")
    return {"shape": shape, "axes": axes}, slot


def _rules_section(page: str, mesh_axes: list[str]) -> tuple[list[Any], Any]:
    st.subheader("Rules")
    preset = st.selectbox(
        "Preset", list(PRESETS), index=None, placeholder="choose a preset",
        key="rules_preset", help=PRESET_DESCRIPTIONS_HELP,
    )
    if preset:
        st.caption(PRESET_DESCRIPTIONS[preset])
    if st.button("Apply preset", key="apply_preset", disabled=not (mesh_axes and preset), width="stretch"):
        rules = preset_rules(preset, mesh_axes, names=_model_names())
        state.set_rules([[logical, list(spec_axes(mesh))] for logical, mesh in rules])
    state.keep_rules_edits(page, mesh_axes)
    base = pd.DataFrame(
        [[i, logical, list(axes)] for i, (logical, axes) in enumerate(st.session_state[state.RULES])], columns=RULE_COLUMNS
    )
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
            "logical name": st.column_config.TextColumn("logical", help="A logical axis name, e.g. batch", width=86),
            "mesh axes": st.column_config.MultiselectColumn(
                "mesh", options=mesh_axes, help="Mesh axes: none replicates; several shard over their product", width=96
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


def _model_names() -> tuple[str, ...] | None:
    """The logical names of the sidebar's model, so a preset is written for it; None while the model is invalid."""
    name = st.session_state.get(state.MODEL)
    options = _factory_options() if is_factory(name) else state.model_options(name)
    try:
        return logical_names(validate_model(ModelSpec(name=name, options=options)))
    except ValueError:  # ExplorerError, or pydantic's for options that are not a mapping
        return None


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
    names = list(MODELS) + list(allowed_factories())
    if st.session_state.get(state.MODEL) not in names:
        names.append(st.session_state[state.MODEL])
    name = st.selectbox(
        "Model", names, key=state.MODEL, format_func=lambda n: n if is_factory(n) else f"{n}: {MODELS[n].description}"
    )
    if is_factory(name):
        st.session_state.setdefault(state.FACTORY_OPTIONS, "{}")
        st.text_area("Factory options (JSON)", key=state.FACTORY_OPTIONS)
        return {"name": name, "options": _factory_options()}, st.container(key="model_messages")
    entry = MODELS[name]
    if entry.presets:
        st.session_state[f"size_preset::{name}"] = _matching_preset(entry, state.model_options(name))
        st.selectbox(
            "Size preset", ["custom"] + list(entry.presets), key=f"size_preset::{name}",
            on_change=_apply_size_preset, args=(name,),
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
        st.checkbox(label, key=key, help=info.description)
    elif typing.get_origin(annotation) is typing.Literal:
        st.selectbox(label, list(typing.get_args(annotation)), key=key, help=info.description)
    else:
        # No min/max here: the model's own validation names the field and the value next to the
        # widget, where Streamlit's bounds would only turn the box red and keep the old value.
        low, high = _bounds(info)
        bounds = f" ({'' if low is None else low}..{'' if high is None else high})" if (low, high) != (None, None) else ""
        st.number_input(label, step=1, key=key, help=f"{info.description}{bounds}")
