"""Partition Explorer: ``streamlit run app.py``."""

from explorer import devices

devices.configure()

import streamlit as st  # noqa: E402

from explorer.analysis import analyze  # noqa: E402
from explorer.layout import seed_layout  # noqa: E402
from explorer.text import arrays_frame  # noqa: E402

st.set_page_config(page_title="Partition Explorer", layout="wide")
st.title("Partition Explorer")
st.dataframe(arrays_frame(analyze(seed_layout())), hide_index=True)
