"""AppTest: the sidebar's Share section draws its "Copy as code" script only while the expander is open."""

import ast

from streamlit.testing.v1 import AppTest

from tests.paths import APP
from ui.share_panel import COPY_AS_CODE


def scripts(at: AppTest) -> list[str]:
    return [c.value for c in at.sidebar.code if c.language == "python"]


def test_copy_as_code_is_drawn_only_while_open_and_is_a_whole_script():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception and scripts(at) == []  # collapsed: nothing highlighted on each page load
    at.session_state[COPY_AS_CODE] = True  # the user opens it
    at.run()
    assert not at.exception
    [script] = scripts(at)
    assert "seed-2x4" in script and ast.parse(script)  # the layout's own script, Python that parses
    assert any("logical_axis_rules" in c.value for c in at.sidebar.code if c.language == "yaml")
