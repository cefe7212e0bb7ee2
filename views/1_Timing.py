"""Timing page: compile and time the layout's jitted train step live, and show what XLA compiled.

Thin: reads the widgets, calls ``explorer.timing`` (through ``ui.timing_view``), renders.
"""

import streamlit as st

from ui import timing_view
from ui.current import current_layout

st.set_page_config(page_title="Timing · Partition Explorer", page_icon="⏱️")
st.title("Time the train step")
current = current_layout("timing")
timing_view.intro(current.layout, current.report)
can_time = timing_view.timeable(current.report)
steps, warmup, processes, start = timing_view.controls(current.report, can_time)
if can_time:
    timing_view.collect_stopped()  # a timing that ended, or that this run stopped: its figures, before the queue's length is said
    timing_view.host_note(current.report)
    if start:
        timing_view.time_now(current.layout, steps, warmup, processes)
    timing_view.show_last(current.layout.key)
