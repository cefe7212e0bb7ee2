"""The Layout page, the app's default page (app.py has configured the devices before any page runs).

Pick a mesh, rules and a model in the sidebar; see how every array is sharded.
"""

import streamlit as st

from ui import report_view, target_view
from ui.current import current_layout

st.set_page_config(page_title="Partition Explorer", page_icon="🧩")  # layout and sidebar: app.py
st.title("Partition Explorer")
current = current_layout("layout")
result = target_view.render(current.layout, current.target)
peak = (result["target"]["name"], result["memory"]["peak_bytes"]) if result else None
report_view.render(current.report, compiled_peak=peak)
