"""An op spec: arrays on a mesh and an expression over them, validated, and the Arrays page's presets.

This module's one job is what an op is (``OpSpec``: the ``op`` command's file, the page's widgets, a link),
parsed with one message naming the field and value when it is bad, and the spec text a person types; compiling
and timing an op are ``ops``'. An op spec::

    {"mesh": {"shape": [4, 2], "axes": ["x", "y"]},
     "arrays": {"a": {"shape": [8192, 8192], "dtype": "float32", "spec": ["x", null]},
                "b": {"shape": [8192, 8192], "dtype": "float32", "spec": [null, "y"]}},
     "expr": "jnp.dot(a, b)",
     "out_spec": null}
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator, model_validator

from explorer.errors import ExplorerError
from explorer.specs import entry_json, spec_axes, spec_entry
from explorer.ops.expr import Program, is_array_name, parse_expr
from explorer.layout import MeshSpec

DTYPES = ("float32", "bfloat16", "float16", "int32")
MAX_ARRAYS = 8
MAX_RANK = 6
MAX_DIM = 2**31 - 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ArraySpec(_Frozen):
    """One input array: shape, dtype and PartitionSpec (entries: null, an axis, or a list of axes)."""

    shape: tuple[StrictInt, ...] = Field(max_length=MAX_RANK)
    dtype: Literal[DTYPES] = "float32"  # type: ignore[valid-type]
    spec: tuple[None | StrictStr | tuple[StrictStr, ...], ...] = ()

    @field_validator("shape")
    @classmethod
    def _sizes(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        for i, size in enumerate(shape):
            if not 1 <= size <= MAX_DIM:
                raise ValueError(f"dimension {i} ({size}) must be between 1 and {MAX_DIM:,}")
        return shape

    @field_validator("spec")
    @classmethod
    def _canonical(cls, spec: tuple) -> tuple:
        return tuple(spec_entry(e) for e in spec)


class OpSpec(_Frozen):
    """Arrays on a mesh and an expression over them; ``out_spec`` constrains the result (null: XLA chooses)."""

    mesh: MeshSpec
    arrays: dict[StrictStr, ArraySpec] = Field(min_length=1, max_length=MAX_ARRAYS)
    expr: StrictStr
    out_spec: tuple[None | StrictStr | tuple[StrictStr, ...], ...] | None = None

    @field_validator("out_spec")
    @classmethod
    def _canonical_out(cls, spec: tuple | None) -> tuple | None:
        return None if spec is None else tuple(spec_entry(e) for e in spec)

    @model_validator(mode="after")
    def _consistent(self) -> "OpSpec":
        for name, array in self.arrays.items():
            if not is_array_name(name):
                raise ExplorerError(f"arrays[{name!r}]", name, "is not an array name (a Python identifier, not jnp or jax)")
            check_spec(f"arrays.{name}.spec", array.spec, len(array.shape), self.mesh)
        if self.out_spec is not None:
            check_spec("out_spec", self.out_spec, None, self.mesh)
        parse_expr(self.expr, tuple(self.arrays))
        return self

    def program(self) -> Program:
        return parse_expr(self.expr, tuple(self.arrays))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mesh": self.mesh.as_dict(),
            "arrays": {
                name: {"shape": list(a.shape), "dtype": a.dtype, "spec": [entry_json(e) for e in a.spec]} for name, a in self.arrays.items()
            },
            "expr": self.expr,
            "out_spec": None if self.out_spec is None else [entry_json(e) for e in self.out_spec],
        }


def check_spec(field: str, spec: tuple, rank: int | None, mesh: MeshSpec) -> None:
    """Every axis is the mesh's, used once, and the spec is no longer than the array's rank."""
    if rank is not None and len(spec) > rank:
        raise ExplorerError(field, [entry_json(e) for e in spec], f"has {len(spec)} entries for an array of rank {rank}")
    seen: set[str] = set()
    for dim, entry in enumerate(spec):
        for axis in spec_axes(entry):
            if axis not in mesh.axes:
                raise ExplorerError(f"{field}[{dim}]", axis, f"is not an axis of the mesh {list(mesh.axes)}")
            if axis in seen:
                raise ExplorerError(f"{field}[{dim}]", axis, "is used by two dimensions; a mesh axis can shard one dimension")
            seen.add(axis)


def parse_op(data: Any) -> OpSpec:
    """Validate an op spec given as a dict; ExplorerError naming the field and value if it is bad."""
    if not isinstance(data, dict):
        raise ExplorerError("op", data, "is not a JSON object")
    try:
        return OpSpec.model_validate(data)
    except ValidationError as error:
        raise _explain(error) from None


def load_op_file(path: str) -> OpSpec:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ExplorerError("op file", path, f"cannot be read ({error.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ExplorerError("op file", text[:40], f"is not valid JSON ({error.msg} at line {error.lineno})") from None
    return parse_op(data)


def _explain(error: ValidationError) -> ExplorerError:
    first = error.errors(include_url=False)[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ExplorerError):
        return cause
    field = ""
    for part in first["loc"]:
        if isinstance(part, int):
            field += f"[{part}]"
        elif not str(part).startswith(("function-", "tagged-", "literal[", "union[", "tuple[", "nullable[", "str", "none")):
            field += ("." if field else "") + str(part)
    field = field or "op"
    if first["type"] == "missing":
        return ExplorerError(field, None, "is missing")
    if first["type"] == "extra_forbidden":
        return ExplorerError(field, first.get("input"), "is not a field of an op spec")
    return ExplorerError(field, first.get("input"), first["msg"].lower().removeprefix("value error, "))


# --- presets -------------------------------------------------------------------------------------

GUIDE = "JAX guide 'Distributed arrays and automatic parallelization'"


def _preset(mesh_axes: tuple[str, str], arrays: dict[str, tuple[list[int], list]], expr: str, out_spec=None) -> dict[str, Any]:
    return {
        "mesh": {"shape": [4, 2], "axes": list(mesh_axes)},
        "arrays": {name: {"shape": shape, "dtype": "float32", "spec": spec} for name, (shape, spec) in arrays.items()},
        "expr": expr,
        "out_spec": out_spec,
    }


N = 8192
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "sin of a 4x2-sharded array": (
        "jnp.sin(y) with y sharded P('x', 'y') on a 4x2 mesh: the output keeps the input's sharding.",
        _preset(("x", "y"), {"y": ([N, N], ["x", "y"])}, "jnp.sin(y)"),
    ),
    "dot of row- and column-sharded": (
        "jnp.dot(y, z) with y P('a', None) and z P(None, 'b'): XLA chooses P('a', 'b'), with no communication. "
        "Time it against one device: the guide's 8192x8192 matmul timing.",
        _preset(("a", "b"), {"y": ([N, N], ["a", None]), "z": ([N, N], [None, "b"])}, "jnp.dot(y, z)"),
    ),
    "constrain to a 2x4 spec": (
        "x + 1 under with_sharding_constraint(..., P('y', 'x')): the 4x2 input becomes a 2x4 output.",
        _preset(("x", "y"), {"x": ([N, N], ["x", "y"])}, "x + 1", ["y", "x"]),
    ),
    "constrain to replicated": (
        "x + 1 under with_sharding_constraint(..., P()): every device ends with the whole result.",
        _preset(("x", "y"), {"x": ([N, N], ["x", "y"])}, "x + 1", []),
    ),
}
MATMUL_PRESET = "dot of row- and column-sharded"


def parse_spec_text(field: str, text: str) -> list[Any]:
    """A spec typed by a person: ``a, None``, ``P('a', None)``, ``(x, y), -``, ``x*y``; empty is P() (replicated)."""
    body = text.strip()
    for prefix in ("PartitionSpec(", "P("):
        if body.startswith(prefix) and body.endswith(")"):
            body = body[len(prefix) : -1]
    body = body.replace("'", "").replace('"', "")
    parts, depth, current = [], 0, ""
    for char in body:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ExplorerError(field, text, "has an unmatched ')'")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ExplorerError(field, text, "has an unmatched '('")
    parts.append(current)
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()  # a trailing comma, as in P(('x', 'y'),)
    if parts == [""] or not body.strip():
        return []
    entries: list[Any] = []
    for part in (p.strip() for p in parts):
        if part in ("None", "-"):
            entries.append(None)
            continue
        if part.startswith("(") and part.endswith(")"):
            axes = [a.strip() for a in part[1:-1].split(",") if a.strip()]
        else:
            axes = [a.strip() for a in part.split("*")]
        if not axes or any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", a) for a in axes):
            raise ExplorerError(
                field, text, f"has {part!r}, which is not an axis name, None, or (axis, axis); e.g. 'x, None' or '(x, y), None'"
            )
        entries.append(axes[0] if len(axes) == 1 else axes)
    return entries


def spec_input_text(spec: tuple | None) -> str:
    """The text ``parse_spec_text`` reads back as ``spec``: ``a, None``, ``(x, y), None``; empty for P()."""
    if spec is None:
        return ""
    return ", ".join("None" if e is None else e if isinstance(e, str) else "(" + ", ".join(e) + ")" for e in spec)
