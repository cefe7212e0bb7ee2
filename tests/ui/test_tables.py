"""Tables that fit a laptop: the decision's columns at their widths, every other one hidden but offered."""

import streamlit as st

from ui.tables import column_config


def test_the_columns_not_shown_are_hidden_not_dropped_and_settings_add_to_the_widths():
    config = column_config(
        ["path", "array", "spec", "kind"],
        {"array": 270, "spec": 140},
        labels={"spec": "the spec"},
        config={"array": {"help": "the whole path: Show/hide columns"}, "spec": st.column_config.TextColumn(max_chars=9)},
    )
    assert config["array"] == {"label": "array", "width": 270, "help": "the whole path: Show/hide columns"}
    assert config["spec"]["label"] == "the spec" and config["spec"]["width"] == 140  # unset fields of a column_config kept out
    assert config["path"] == {"label": "path", "hidden": True} and config["kind"] == {"label": "kind", "hidden": True}
