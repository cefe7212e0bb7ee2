"""The Advisor page: which mesh and rules for the sidebar's model on the sidebar's target (a TPU slice or a GPU cluster).

Thin: reads the widgets, calls ``explorer.advisor`` (through ``ui.advisor_view``), renders.
"""

import streamlit as st

from explorer.analysis.analyzer import logical_names
from ui import advisor_view, turnstile
from ui.current import current_layout
from ui.fields import whole_number

st.set_page_config(page_title="Advisor · Partition Explorer", page_icon="🧭")
st.title("Layout advisor")
current = current_layout("advisor")
st.markdown(
    "Ranks meshes and rules for the sidebar's model on its **Target**. Your own layout is ranked too. "
    "**Stage 1** estimates every candidate. **Stage 2** compiles the best few with XLA. "
    "The predicted step sets the order."
)
with st.expander("What is searched, and how"):
    st.markdown(
        "- **Candidates**: every factorization of the slice's (or the GPU cluster's) devices over data, FSDP and tensor axes, "
        "plus sequence and expert where the model has such names; rules written from the model's logical names by role.\n"
        "- **Stage 1**: the exact state per device and an estimated step. Each collective rides the links its mesh axis lies on: "
        "the torus's rings and lines, or a GPU host's NVLink and the network between hosts.\n"
        "- **On a GPU cluster** a tensor axis no larger than a host stays inside one; a larger one spans hosts and pays for the network.\n"
        "- **Stage 2**: compiles the best estimates for the target with XLA, each next one chosen by the estimate calibrated on "
        "the compiles so far, and says how far each compile was from its estimate.\n"
        "- **Your own layout** is ranked where it has the target's device count."
    )
if current.target is None:
    st.info(
        "Choose a **Target** in the sidebar: the advisor plans for a TPU slice (e.g. v5p-128) or an NVIDIA GPU cluster (e.g. h100:8x8)."
    )
    st.stop()
roles = advisor_view.roles_editor(logical_names(current.layout.model))
# Two settings a row, and Stop beside the button: at 768 px the button, Stop and the progress under them stay in view.
budget, workers = st.columns(2)
settings_messages = st.container(key="advisor_settings_messages")  # a value out of range, named (under the settings)
compiles = whole_number(
    budget,
    "Candidates to compile (stage 2)",
    "advisor_compiles",
    0,
    16,
    3,
    settings_messages,
    help="The shortlist's best, plus your own layout. 0: stage 1 only.",
)
with workers:
    turnstile.workers_setting("advisor_workers")
left, right = st.columns(2)
shortcut = left.selectbox(
    "Depth shortcut",
    ("auto", "on", "off"),
    key="advisor_shortcut",
    help="on: compile each candidate at depths 2 and 4, extrapolate to the model's depth (labelled extrapolated), then compile "
    "the best in full. auto: where it saves time (layers not scanned; a scanned model compiles in about the same time at any depth).",
)
depth_option = right.text_input("Depth option (blank: a known name such as layers)", key="advisor_depth_option").strip() or None
refused = compiles is None or advisor_view.depth_option_refused(current.layout, depth_option, st.container(key="advisor_depth_messages"))
buttons = st.container(horizontal=True)
if buttons.button(f"Advise for {current.target.name}", type="primary", key="advisor_run", disabled=refused) and not refused:
    advisor_view.run(
        current.layout, current.target, int(compiles), roles, {"auto": None, "on": True, "off": False}[shortcut], depth_option, buttons
    )
search = advisor_view.last_search()
if search is not None:
    advisor_view.show(search, current.layout)
