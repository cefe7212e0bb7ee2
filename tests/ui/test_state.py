"""ui/state.py: the sidebar's text fields read into the file format's lists."""

import pytest

from ui.state import parse_list, parse_names


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2, 4", [2, 4]),
        ("2x4", [2, 4]),
        ("16 × 16", [16, 16]),
        ("[2, 1]", [2, 1]),  # as the file format and the mesh.dcn messages write it
        ("(4, 2)", [4, 2]),
        ("", []),
        ("2, four", [2, "four"]),  # left for the validator to name
        ("[2", ["[2"]),
        ("2 x four", [2, "four"]),  # issue 45 item 8: the message named the 'x', not 'four'
        ("2x four", [2, "four"]),
        ("two x 4", ["two", 4]),
        ("two x four", ["two", "four"]),
        ("3x", ["3x"]),  # a lone x at an end stays, for the message to name
        ("2, x", [2, "x"]),
    ],
)
def test_parse_list(text, expected):
    assert parse_list(text) == expected


def test_parse_names():
    assert parse_names(" data, model  fsdp ") == ["data", "model", "fsdp"]
