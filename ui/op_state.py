"""The Arrays page's widgets in ``st.session_state``: load an op spec into them, read a draft back.

Keys start with ``op_`` (kept across pages by ``state.keep_widgets_across_pages``, so only
widgets whose values may be written back use the prefix: not buttons). The
first visit starts from the address's op link, else the guide's matmul preset.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.errors import ExplorerError
from explorer.ops.op_spec import MATMUL_PRESET, PRESETS, OpSpec, parse_op, parse_spec_text, spec_input_text
from explorer.sharing.share import is_op_link, op_to_params, params_to_op
from ui import share_panel, state

MAX_ARRAYS = 4
LOADED = "op_loaded"
COUNT = "op_count"
MESH_SOURCE = "op_mesh_source"
OWN, LAYOUT = "this page's mesh", "the layout's mesh (Layout page sidebar)"
MESH_SHAPE = "op_mesh_shape"
MESH_AXES = "op_mesh_axes"
MESH_EXPLICIT = "op_mesh_explicit"  # this page's mesh: its axes Explicit (sharding in types) or Auto
EXPR = "op_expr"
CONSTRAIN = "op_constrain"
OUT_SPEC = "op_out_spec"
MESSAGE = "op_link_message"
REFUSED_LINK = "op_refused_link"  # an op link that could not be opened, kept verbatim under Share until dismissed


def array_key(field: str, index: int) -> str:
    return f"op_{field}_{index}"


def ensure_initialised() -> None:
    """On the first visit: the link's op (or a message and the preset if it is bad), else the matmul preset."""
    if LOADED in st.session_state:
        return
    params = st.query_params.to_dict()
    op = parse_op(PRESETS[MATMUL_PRESET][1])
    if is_op_link(params):
        try:
            op = params_to_op(params)
        except ExplorerError as error:
            st.session_state[MESSAGE] = share_panel.refuse_link(REFUSED_LINK, "the guide's matmul", error)
    load_op(op)


def load_op(op: OpSpec) -> None:
    """Write every field of ``op`` into the widgets' keys (on this page's own mesh)."""
    s = st.session_state
    s[LOADED] = True
    s[MESH_SOURCE] = OWN
    s[MESH_SHAPE] = ", ".join(str(n) for n in op.mesh.shape)
    s[MESH_AXES] = ", ".join(op.mesh.axes)
    s[MESH_EXPLICIT] = op.mesh.explicit
    s[COUNT] = len(op.arrays)
    for index, (name, array) in enumerate(op.arrays.items()):
        s[array_key("name", index)] = name
        s[array_key("shape", index)] = ", ".join(str(n) for n in array.shape)
        s[array_key("dtype", index)] = array.dtype
        s[array_key("spec", index)] = spec_input_text(array.spec)
    s[EXPR] = op.expr
    s[CONSTRAIN] = op.out_spec is not None
    s[OUT_SPEC] = spec_input_text(op.out_spec or ())


def load_preset(name: str) -> None:
    load_op(parse_op(PRESETS[name][1]))


def layout_mesh() -> dict[str, Any]:
    """The mesh of the layout last valid in the sidebar (the seed layout's before any visit to it)."""
    from explorer.layout import SEED_LAYOUT

    return dict(st.session_state.get(state.LAST_VALID, SEED_LAYOUT)["mesh"])


def draft() -> dict[str, Any]:
    """The widgets as an op spec dict; a spec typed wrongly raises ExplorerError naming its field."""
    s = st.session_state
    if s.get(MESH_SOURCE) == LAYOUT:
        mesh = layout_mesh()
    else:
        mesh = own_mesh()
    arrays: dict[str, Any] = {}
    for index in range(int(s.get(COUNT, 1))):
        name = (s.get(array_key("name", index)) or "").strip()
        if name in arrays:
            raise ExplorerError(f"arrays[{index}].name", name, "names two arrays")
        arrays[name] = {
            "shape": state.parse_list(s.get(array_key("shape", index), "")),
            "dtype": s.get(array_key("dtype", index), "float32"),
            "spec": parse_spec_text(f"arrays.{name}.spec", s.get(array_key("spec", index), "")),
        }
    out_spec = parse_spec_text("out_spec", s.get(OUT_SPEC, "")) if s.get(CONSTRAIN) else None
    return {"mesh": mesh, "arrays": arrays, "expr": s.get(EXPR, ""), "out_spec": out_spec}


def draft_of_array(index: int) -> dict[str, Any]:
    """Array ``index`` of the widgets alone, as an op spec dict whose expression is the array itself."""
    whole = {**draft_mesh_only()}
    s = st.session_state
    name = (s.get(array_key("name", index)) or "").strip()
    whole["arrays"] = {
        name: {
            "shape": state.parse_list(s.get(array_key("shape", index), "")),
            "dtype": s.get(array_key("dtype", index), "float32"),
            "spec": parse_spec_text(f"arrays.{name}.spec", s.get(array_key("spec", index), "")),
        }
    }
    return {**whole, "expr": name, "out_spec": None}


def draft_mesh_only() -> dict[str, Any]:
    s = st.session_state
    if s.get(MESH_SOURCE) == LAYOUT:
        return {"mesh": layout_mesh()}
    return {"mesh": own_mesh()}


def own_mesh() -> dict[str, Any]:
    """This page's own mesh as the widgets hold it (every axis Explicit when the toggle is on)."""
    s = st.session_state
    mesh = {"shape": state.parse_list(s.get(MESH_SHAPE, "")), "axes": state.parse_names(s.get(MESH_AXES, ""))}
    if s.get(MESH_EXPLICIT):
        mesh["axis_types"] = ["explicit"] * len(mesh["axes"])
    return mesh


def sync_address(op: OpSpec) -> None:
    """Keep the address bar carrying the op, so copying it shares it."""
    params = op_to_params(op)
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def show_link_message() -> None:
    message = st.session_state.pop(MESSAGE, None)
    if message:
        st.error(message)
