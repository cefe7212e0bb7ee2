"""AppTest: the sidebar's Share section holds the layout's "Copy as code" script and its rules as MaxText's YAML."""

import ast

from streamlit.testing.v1 import AppTest

from tests.paths import APP


def test_copy_as_code_is_the_layouts_whole_script_and_its_rules():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception
    [script] = [c.value for c in at.sidebar.code if c.language == "python"]
    assert "seed-2x4" in script and ast.parse(script)  # the layout's own script, Python that parses
    assert any("logical_axis_rules" in c.value for c in at.sidebar.code if c.language == "yaml")
