"""The Layout page, the app's default page (app.py has configured the devices before any page runs).

Pick a mesh, rules and a model in the sidebar; see how every array is sharded.
"""

import streamlit as st

from explorer.target_text import judged_peak_note
from ui import communication_view, report_view, target_view
from ui.current import current_layout
from ui.state import TIMING_RESULTS, edited_since_loaded

st.set_page_config(page_title="Partition Explorer", page_icon="🧩")  # layout and sidebar: app.py
st.title("Partition Explorer")
current = current_layout("layout")
result = target_view.render(current.layout, current.target, current.report)
timed = st.session_state.get(TIMING_RESULTS, {}).get(current.layout.key)
if result:  # XLA's peak is the headline wherever a compiled program exists: the target's (the figure its verdict judges)
    peak = (
        f"XLA's peak for {result.target.name}, the figure the verdict above judges. {judged_peak_note(result) or ''}",
        result.judged_peak_bytes,
    )
elif timed is not None and "peak_bytes" in timed.memory:  # else the Timing page's
    peak = (
        f"memory_analysis() of the train step timed on this process's {timed.devices} {timed.platform} devices (Timing page)",
        timed.memory["peak_bytes"],
    )
else:
    peak = None
if result:  # which lines of the model move data: the target's program, else the Timing page's
    communication_view.render(result.traced(), key="target", origin=f"{result.target.name} compile")
elif timed is not None:
    communication_view.render(timed.sources, key="timed", origin="the Timing page's run")
report_view.render(current.report, compiled_peak=peak, edited=edited_since_loaded(current.layout))
