"""The Arrays page's expressions: a small grammar read with ``ast``, never ``eval``.

Allowed: the op's array names, numeric literals, ``+ - * / @``, unary minus, ``.T``,
and calls to the functions in ``FUNCTIONS`` (``jnp.sin(a)``, ``jnp.dot(a, b)``,
``jnp.sum(a, axis=0)``, ``jnp.reshape(a, (64, -1))``, ``jax.nn.relu(a)``). Anything
else raises ``ExplorerError`` on the field ``expr`` naming the offending piece::

    >>> program = parse_expr("jnp.dot(a, b.T) + 1", ("a", "b"))
    >>> program.names
    ('a', 'b')
    >>> parse_expr("a.real", ("a",))
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: expr: 'a.real' is refused: the only attribute allowed is .T (transpose)

The parsed expression becomes a tree of closures over the allow-listed JAX functions,
so what runs is exactly what was checked.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import operator
from typing import Any, Callable

import jax
import jax.numpy as jnp

from explorer.errors import ExplorerError

MAX_EXPR_CHARS = 400
MAX_NODES = 120
MAX_DEPTH = 24

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv, ast.MatMult: operator.matmul}
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


@dataclasses.dataclass(frozen=True)
class Signature:
    """How a function may be called: how many array arguments, then which literal arguments (by position or keyword)."""

    function: Callable[..., Any]
    arrays: int
    literals: tuple[str, ...] = ()  # names of the optional literal arguments after the arrays, in order
    required: int = 0  # how many of ``literals`` must be given


FUNCTIONS: dict[str, Signature] = {
    "jnp.sin": Signature(jnp.sin, 1),
    "jnp.cos": Signature(jnp.cos, 1),
    "jnp.exp": Signature(jnp.exp, 1),
    "jnp.tanh": Signature(jnp.tanh, 1),
    "jnp.dot": Signature(jnp.dot, 2),
    "jnp.matmul": Signature(jnp.matmul, 2),
    "jnp.transpose": Signature(jnp.transpose, 1, ("axes",)),
    "jnp.sum": Signature(jnp.sum, 1, ("axis",)),
    "jnp.mean": Signature(jnp.mean, 1, ("axis",)),
    "jnp.max": Signature(jnp.max, 1, ("axis",)),
    "jnp.reshape": Signature(jnp.reshape, 1, ("shape",), required=1),
    "jax.nn.relu": Signature(jax.nn.relu, 1),
}
RESERVED_NAMES = frozenset({"jnp", "jax"})


@dataclasses.dataclass(frozen=True)
class Program:
    """A checked expression: its text, the array names it reads, and the function computing it."""

    text: str
    names: tuple[str, ...]
    evaluate: Callable[[dict[str, Any]], Any]

    def __call__(self, arrays: dict[str, Any]) -> Any:
        return self.evaluate(arrays)


def parse_expr(text: str, arrays: tuple[str, ...] | list[str]) -> Program:
    """Check ``text`` against the grammar with ``arrays`` as the only names; ExplorerError naming the piece if not."""
    if not isinstance(text, str):
        raise ExplorerError("expr", text, "is not text")
    if not text.strip():
        raise ExplorerError("expr", text, "is empty: write an expression such as jnp.sin(a)")
    if len(text) > MAX_EXPR_CHARS:
        raise ExplorerError("expr", text[:40], f"is longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise ExplorerError("expr", text, f"is not a Python expression ({error.msg})") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExplorerError("expr", text[:40], "is nested too deeply") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise ExplorerError("expr", text[:40], f"has {nodes} syntax nodes; at most {MAX_NODES} are allowed")
    reader = _Reader(text.strip(), frozenset(arrays))
    evaluate = reader.read(tree.body, 0)
    return Program(text.strip(), tuple(sorted(reader.used)), evaluate)


class _Reader:
    def __init__(self, source: str, arrays: frozenset[str]):
        self.source = source
        self.arrays = arrays
        self.used: set[str] = set()

    def piece(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def refuse(self, node: ast.AST, problem: str) -> ExplorerError:
        return ExplorerError("expr", self.piece(node), f"is refused: {problem}")

    def read(self, node: ast.AST, depth: int) -> Callable[[dict[str, Any]], Any]:
        if depth > MAX_DEPTH:
            raise self.refuse(node, f"the expression nests more than {MAX_DEPTH} levels")
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)):
            value = self.literal_number(node)
            return lambda env: value
        if isinstance(node, ast.BinOp):
            op = BINARY.get(type(node.op))
            if op is None:
                raise self.refuse(node, "the operators allowed are + - * / @")
            left, right = self.read(node.left, depth + 1), self.read(node.right, depth + 1)
            return lambda env: op(left(env), right(env))
        if isinstance(node, ast.UnaryOp):
            op = UNARY.get(type(node.op))
            if op is None:
                raise self.refuse(node, "the unary operators allowed are - and +")
            operand = self.read(node.operand, depth + 1)
            return lambda env: op(operand(env))
        if isinstance(node, ast.Attribute):
            if self.dotted(node) in FUNCTIONS:
                raise self.refuse(node, "a function must be called, e.g. jnp.sin(a)")
            if node.attr != "T":
                raise self.refuse(node, "the only attribute allowed is .T (transpose)")
            value = self.read(node.value, depth + 1)
            return lambda env: value(env).T
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Subscript):
            raise self.refuse(node, "subscripts (indexing and slicing) are not part of the grammar")
        if isinstance(node, ast.Lambda):
            raise self.refuse(node, "lambdas are not part of the grammar")
        raise self.refuse(node, f"{type(node).__name__} is not part of the grammar (names, numbers, + - * / @, .T, allowed calls)")

    def _name(self, node: ast.Name) -> Callable[[dict[str, Any]], Any]:
        if node.id not in self.arrays:
            known = ", ".join(sorted(self.arrays)) or "none"
            raise self.refuse(node, f"unknown name; the arrays are: {known}")
        self.used.add(node.id)
        name = node.id
        return lambda env: env[name]

    def dotted(self, node: ast.AST) -> str | None:
        """``jnp.sin`` for the attribute chain jnp -> sin; None if it is not a chain of plain names."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(node.id)
        return ".".join(reversed(parts))

    def _call(self, node: ast.Call, depth: int) -> Callable[[dict[str, Any]], Any]:
        name = self.dotted(node.func)
        if name is None:  # calling something computed: refuse its innermost offending piece first
            self.read(node.func.value if isinstance(node.func, ast.Attribute) else node.func, depth + 1)
        if name not in FUNCTIONS:
            allowed = ", ".join(FUNCTIONS)
            raise self.refuse(node.func, f"not an allowed function; allowed: {allowed}")
        signature = FUNCTIONS[name]
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                raise self.refuse(argument, "*arguments are not allowed")
        if len(node.args) < signature.arrays:
            raise self.refuse(node, f"{name} takes {signature.arrays} array argument(s)")
        positional = node.args[signature.arrays :]
        if len(positional) > len(signature.literals):
            raise self.refuse(positional[len(signature.literals)], f"{name} takes no further positional argument here")
        literals: dict[str, Any] = {}
        for slot, argument in zip(signature.literals, positional):
            literals[slot] = self.literal_argument(argument, name, slot)
        for item in node.keywords:
            if item.arg is None:
                raise self.refuse(item, "**keyword arguments are not allowed")
            if item.arg not in signature.literals:
                allowed = ", ".join(f"{k}=" for k in signature.literals) or "none"
                raise self.refuse(item, f"{name} accepts the keyword(s): {allowed}")
            if item.arg in literals:
                raise self.refuse(item, f"{item.arg} is given twice")
            literals[item.arg] = self.literal_argument(item.value, name, item.arg)
        missing = [slot for slot in signature.literals[: signature.required] if slot not in literals]
        if missing:
            raise self.refuse(node, f"{name} needs a literal {missing[0]}, e.g. jnp.reshape(a, (64, -1))")
        arrays = [self.read(argument, depth + 1) for argument in node.args[: signature.arrays]]
        function = signature.function
        return lambda env: function(*(a(env) for a in arrays), **literals)

    def literal_number(self, node: ast.AST) -> int | float:
        sign = 1
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            sign = -1 if isinstance(node.op, ast.USub) else 1
            node = node.operand
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise self.refuse(node, "the only literals allowed are integers and real numbers")
        if isinstance(node.value, int) and abs(node.value) > 2**31:
            raise self.refuse(node, "integer literals must lie within ±2**31")
        return sign * node.value

    def literal_argument(self, node: ast.AST, function: str, slot: str) -> Any:
        """A literal axis, axes tuple or shape: an int, None (axis only) or a tuple of ints."""
        if slot == "axis" and isinstance(node, ast.Constant) and node.value is None:
            return None
        if isinstance(node, (ast.Tuple, ast.List)):
            values = tuple(self._literal_int(element, function, slot) for element in node.elts)
            return values
        return self._literal_int(node, function, slot)

    def _literal_int(self, node: ast.AST, function: str, slot: str) -> int:
        try:
            value = self.literal_number(node)
        except ExplorerError:
            raise self.refuse(node, f"{function}'s {slot} must be a literal integer or a tuple of them") from None
        if not isinstance(value, int):
            raise self.refuse(node, f"{function}'s {slot} must be a literal integer or a tuple of them")
        return value


def is_array_name(name: object) -> bool:
    """A name an array may take: a Python identifier, not a keyword, not ``jnp`` or ``jax``."""
    return (
        isinstance(name, str)
        and name.isidentifier()
        and name.isascii()
        and not keyword.iskeyword(name)
        and name not in RESERVED_NAMES
        and len(name) <= 32
    )
