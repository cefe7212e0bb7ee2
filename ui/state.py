"""The layout being edited, kept in ``st.session_state`` so that nothing a user typed is lost.

Widgets own their own keys; ``load_layout`` writes a whole layout into those keys
(first visit, a rules preset, later a link or a file), and ``draft_layout`` reads
them back as a dict in the layout file format, which ``parse_layout`` validates.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import streamlit as st

from explorer.layout import Layout, seed_layout
from explorer.models import MAXTEXT, MODELS, STEP, is_factory

NAME = "layout_name"
MESH_SHAPE = "mesh_shape_text"
MESH_AXES = "mesh_axes_text"
MESH_EXPLICIT = "mesh_explicit_axes"  # the mesh axes whose type is Explicit (the others are Auto)
MESH_DCN = "mesh_dcn_text"  # how many TPU slices each mesh axis spans (mesh.dcn), empty for the default
RULES = "rules_base"
RULES_VERSION = "rules_version"
MODEL = "model_name"
FACTORY_OPTIONS = "factory_options_text"
MAXTEXT_KEYS = "maxtext_keys_text"  # a MaxText config's keys, KEY=VALUE one a line
STEP_FACTORY = "step_factory_text"  # a user's step factory, package.module:function (its options in FACTORY_OPTIONS)
LAST_VALID = "last_valid_layout"
TIMING_RESULTS = "timing_results"  # Layout.key -> TimingResult, written by the Timing page, read by Compare
RULES_SHOWN = "rules_shown"  # the rules table as last drawn, edits included
RULES_EDITOR = "rules_editor_identity"  # (page, mesh axes) of the rules table last drawn
SELECTED = "selected_path"  # the array drawn on the Layout page; a link carries it as ``array``
RULES_MODEL = "rules_model"  # the model the rules table was last written for (loaded, or a preset applied)
LOADED = "loaded_layout"  # the layout last loaded (file format): the name is marked edited once the layout differs
PRESET_NOTES = "preset_notes"  # what the last preset left unsharded and why, shown under the rules until a load
TARGET_CHOICE = "target_choice"  # the sidebar's Target selectbox
EXAMPLE = "example_layout"  # the sidebar's Examples selectbox: a pick loads that layout and clears itself
TARGET_HERE = "this process's devices"

# Values of widgets that must survive a page switch: the layout in the sidebar, and the
# inputs of one page a user expects to find again (steps, rounds, picks, links, a name
# being typed). Uploaded files cannot be carried: Streamlit does not let code set them.
KEPT_WIDGETS = (
    NAME,
    MESH_SHAPE,
    MESH_AXES,
    MESH_EXPLICIT,
    MESH_DCN,
    MODEL,
    FACTORY_OPTIONS,
    MAXTEXT_KEYS,
    STEP_FACTORY,
    SELECTED,
    TARGET_CHOICE,
    "timing_steps",
    "timing_warmup",
    "timing_processes",
    "race_rounds",
    "race_steps",
    "compare_sources",
    "compare_links",
    "library_name",
)
KEPT_WIDGET_PREFIXES = ("option::", "size_preset::", "op_")  # op_: the Arrays page (ui/op_state.py)
# Each kept widget is drawn with ``persist_state=ACROSS_PAGES``: Streamlit (1.67) then keeps its value itself when the
# widget is stale at a page switch, before the new page's script can write anything back (``keep_widgets_across_pages``).
ACROSS_PAGES = "session"


def kept(key: str) -> bool:
    """Whether the widget under ``key`` keeps its value across pages (``KEPT_WIDGETS``, ``KEPT_WIDGET_PREFIXES``)."""
    return key in KEPT_WIDGETS or key.startswith(KEPT_WIDGET_PREFIXES)


def option_key(model: str, field: str) -> str:
    return f"option::{model}::{field}"


def ensure_initialised(initial: Callable[[], Layout] = seed_layout) -> None:
    """On a session's first run, fill the widgets from ``initial()`` (the link's layout, or the seed)."""
    if NAME not in st.session_state:
        load_layout(initial(), keep_selection=True)


def keep_widgets_across_pages(page: str) -> None:
    """Carry what the user typed over to ``page``; call before any widget is drawn.

    A widget's identity includes the page that draws it, so on a page switch Streamlit
    drops the value of every widget the old page drew, even when the new page draws one
    with the same key. Writing each value back makes it the session's own, which the new
    page's widget then starts from ("Working with widgets in multipage apps", option 3).
    This also keeps the options of a model that is not selected right now. The rules
    editor is carried by ``keep_rules_edits``.

    The write-back runs only once the new page's script runs. Streamlit may drop a stale widget's
    value before that, on the switch itself (its ScriptRunner clears the widgets the switching
    rerun does not name): the session then came to Compare without its layout's name, mesh and
    model, and loaded the seed (seen in a whole-suite run of tests/browser/test_nnx.py). So each
    kept widget is also drawn with ``persist_state=ACROSS_PAGES``, which Streamlit honours there.
    """
    state = st.session_state
    for key in list(state.keys()):
        if kept(key):
            state[key] = state[key]


def keep_rules_edits(page: str, mesh_axes: list[str]) -> None:
    """Rebuild the rules table from the rows it showed last when the editor is about to become a new widget.

    The editor's edits live in its own widget state, which cannot be written back, and
    its identity includes the page drawing it and the mesh axes its column offers: on a
    page switch or an axis rename Streamlit would start a new editor from the base rows
    and the edits made so far would be lost.
    """
    state = st.session_state
    identity = [page, list(mesh_axes)]
    if state.get(RULES_EDITOR) not in (None, identity) and RULES_SHOWN in state:
        set_rules(state[RULES_SHOWN])
    state[RULES_EDITOR] = identity


def load_layout(layout: Layout, keep_selection: bool = False) -> None:
    """Replace the whole layout in every widget: name, mesh, rules, model and options, target.

    Nothing of the previous layout survives: the model's options not in ``layout`` go back
    to their defaults, the rules table's remembered edits are replaced (a new mesh would
    otherwise restore the old rows), and the selected array is forgotten unless
    ``keep_selection`` (a link that names one). The address bar follows on the next run.
    """
    state = st.session_state
    state[NAME] = layout.name
    state[MESH_SHAPE] = ", ".join(str(s) for s in layout.mesh.shape)
    state[MESH_AXES] = ", ".join(layout.mesh.axes)
    state[MESH_EXPLICIT] = [axis for axis, kind in zip(layout.mesh.axes, layout.mesh.types) if kind == "explicit"]
    state[MESH_DCN] = ", ".join(str(count) for count in layout.mesh.dcn) if layout.mesh.dcn is not None else ""
    rules = [[r.logical, list(r.mesh_axes)] for r in layout.rules]
    set_rules(rules, model=layout.model.name)
    state[RULES_SHOWN] = rules
    state.pop(RULES_EDITOR, None)
    state[MODEL] = layout.model.name
    if is_factory(layout.model.name):
        state[FACTORY_OPTIONS] = json.dumps(layout.model.options)
    elif layout.model.name == MAXTEXT:
        state[MAXTEXT_KEYS] = "\n".join(f"{key}={value}" for key, value in layout.model.options.items())
    elif layout.model.name == STEP:
        state[STEP_FACTORY] = layout.model.options.get("factory", "")
        state[FACTORY_OPTIONS] = json.dumps({k: v for k, v in layout.model.options.items() if k != "factory"})
    else:
        prefix = option_key(layout.model.name, "")
        for key in [k for k in state.keys() if k.startswith(prefix)]:
            del state[key]  # the sidebar writes the defaults back for options the layout leaves out
        for field, value in layout.model.options.items():
            state[option_key(layout.model.name, field)] = value
    set_target(layout.target)
    state.pop(PRESET_NOTES, None)
    if not keep_selection:
        state.pop(SELECTED, None)
    state[LAST_VALID] = layout.to_dict()
    state[LOADED] = layout.to_dict()


def open_layout(layout: Layout, target: str | None) -> None:
    """Load ``layout`` for ``target`` into every widget (a button's ``on_click``: a lever's layout on the Layout page)."""
    load_layout(layout.model_copy(update={"target": target}))


def make_axes_explicit() -> None:
    """Every axis of the sidebar's mesh Explicit (the button offered when a model needs Explicit axes)."""
    st.session_state[MESH_EXPLICIT] = parse_names(st.session_state.get(MESH_AXES, ""))


