"""Partition Explorer: ``streamlit run app.py``.

The entry point names the pages (so the navigation says "Layout", not the file name)
and runs the one the address asks for. Each page draws the shared sidebar itself.
"""

from explorer import devices

devices.configure()  # before anything starts a JAX backend

import streamlit as st  # noqa: E402

# Before the navigation draws the sidebar, so that the sidebar mounts at this width; each page sets its own title.
st.set_page_config(page_title="Partition Explorer", page_icon="🧩", layout="wide", initial_sidebar_state=440)

PAGES = [
    st.Page("pages/0_Layout.py", title="Layout", icon=":material/grid_view:", default=True),
    st.Page("pages/1_Timing.py", title="Timing", icon=":material/timer:", url_path="Timing"),
    st.Page("pages/2_Compare.py", title="Compare", icon=":material/compare_arrows:", url_path="Compare"),
]

st.navigation(PAGES).run()
