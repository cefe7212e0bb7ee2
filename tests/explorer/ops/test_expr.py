"""The expression grammar: what it computes equals jnp, and every class of refusal names the offending piece."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from explorer.errors import ExplorerError
from explorer.ops.expr import FUNCTIONS, parse_expr
from tests.paths import ROOT

A = jnp.arange(12.0).reshape(3, 4) / 7
B = jnp.arange(12.0).reshape(4, 3) / 5


@pytest.mark.parametrize(
    "text,expected",
    [
        ("jnp.dot(a, b)", lambda: jnp.dot(A, B)),
        ("a @ b + 1", lambda: A @ B + 1),
        ("-a.T * 2.5 - b / 3", lambda: -A.T * 2.5 - B / 3),
        ("jnp.sum(a, axis=0) + jnp.mean(a, 0) + jnp.max(a, axis=(0,))", lambda: jnp.sum(A, 0) + jnp.mean(A, 0) + jnp.max(A, 0)),
        ("jnp.reshape(a, (2, -1))", lambda: A.reshape(2, -1)),
        ("jnp.transpose(a, (1, 0)) + jnp.transpose(jnp.transpose(b))", lambda: A.T + B),
        (
            "jax.nn.relu(jnp.sin(a) - jnp.cos(a)) * jnp.exp(-a) + jnp.tanh(a)",
            lambda: jax.nn.relu(jnp.sin(A) - jnp.cos(A)) * jnp.exp(-A) + jnp.tanh(A),
        ),
        ("jnp.matmul(a, b)", lambda: A @ B),
        ("jnp.sum(a, axis=None)", lambda: jnp.sum(A)),
    ],
)
def test_allowed_expressions_compute_what_jnp_computes(text, expected):
    program = parse_expr(text, ("a", "b"))
    np.testing.assert_allclose(program({"a": A, "b": B}), expected(), rtol=1e-6)


REFUSED = {
    "attribute access": ("a.real", "'a.real' is refused: the only attribute allowed is .T"),
    "dunder attribute": ("jnp.sin.__globals__", "'jnp.sin.__globals__' is refused: the only attribute"),
    "__import__": ("__import__('os').system('true')", "'__import__' is refused: not an allowed function"),
    "bare __import__": ("__import__('os')", "'__import__' is refused: not an allowed function"),
    "lambda": ("(lambda: a)()", "'lambda: a' is refused: lambdas"),
    "calling an array": ("(a + b)(1)", "'\\(a \\+ b\\)'|'a \\+ b' is refused: not an allowed function"),
    "subscript": ("a[0]", "'a\\[0\\]' is refused: subscripts"),
    "unknown name": ("a + c", "'c' is refused: unknown name; the arrays are: a, b"),
    "module name": ("jnp", "'jnp' is refused: unknown name"),
    "unknown function": ("jnp.linalg.inv(a)", "'jnp.linalg.inv' is refused: not an allowed function"),
    "numpy function": ("np.sin(a)", "'np.sin' is refused: not an allowed function"),
    "uncalled function": ("jnp.sin", "'jnp.sin' is refused: a function must be called"),
    "keyword trick": ("jnp.sum(a, **{'axis': 0})", "is refused: \\*\\*keyword arguments"),
    "unknown keyword": ("jnp.sum(a, where=a)", "'where=a' is refused: jnp.sum accepts the keyword\\(s\\): axis="),
    "keyword on a function without one": ("jnp.sin(a, out=a)", "'out=a' is refused: jnp.sin accepts the keyword\\(s\\): none"),
    "starred": ("jnp.dot(*a)", "'\\*a' is refused: \\*arguments"),
    "non-literal axis": ("jnp.sum(a, axis=b)", "'b' is refused: jnp.sum's axis must be a literal integer"),
    "missing shape": ("jnp.reshape(a)", "needs a literal shape"),
    "string literal": ("a + 'x'", "\"'x'\" is refused: the only literals"),
    "boolean literal": ("a * True", "'True' is refused: the only literals"),
    "power": ("a ** 2", "'a \\*\\* 2' is refused: the operators allowed"),
    "comparison": ("a > b", "'a > b' is refused: Compare is not part"),
    "walrus": ("(c := a)", "'c := a' is refused: NamedExpr"),
    "comprehension": ("[x for x in a]", "is refused: ListComp"),
    "conditional": ("a if a else b", "is refused: IfExp"),
    "f-string": ("f'{a}'", "is refused: JoinedStr"),
    "too many arguments": ("jnp.sin(a, b)", "'b' is refused: jnp.sin takes no further"),
    "syntax": ("a +", "'a \\+' is not a Python expression"),
    "statement": ("import os", "'import os' is not a Python expression"),
    "empty": ("  ", "is empty"),
    "huge integer": ("a + 10**400", "refused: the operators allowed"),
    "huge literal": ("a + 99999999999999999999", "integer literals must lie within"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_expressions_name_the_offending_piece(case):
    text, message = REFUSED[case]
    with pytest.raises(ExplorerError, match=message) as caught:
        parse_expr(text, ("a", "b"))
    assert caught.value.field == "expr"


def test_long_and_deep_expressions_are_refused_before_they_cost_anything():
    with pytest.raises(ExplorerError, match="longer than"):
        parse_expr("a + " * 200 + "a", ("a",))
    with pytest.raises(ExplorerError, match="nests more than 24 levels"):
        parse_expr("-" * 40 + "a", ("a",))
    with pytest.raises(ExplorerError, match="syntax nodes; at most 120"):
        parse_expr("+".join(["a"] * 100), ("a",))


def test_the_allow_list_is_the_issues():
    assert set(FUNCTIONS) == {
        "jnp.sin",
        "jnp.cos",
        "jnp.exp",
        "jnp.tanh",
        "jnp.dot",
        "jnp.matmul",
        "jnp.transpose",
        "jnp.sum",
        "jnp.mean",
        "jnp.max",
        "jnp.reshape",
        "jax.nn.relu",
    }


def test_nothing_runs_when_parsing(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ExplorerError):
        parse_expr(f"__import__('pathlib').Path({str(marker)!r}).touch()", ("a",))
    assert not marker.exists()


def test_cli_refuses_with_exit_2_and_one_message(tmp_path):
    spec = tmp_path / "op.json"
    spec.write_text('{"mesh": {"shape": [8], "axes": ["d"]}, "arrays": {"a": {"shape": [8]}}, "expr": "__import__(\'os\')"}')
    result = subprocess.run([sys.executable, "-m", "explorer", "op", str(spec)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "error: expr: '__import__' is refused" in result.stderr and "Traceback" not in result.stderr
