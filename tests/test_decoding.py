"""The one decoding path: every hostile file, upload or link becomes one ExplorerError, never a traceback.

Each class below was a crash or a silent misreading before (issue 10): integers over
Python's 4,300-digit cap, nesting past the recursion limit, text that is not UTF-8,
NaN and Infinity, oversized input, huge names echoed in full, an axis name with a
trailing newline, links longer than the decoder accepts.
"""

import copy
import json
import re

import pytest

from explorer.__main__ import main
from explorer.errors import ExplorerError
from explorer.layout import MAX_FILE_BYTES, SEED_LAYOUT, load_layout_bytes, parse_layout
from explorer.sharing.share import MAX_PARAM_LENGTH, layout_to_query, params_to_dict, params_to_layout
from tests.paths import APP

SEED_TEXT = json.dumps(SEED_LAYOUT)


def with_value(path: str, value_json: str) -> str:
    """The seed layout's JSON text with the value at ``path`` (dotted, e.g. ``mesh.shape``) replaced by raw JSON."""
    data = copy.deepcopy(SEED_LAYOUT)
    marker = "\u0000MARKER\u0000"
    node = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = marker
    return json.dumps(data).replace(json.dumps(marker), value_json)


HOSTILE_FILES = {
    "integer over 4,300 digits": (with_value("model.options.batch", "9" * 5000).encode(), "digits"),
    "integer of 31 digits": (with_value("model.options.batch", "1" * 31).encode(), "digits"),
    "nesting 100,000 deep": (("[" * 100_000 + "]" * 100_000).encode(), "nested deeper"),
    "nesting 900 deep in options": (with_value("model.options.batch", "[" * 900 + "]" * 900).encode(), "nested deeper"),
    "UTF-16 with a byte-order mark": (SEED_TEXT.encode("utf-16"), "UTF-16"),
    "UTF-16 without a byte-order mark": (SEED_TEXT.encode("utf-16-le"), "UTF-16"),
    "Latin-1": (with_value("name", '"caf\u00e9"').encode("latin-1"), "not UTF-8"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "binary"),
    "larger than the limit": (b" " * (MAX_FILE_BYTES + 1) + SEED_TEXT.encode(), "larger than"),
    "NaN": (with_value("model.options.batch", "NaN").encode(), "NaN"),
    "-Infinity": (with_value("mesh.shape", "[2, -Infinity]").encode(), "NaN and Infinity"),
    "a float that overflows": (with_value("model.options.batch", "1e999").encode(), "too large"),
    "a lone surrogate": (with_value("name", '"\\ud800"').encode(), "not Unicode"),
    "an axis name with a trailing newline": (with_value("mesh.axes", '["data\\n", "model"]').encode(), "mesh.axes[0]"),
    "a 5,000-character mesh axis in a rule": (with_value("rules", json.dumps([["batch", "x" * 5000]])).encode(), "lacks"),
    "not an object": (b"[1, 2, 3]", "not a JSON object"),
    "not JSON": (b"{mesh: 2x4}", "not valid JSON"),
}


@pytest.mark.parametrize("content,fragment", HOSTILE_FILES.values(), ids=HOSTILE_FILES.keys())
def test_hostile_file_is_one_explorer_error(content, fragment):
    with pytest.raises(ExplorerError, match=re.escape(fragment)) as refused:
        load_layout_bytes(content)
    assert len(str(refused.value)) < 600


@pytest.mark.parametrize("content,fragment", HOSTILE_FILES.values(), ids=HOSTILE_FILES.keys())
def test_hostile_file_exits_2_from_the_command_line(content, fragment, tmp_path, capsys):
    path = tmp_path / "hostile.json"
    path.write_bytes(content)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_utf8_byte_order_mark_is_accepted():
    assert load_layout_bytes(b"\xef\xbb\xbf" + SEED_TEXT.encode()).name == "seed-2x4"


def test_a_10_mb_field_name_is_echoed_as_80_characters():
    data = copy.deepcopy(SEED_LAYOUT)
    data["x" * 10_000_000] = 1
    with pytest.raises(ExplorerError) as refused:
        parse_layout(data)
    assert len(str(refused.value)) < 300 and "..." in str(refused.value)


def test_an_axis_name_with_a_trailing_newline_is_refused(seed_dict):
    seed_dict["mesh"]["axes"] = ["data", "model\n"]
    with pytest.raises(ExplorerError) as refused:
        parse_layout(seed_dict)
    assert refused.value.field == "mesh.axes[1]"


LINK = {"mesh": "2x4", "axes": "data,model", "model": "mlp"}


@pytest.mark.parametrize(
    "options,fragment",
    [
        ("batch:" + "9" * 5000, "digits"),
        ("batch:" + "[" * 5000, "nested deeper"),
        ("batch:1e999", "too large"),
        ("batch:%5BNaN%5D", "NaN"),
        ("batch:" + "x" * (MAX_PARAM_LENGTH + 1), "longer than"),
    ],
)
def test_hostile_link_options_are_one_explorer_error(options, fragment):
    with pytest.raises(ExplorerError, match=fragment):
        params_to_layout({**LINK, "options": options})


@pytest.mark.parametrize("word", ["NaN", "Infinity", "nan", "inf"])
def test_nan_and_infinity_in_a_link_are_words_never_floats(word):
    assert params_to_dict({**LINK, "options": f"mode:{word}"})["model"]["options"] == {"mode": word}


def test_string_options_nan_and_infinity_round_trip_through_a_link(seed_dict, monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.factory_module:make_model")
    seed_dict["model"] = {"name": "tests.factory_module:make_model", "options": {"a": "NaN", "b": "Infinity", "c": "true"}}
    layout = parse_layout(seed_dict)
    query = layout_to_query(layout).lstrip("?")
    from urllib.parse import parse_qsl

    assert params_to_layout(dict(parse_qsl(query))) == layout


def test_url_refuses_a_layout_whose_link_the_decoder_would_refuse(seed_dict, tmp_path, capsys):
    seed_dict["rules"] = [[f"logical_{i:05d}_" + "n" * 40, "data"] for i in range(500)]
    layout = parse_layout(seed_dict)  # a valid layout: 500 rules of 52 characters
    with pytest.raises(ExplorerError, match="limit for a link"):
        layout_to_query(layout)
    path = tmp_path / "many-rules.json"
    path.write_text(layout.to_json())
    assert main(["url", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "limit for a link" in captured.err


def test_hostile_sidebar_input_is_a_message_next_to_the_field():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.text_input(key="mesh_shape_text").input("9" * 5000 + ", 4").run()
    assert not at.exception
    assert any("mesh.shape\\[0\\]" in e.value and len(e.value) < 400 for e in at.sidebar.error)
    at.text_input(key="mesh_shape_text").input("2, 4").run()
    at.text_input(key="layout_name").input("n" * 1_000_000).run()
    assert not at.exception
    assert any("name\\: 'nnn" in e.value and len(e.value) < 400 for e in at.sidebar.error)
