"""Arrays page: single arrays on a mesh, an expression over them, the sharding XLA chooses, and a live timing.

The JAX guide "Distributed arrays and automatic parallelization" in the app: computation
follows sharding, a row- by column-sharded matmul, with_sharding_constraint, and the
sharded matmul timed against one device.

Thin: reads the widgets, calls ``explorer.ops`` (through ``ui.arrays_view``), renders.
"""

import streamlit as st

from ui import arrays_view

st.set_page_config(page_title="Arrays · Partition Explorer", page_icon="🔢")
st.title("Arrays: computation follows sharding")
arrays_view.open_session()
share_slot = arrays_view.sidebar_inputs()
arrays_view.op_inputs()
op, analysis = arrays_view.analyzed_op()  # where the op is invalid: the error and the arrays valid alone, then the page stops
arrays_view.share_section(share_slot, op)
arrays_view.show_inputs(op, analysis)
arrays_view.show_output(analysis)
arrays_view.timing_section(op, analysis)
