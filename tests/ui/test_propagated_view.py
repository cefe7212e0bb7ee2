"""The Layout page's Auto-axes view of every value's sharding after propagation, on the Flax guide's layout."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest


def page():
    import streamlit as st

    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout
    from ui import propagated_view

    data = st.session_state.get("layout_data")
    propagated_view.render(analyze(parse_layout(data)))


def _app(seed_dict) -> AppTest:
    at = AppTest.from_function(page, default_timeout=240)
    at.session_state["layout_data"] = seed_dict
    return at.run()


def test_the_values_come_on_demand_with_each_axis_origin(seed_dict):
    at = _app(seed_dict)
    assert not at.exception and not at.dataframe  # nothing lowered until asked
    at.button(key="propagated_button").click().run()
    assert not at.exception and not at.error
    frame = next(d.value for d in at.dataframe if "origin of each axis" in d.value.columns)
    assert set(frame["pass"]) == {"forward", "backward"}
    # The guide's MLP: its hidden activations are sharded over model by its constraint, the batch over data from the input.
    sharded = frame[frame["sharding"] != "(" + ", ".join("-" * 1 for _ in range(2)) + ")"]
    assert any("model ← constraint at mlp.py:" in o for o in sharded["origin of each axis"])
    assert any(re.search(r"data ← input inputs\[0\]", o) for o in sharded["origin of each axis"])
    assert all(w.startswith("mlp.py:") or w == "(no line of the model's code)" for w in frame["where"])
    at.text_input(key="propagated_search").input("backward").run()
    assert not at.exception


def test_a_planned_mesh_says_why_nothing_is_read(seed_dict):
    seed_dict["mesh"] = {"shape": [4, 4], "axes": ["data", "model"]}
    at = _app(seed_dict)
    assert not at.exception and not at.button
    assert any("planned mesh" in c.value for c in at.caption)
