"""Names are data: a hostile name round-trips as itself, never becomes code, Markdown, a link or an image."""

import ast
import copy
from urllib.parse import parse_qsl

import yaml
from streamlit.testing.v1 import AppTest

from explorer.sharing import library
from explorer.layout import SEED_LAYOUT, load_layout_bytes, parse_layout
from explorer.sharing.share import layout_to_params, layout_to_query, params_to_layout
from explorer.sharing.exports import maxtext_yaml, python_snippet
from explorer.text import markdown_literal
from tests.paths import APP

NAME = "x\nimport os; os.system('id')\n# ![t](http://127.0.0.1:9/x.png) [Click to re-authenticate](http://127.0.0.1:9/)"
RULE = "batch\r\nimport os\n![r](http://127.0.0.1:9/r.png)"
RAW_MARKDOWN = ("![t](", "![r](", "[Click to re-authenticate](")


def hostile_layout():
    data = copy.deepcopy(SEED_LAYOUT)
    data.update(name=NAME, rules=[[RULE, "data"], ["batch", "data"], ["hidden", "model"]])
    return parse_layout(data)


def test_a_hostile_name_round_trips_through_link_file_and_library_as_data(tmp_path, monkeypatch):
    layout = hostile_layout()
    assert layout.name == NAME and layout.rules[0].logical == RULE
    assert params_to_layout(dict(parse_qsl(layout_to_query(layout).lstrip("?")))) == layout
    assert load_layout_bytes(layout.to_json().encode()) == layout
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    library.save("hostile", layout)
    assert library.load("hostile").layout == layout


def _statements(snippet: str) -> list[str]:
    return [ast.dump(node, annotate_fields=False)[:30] for node in ast.parse(snippet).body]


def test_the_python_snippet_holds_names_only_as_string_literals():
    layout = hostile_layout()
    snippet = python_snippet(layout)
    tree = ast.parse(snippet)
    benign = python_snippet(parse_layout(SEED_LAYOUT))
    assert len(tree.body) == len(ast.parse(benign).body), "a name added or removed a statement"
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "os"]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "system"]
    assigned = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    assert ast.literal_eval(assigned["layout_name"]) == NAME
    assert ast.literal_eval(assigned["rules"])[0] == (RULE, "data")
    comments = [line for line in snippet.splitlines() if line.lstrip().startswith("#")]
    assert comments == [line for line in benign.splitlines() if line.lstrip().startswith("#")]


def test_the_yaml_snippet_holds_names_only_as_quoted_scalars():
    text = maxtext_yaml(hostile_layout())
    assert yaml.safe_load(text) == {
        "mesh_axes": ["data", "model"],
        "logical_axis_rules": [[RULE, "data"], ["batch", "data"], ["hidden", "model"]],
    }
    assert NAME.splitlines()[0] in text.splitlines()[0] and len(text.splitlines()) == 7


def test_markdown_literal_leaves_no_link_image_or_line_break():
    shown = markdown_literal(NAME)
    assert "\n" not in shown and not any(raw in shown for raw in RAW_MARKDOWN)
    assert shown.replace("\\", "") == NAME.replace("\n", " ")


def test_the_app_shows_a_hostile_link_as_text_everywhere():
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in layout_to_params(hostile_layout()).items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    assert at.session_state["layout_name"] == NAME
    rendered = [e.value for kind in ("markdown", "caption", "error", "warning", "info", "success") for e in getattr(at, kind)]
    assert any("never applies" in text or "no array" in text for text in rendered)  # the unused hostile rule is named
    leaked = [text for text in rendered if any(raw in text for raw in RAW_MARKDOWN)]
    assert not leaked, leaked
    code = [c.value for c in at.code if "layout_name" in c.value]
    assigned = {n.targets[0].id: n.value for n in ast.parse(code[0]).body if isinstance(n, ast.Assign)} if code else {}
    assert ast.literal_eval(assigned["layout_name"]) == NAME
