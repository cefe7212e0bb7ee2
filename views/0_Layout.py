"""The Layout page, the app's default page (app.py has configured the devices before any page runs).

Pick a mesh, rules and a model in the sidebar; see how every array is sharded.
"""

import streamlit as st

from ui import report_view
from ui.current import current_layout

st.set_page_config(page_title="Partition Explorer", page_icon="🧩")  # layout and sidebar: app.py
st.title("Partition Explorer")
report_view.render(current_layout("layout").report)
