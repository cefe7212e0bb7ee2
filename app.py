"""Partition Explorer: ``streamlit run app.py``.

The entry point names the pages (so the navigation says "Layout", not the file name)
and runs the one the address asks for. Each page draws the shared sidebar itself.
"""

import streamlit as st

from explorer.hardware import devices
from explorer.errors import ExplorerError

# First of all, so the sidebar mounts at this width; each page sets its own title later. 320 px holds the
# sidebar's widgets and rules editor whole and leaves a 1024 px screen's main area 700 px for the tables.
SIDEBAR_WIDTH = 320
st.set_page_config(page_title="Partition Explorer", page_icon="🧩", layout="wide", initial_sidebar_state=SIDEBAR_WIDTH)
# The wide layout's 5 rem margins took 160 px of that main area: 2 rem each side is enough.
st.html("<style>[data-testid='stMainBlockContainer'] {padding-left: 2rem; padding-right: 2rem;}</style>")

try:
    devices.configure()  # before anything starts a JAX backend
except ExplorerError as error:  # a bad EXPLORER_CPU_DEVICES: say so instead of a traceback
    st.error(f"The app cannot start: {error}. Fix the environment variable and restart the app.")
    st.stop()

from ui import live_timing, sidebar, turnstile  # noqa: E402 (after the devices are configured)

st.html(sidebar.ESCAPE_KEEPS_TEXT, unsafe_allow_javascript=True)  # Escape keeps a rule's typed name
live_timing.stop_running()  # a run of any page (an edit, another page) ends this session's timing after its current step
st.html(live_timing.ONE_STOP)  # where a page shows its own Stop, Streamlit's (which would leave the page frozen) is hidden
turnstile.cluster_notice()  # EXPLORER_CLUSTER: the server's compiles on a Ray cluster (joined once per server)

PAGES = [
    st.Page("views/0_Layout.py", title="Layout", icon=":material/grid_view:", default=True),
    st.Page("views/1_Timing.py", title="Timing", icon=":material/timer:", url_path="Timing"),
    st.Page("views/2_Compare.py", title="Compare", icon=":material/compare_arrows:", url_path="Compare"),
    st.Page("views/3_Arrays.py", title="Arrays", icon=":material/view_module:", url_path="Arrays"),
    st.Page("views/4_Advisor.py", title="Advisor", icon=":material/explore:", url_path="Advisor"),
]

st.navigation(PAGES).run()
