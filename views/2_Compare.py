"""Compare page: two or more layouts side by side, and a timing race that holds on a noisy machine.

Thin: reads the widgets, calls ``explorer.timing.compare`` (through ``ui.compare_view``), renders.
"""

import streamlit as st

from explorer.analysis.analyzer import analyze
from ui import compare_view, target_view
from ui.current import current_layout

st.set_page_config(page_title="Compare · Partition Explorer", page_icon="⚖️")
st.title("Compare layouts")
current = current_layout("compare")
picked = compare_view.chosen_layouts(current.layout)
if len(picked) < 2:
    st.info("Pick at least two layouts: the current one, team-library entries, files or links.")
else:  # not st.stop(): a full run, so Streamlit forgets the widgets no longer drawn
    labels = [label for label, _ in picked]
    layouts = [layout for _, layout in picked]
    reports = [analyze(layout) for layout in layouts]
    compare_view.show_differences(labels, reports)
    compare_view.show_memory(labels, reports)
    target_view.compare_section(labels, layouts, current.target)
    compare_view.show_warnings(labels, reports)
    timings_slot = st.container()  # filled after the race, so a race just run shows in it
    compare_view.race_section(labels, layouts, reports, current.target)
    with timings_slot:
        compare_view.show_timings(labels, layouts)
