"""The one error type: a message naming the field and the value (quoted, shortened), a ValueError, one line to quote."""

from __future__ import annotations

import pytest

from explorer.errors import MAX_PROBLEM_CHARACTERS, SHOWN_CHARACTERS, ExplorerError, NeedsExplicitAxes, first_line, shown
from explorer.layout import parse_layout


def test_the_message_names_the_field_then_the_value_as_python_writes_it():
    error = ExplorerError("mesh.shape", [2, 0], "has a size that is not positive")
    assert str(error) == "mesh.shape: [2, 0] has a size that is not positive"
    assert (error.field, error.value, error.problem) == ("mesh.shape", [2, 0], "has a size that is not positive")
    assert isinstance(error, ValueError)
    # A string value is quoted, so a value with spaces or Markdown reads as the value it is.
    assert str(ExplorerError("target", "**v9** 8", "is not a slice")) == "target: '**v9** 8' is not a slice"


def test_a_huge_value_or_problem_is_shortened_never_echoed_whole():
    error = ExplorerError("name", "x" * 10_000_000, "is too long")
    value = str(error).removeprefix("name: ").removesuffix(" is too long")
    assert len(value) == SHOWN_CHARACTERS and value == shown("x" * 10_000_000) and value.endswith("...")
    problem = str(ExplorerError("f", 1, "y" * 5_000)).removeprefix("f: 1 ")
    assert len(problem) == MAX_PROBLEM_CHARACTERS and problem.endswith("...")
    assert shown("short") == "'short'"


def test_the_core_raises_it_for_bad_input_naming_the_field():
    with pytest.raises(ExplorerError) as raised:
        parse_layout({"name": "bad", "mesh": {"shape": [2, 4], "axes": ["data", "data"]}, "rules": [], "model": {"name": "mlp"}})
    assert raised.value.field.startswith("mesh") and "data" in str(raised.value)
    assert issubclass(NeedsExplicitAxes, ExplorerError)  # the app's button is one kind of the same error


def test_first_line_quotes_one_line_of_an_exception_or_its_type():
    assert first_line(RuntimeError("XLA refused\n  at frame 1\n  at frame 2")) == "XLA refused"
    assert first_line(RuntimeError("  \n")) == "RuntimeError"
    assert first_line(ValueError("z" * 600)) == "z" * 500


def test_check_between_names_the_field_and_the_value():
    from explorer.errors import ExplorerError, check_between

    assert check_between("Rounds", 5, 1, 50) == 5 and check_between("Rounds", 5.0, 1, 50) == 5
    for value in (0, 51, 2.5):
        with pytest.raises(ExplorerError) as caught:
            check_between("Rounds", value, 1, 50)
        assert str(caught.value) == f"Rounds: {value!r} must be a whole number from 1 to 50"
