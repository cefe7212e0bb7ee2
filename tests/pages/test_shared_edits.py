"""AppTest: a layout edited since it was loaded is shared under a name that says so (issue 45 item 13)."""

from streamlit.testing.v1 import AppTest

from explorer.sharing.share import layout_from_link
from tests.pages.test_app import edit_rules
from tests.paths import APP


def test_a_link_to_an_edited_layout_says_it_was_edited_and_an_unedited_one_keeps_its_name():
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception and at.query_params["name"] == "seed-2x4"
    edit_rules(at, [["batch", ["data"]], ["hidden", ["data"]]])
    assert not at.exception
    assert at.query_params["name"] == "seed-2x4 (edited)"
    shared = [c.value for c in at.sidebar.code if "name=" in c.value]
    assert shared and layout_from_link(shared[0]).name == "seed-2x4 (edited)"  # the readable link too
    assert at.text_input(key="layout_name").value == "seed-2x4"  # the sidebar's name is the user's, untouched
    edit_rules(at, [["batch", ["data"]], ["hidden", ["model"]]])  # back to the seed: not edited any more
    assert at.query_params["name"] == "seed-2x4"