def make_axes_auto() -> None:
    """Every axis of the sidebar's mesh Auto (the button offered when a model is refused on Explicit axes)."""
    st.session_state[MESH_EXPLICIT] = []


def open_example() -> None:
    """Load the example layout picked in the sidebar's Examples (its callback), then clear the pick."""
    from explorer.analysis.presets import example_layout

    title = st.session_state.get(EXAMPLE)
    st.session_state[EXAMPLE] = None  # set, not dropped: the browser's selectbox shows the placeholder again
    if title:
        load_layout(example_layout(title))


def set_target(name: str | None) -> None:
    """Point the sidebar's Target at ``name`` (None: this process's devices); any name: the box takes typed ones."""
    st.session_state[TARGET_CHOICE] = TARGET_HERE if name is None else name


def chosen_target() -> str | None:
    """The name of the target the sidebar's Target section holds (None: this process's devices), as typed."""
    choice = st.session_state.get(TARGET_CHOICE)
    return None if choice in (None, TARGET_HERE) else choice


def edited_since_loaded(layout: Layout) -> bool:
    """True when ``layout`` keeps the loaded layout's name but differs from it in mesh, rules or model.

    Choosing another target is planning the same layout elsewhere, not editing it.
    """
    loaded = st.session_state.get(LOADED)
    if loaded is None or loaded.get("name") != layout.name:
        return False

    def same(data: dict) -> dict:
        return {key: value for key, value in data.items() if key not in ("name", "target")}

    return same(layout.to_dict()) != same(loaded)


