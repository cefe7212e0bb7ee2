"""The Layout page, the app's default page.

Pick a mesh, rules and a model in the sidebar; see how every array is sharded.
"""

from explorer import devices

devices.configure()  # before anything starts a JAX backend

import streamlit as st  # noqa: E402

from ui import report_view  # noqa: E402
from ui.current import current_layout  # noqa: E402

st.set_page_config(page_title="Partition Explorer", page_icon="🧩", layout="wide", initial_sidebar_state=440)
st.title("Partition Explorer")
report_view.render(current_layout("layout").report)
