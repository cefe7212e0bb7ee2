"""Partition Explorer, the Layout page: ``streamlit run app.py``.

Pick a mesh, rules and a model in the sidebar; see how every array is sharded.
"""

from explorer import devices

devices.configure()  # before anything starts a JAX backend

import streamlit as st  # noqa: E402

from explorer.analysis import analyze  # noqa: E402
from explorer.errors import ExplorerError  # noqa: E402
from explorer.layout import parse_layout  # noqa: E402
from ui import report_view, sidebar, state  # noqa: E402

st.set_page_config(page_title="Partition Explorer", page_icon="🧩", layout="wide", initial_sidebar_state=440)
st.title("Partition Explorer")

draft, slots = sidebar.render()
try:
    layout = parse_layout(draft)
    report = analyze(layout)
    st.session_state[state.LAST_VALID] = layout.to_dict()
except ExplorerError as error:
    slots.for_field(error.field).error(str(error))
    st.warning(
        f"The layout in the sidebar is not valid ({error.field}); below is the last valid one. "
        "Your edits are kept: fix the field marked in red."
    )
    report = analyze(parse_layout(st.session_state[state.LAST_VALID]))

indivisible = [w for w in report.warnings if w.code == "indivisible"]
if indivisible:
    slots.rules.error(f"{len(indivisible)} sharded dimension(s) do not divide evenly, e.g. {indivisible[0].message}")
if report.mesh.abstract:
    slots.mesh.info(
        f"Planned mesh: {report.mesh.size:,} devices, more than this process has. Shapes, bytes and tiles come "
        "from an AbstractMesh with hypothetical device ids 0..N-1 in mesh order; it cannot be timed here."
    )
report_view.render(report)