EDITED = " (edited)"


def as_shared(layout: Layout) -> Layout:
    """``layout`` as the Share section offers it: edited since it was loaded, its name says so ("seed-2x4 (edited)"), so
    that whoever opens the link or the file does not take it for the layout of that name."""
    if not edited_since_loaded(layout) or layout.name.endswith(EDITED):
        return layout
    return layout.model_copy(update={"name": layout.name[: 120 - len(EDITED)] + EDITED})


def set_rules(rules: list[list[Any]], model: str | None = None) -> None:
    """Replace the rules table (a new editor key, so the editor starts from these rows).

    ``model``: the model these rules were written for (a load or a preset); the sidebar
    offers the current model's rules when it differs.
    """
    st.session_state[RULES] = [[logical, list(axes)] for logical, axes in rules]
    st.session_state[RULES_VERSION] = st.session_state.get(RULES_VERSION, 0) + 1
    if model is not None:
        st.session_state[RULES_MODEL] = model


def parse_list(text: str) -> list[Any]:
    """``"2, 4"``, ``"2x4"`` or ``"[2, 4]"`` (as the file format and the messages write it) -> ``[2, 4]``; items that
    are not integers stay strings for the validator to name."""
    text = text.strip()
    if len(text) >= 2 and (text[0], text[-1]) in (("[", "]"), ("(", ")")):
        text = text[1:-1]
    # An x between sizes separates them, also beside a word that is not a size ("2 x four" is [2, "four"], so the message
    # names "four", not the "x"); a lone "x" at an end ("3x", "2, x") stays, for the message to name.
    text = re.sub(r"(?<=\d)\s*[x×]\s*(?=\S)|(?<=\S)\s*[x×]\s*(?=[-+]?\d)|\s+[x×]\s+", ",", text.strip())
    items = [item for item in re.split(r"[,\s]+", text) if item]
    return [int(item) if re.fullmatch(r"-?\d{1,30}", item) else item for item in items]


def parse_names(text: str) -> list[str]:
    return [item.strip() for item in re.split(r"[,\s]+", text.strip()) if item.strip()]


def model_options(model: str) -> dict[str, Any]:
    if model not in MODELS:
        return {}
    return {
        field: st.session_state[option_key(model, field)]
        for field in MODELS[model].options.model_fields
        if option_key(model, field) in st.session_state
    }
