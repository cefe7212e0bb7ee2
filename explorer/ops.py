"""The Arrays page's ops: arrays on a mesh, an expression over them, and what XLA makes of it.

An op spec (the ``op`` command's file, the page's widgets, a link)::

    {"mesh": {"shape": [4, 2], "axes": ["x", "y"]},
     "arrays": {"a": {"shape": [8192, 8192], "dtype": "float32", "spec": ["x", null]},
                "b": {"shape": [8192, 8192], "dtype": "float32", "spec": [null, "y"]}},
     "expr": "jnp.dot(a, b)",
     "out_spec": null}

``analyze_op`` jits the expression with the inputs' shardings (``out_spec``, when given,
wraps the result in ``jax.lax.with_sharding_constraint``), compiles it for abstract
inputs, and reads the output sharding XLA chose from the compiled executable and the
collectives from its HLO. On a planned mesh (more devices than this process has)
nothing compiles: the output sharding is JAX's own type-level propagation on an
``AbstractMesh`` with Explicit axes, where JAX can decide it. ``time_op`` runs the
compiled op against the same expression on one device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import re
import time
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator, model_validator

from explorer import hlo
from explorer.analysis import layout_mesh, mesh_info
from explorer.compiled import MEMORY_FRACTION, available_memory_bytes, memory_of
from explorer.errors import ExplorerError
from explorer.specs import entry_json, normal_spec, spec_axes, spec_entry, spec_text
from explorer.expr import Program, is_array_name, parse_expr
from explorer.layout import MeshSpec
from explorer.tiles import MeshInfo, Tile, replication, shard_shape, tiles
from explorer.timing import StepTimes

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


# --- analysis ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArrayView:
    """An input or the output as plain data: what the figures and the JSON show.

    ``spec`` is None when nobody could say how it is sharded (a planned mesh where JAX's
    type-level propagation gives up); then ``tiles`` is empty.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    spec: tuple | None
    tiles: tuple[Tile, ...]
    shard_shape: tuple[int, ...] | None
    replication: int | None

    @property
    def itemsize(self) -> int:
        return np.dtype(jnp.dtype(self.dtype)).itemsize

    def bytes_per_device(self) -> int | None:
        return None if self.shard_shape is None else math.prod(self.shard_shape) * self.itemsize

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "spec": None if self.spec is None else [entry_json(e) for e in self.spec],
            "spec_text": spec_text(self.spec),
            "shard_shape": None if self.shard_shape is None else list(self.shard_shape),
            "bytes_per_device": self.bytes_per_device(),
            "replication": self.replication,
            "tiles": [{"index": [list(r) for r in t.index], "devices": list(t.devices)} for t in self.tiles],
        }


@dataclasses.dataclass(frozen=True)
class OpAnalysis:
    """What JAX and XLA make of an op.

    ``output.spec`` is read from the compiled executable (``compiled.output_shardings``)
    on a real mesh; on a planned one (``planned``) it is JAX's type-level propagation on
    an AbstractMesh with Explicit axes, and ``note`` says so (or why there is none).
    ``collectives`` is None on a planned mesh: nothing was compiled.
    """

    op: OpSpec
    mesh: MeshInfo
    inputs: tuple[ArrayView, ...]
    output: ArrayView
    collectives: dict[str, dict[str, int]] | None
    loops_without_trip_count: int
    memory: dict[str, int] | None
    compile_s: float | None
    planned: bool
    note: str
    typed_spec: tuple | None = None  # a real mesh with Explicit axes: the spec in the result's type (jax.typeof)

    def to_dict(self) -> dict[str, Any]:
        return {
            "typed_output_spec": None if self.typed_spec is None else [entry_json(e) for e in self.typed_spec],
            "op": self.op.to_dict(),
            "mesh": {"shape": list(self.mesh.shape), "axes": list(self.mesh.axes), "devices": self.mesh.size, "planned": self.planned},
            "inputs": {view.name: view.to_dict() for view in self.inputs},
            "output": self.output.to_dict(),
            "output_spec_source": "compiled executable (XLA)"
            if not self.planned
            else "JAX type-level propagation (AbstractMesh, Explicit axes)",
            "collectives": None if self.collectives is None else hlo.used(self.collectives),
            "loops_without_trip_count": self.loops_without_trip_count,
            "memory": self.memory,
            "compile_s": self.compile_s,
            "note": self.note,
        }


def _view(name: str, shape, dtype, spec: tuple | None, mesh: MeshInfo) -> ArrayView:
    shape = tuple(int(s) for s in shape)
    if spec is None:
        return ArrayView(name, shape, str(dtype), None, (), None, None)
    spec = normal_spec(spec, len(shape))
    return ArrayView(name, shape, str(dtype), spec, tiles(shape, spec, mesh), shard_shape(shape, spec, mesh), replication(spec, mesh))


def _function(op: OpSpec, mesh, constrain: bool = True) -> Callable[..., Any]:
    """The op as a function of the arrays in the spec's order, with the output constraint when asked."""
    program = op.program()
    names = tuple(op.arrays)
    out = NamedSharding(mesh, PartitionSpec(*op.out_spec)) if constrain and op.out_spec is not None else None

    explicit = AxisType.Explicit in getattr(mesh, "axis_types", ())

    def function(*arrays):
        result = program(dict(zip(names, arrays)))
        if out is None:
            return result
        # on Explicit axes with_sharding_constraint is an assert: the sharding is asked for with reshard
        return jax.sharding.reshard(result, out) if explicit else jax.lax.with_sharding_constraint(result, out)

    return function


def _abstract_inputs(op: OpSpec, mesh) -> tuple[jax.ShapeDtypeStruct, ...]:
    return tuple(
        jax.ShapeDtypeStruct(a.shape, jnp.dtype(a.dtype), sharding=NamedSharding(mesh, PartitionSpec(*a.spec))) for a in op.arrays.values()
    )


def _type_check(op: OpSpec, mesh) -> jax.ShapeDtypeStruct:
    """The output's shape and dtype; a shape error in the expression becomes an ExplorerError on ``expr``."""
    try:
        with jax.set_mesh(mesh) if isinstance(mesh, jax.sharding.Mesh) else contextlib.nullcontext():
            result = jax.eval_shape(_function(op, mesh, constrain=False), *_abstract_inputs(op, mesh))
    except Exception as error:  # a shape error, or JAX's refusal on Explicit axes (ShardingTypeError): the expression's
        raise ExplorerError("expr", op.expr, f"does not apply to these arrays: {_first_line(error)}") from None
    if not isinstance(result, jax.ShapeDtypeStruct):
        raise ExplorerError("expr", op.expr, "does not give one array")
    return result


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def analyze_op(op: OpSpec) -> OpAnalysis:
    """Compile the op on this process's devices (or reason about it on a planned mesh) and describe every array."""
    info = mesh_info(op.mesh)
    mesh = layout_mesh(op.mesh)
    inputs = tuple(_view(name, a.shape, a.dtype, a.spec, info) for name, a in op.arrays.items())
    result = _type_check(op, mesh)
    if info.abstract:
        spec, note = _planned_output_spec(op, result.ndim)
        output = _view("out", result.shape, result.dtype, spec, info)
        return OpAnalysis(op, info, inputs, output, None, 0, None, None, True, note)
    compiled, compile_s = _compiled(op)
    chosen = compiled.output_shardings
    if not isinstance(chosen, NamedSharding):
        raise ExplorerError("expr", op.expr, f"compiled to an output sharding the explorer cannot read ({type(chosen).__name__})")
    output = _view("out", result.shape, result.dtype, chosen.spec, info)
    program = hlo.collectives(compiled.as_text())
    constrained = "" if op.out_spec is None else f"; the expression's result is constrained to {spec_text(op.out_spec)}"
    note = f"Output sharding read from the compiled executable (XLA's choice){constrained}."
    typed = None
    if op.mesh.explicit:  # the sharding is in the result's type too: say whether XLA's program agrees with it
        with jax.set_mesh(mesh):
            typed_result = jax.eval_shape(_function(op, mesh), *_abstract_inputs(op, mesh))
        typed = normal_spec(typed_result.sharding.spec, result.ndim)
        agree = "agrees" if typed == output.spec else "differs"
        note += f" On these Explicit axes the result's type (jax.typeof) says {spec_text(typed)}; the compiled program {agree}."
    return OpAnalysis(
        op, info, inputs, output, program.ops, program.loops_without_trip_count, memory_of(compiled), compile_s, False, note, typed
    )


def op_key(op: OpSpec) -> str:
    """Identity of what gets compiled and timed."""
    return json.dumps(op.to_dict(), sort_keys=True)


def _compiled(op: OpSpec) -> tuple[Any, float]:
    return _compile_cached(op_key(op))


@functools.lru_cache(maxsize=16)
def _compile_cached(key: str) -> tuple[Any, float]:
    op = parse_op(json.loads(key))
    mesh = layout_mesh(op.mesh)
    start = time.perf_counter()
    try:
        with jax.set_mesh(mesh):
            compiled = jax.jit(_function(op, mesh)).lower(*_abstract_inputs(op, mesh)).compile()
    except Exception as error:  # XLA or JAX refusing these shardings (ShardingTypeError is neither a Type- nor a ValueError)
        raise ExplorerError("expr", op.expr, f"does not compile with these shardings: {_first_line(error)}") from None
    return compiled, time.perf_counter() - start


def _planned_output_spec(op: OpSpec, ndim: int) -> tuple[tuple | None, str]:
    """JAX's sharding-in-types answer on an AbstractMesh with Explicit axes, or None and the reason."""
    mesh = AbstractMesh(tuple(op.mesh.shape), tuple(op.mesh.axes), axis_types=(AxisType.Explicit,) * len(op.mesh.axes))
    try:
        with jax.sharding.use_abstract_mesh(mesh):
            result = jax.eval_shape(_function(op, mesh), *_abstract_inputs(op, mesh))
    except Exception as error:  # JAX refuses to decide (e.g. a contraction over a sharded dimension): say why
        return None, (
            f"Planned mesh: {math.prod(op.mesh.shape):,} devices, more than this process has, so nothing compiles. "
            f"JAX's type-level propagation cannot decide the output sharding here: {_first_line(error)}"
        )
    return normal_spec(result.sharding.spec, ndim), (
        f"Planned mesh: {math.prod(op.mesh.shape):,} devices, more than this process has, so nothing compiles or runs. "
        "The output spec is JAX's type-level propagation on an AbstractMesh with Explicit axes (sharding in types), "
        "not XLA's choice, which needs the devices; collectives are unknown."
    )


# --- timing ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OpTiming:
    """The compiled op on the mesh against the same expression on one device.

    ``sharded`` and ``single`` are per-call seconds (one call plus ``block_until_ready``),
    after ``warmup`` untimed calls of each. ``max_abs_difference`` compares the two
    results (they differ only by floating-point summation order).
    """

    devices: int
    platform: str
    warmup: int
    sharded: StepTimes
    single: StepTimes
    max_abs_difference: float
    stopped: bool

    @property
    def speedup(self) -> float:
        return self.single.median / self.sharded.median

    def to_dict(self) -> dict[str, Any]:
        def times(t: StepTimes) -> dict[str, Any]:
            return {"median": t.median, "p10": t.p10, "p90": t.p90, "min": t.min, "max": t.max, "samples": list(t.samples)}

        return {
            "devices": self.devices,
            "platform": self.platform,
            "warmup": self.warmup,
            "sharded_s": times(self.sharded),
            "single_device_s": times(self.single),
            "speedup": self.speedup,
            "max_abs_difference": self.max_abs_difference,
            "stopped": self.stopped,
        }


def host_bytes_to_time(op: OpSpec) -> int:
    """A rough upper bound of host memory for a timing: every input and the output, sharded and on one device, twice over."""
    result = _type_check(op, layout_mesh(op.mesh))
    inputs = sum(math.prod(a.shape) * np.dtype(jnp.dtype(a.dtype)).itemsize for a in op.arrays.values())
    output = math.prod(result.shape) * np.dtype(result.dtype).itemsize
    return 2 * 2 * (inputs + output)


def check_op_timeable(op: OpSpec) -> None:
    size = math.prod(op.mesh.shape)
    if size > jax.device_count():
        raise ExplorerError(
            "mesh.shape",
            list(op.mesh.shape),
            f"needs {size:,} devices and this process has {jax.device_count()}: a planned mesh is analyzed but cannot be timed",
        )
    needed, available = host_bytes_to_time(op), available_memory_bytes()
    if needed > MEMORY_FRACTION * available:
        raise ExplorerError(
            "arrays",
            ", ".join(op.arrays),
            f"would need about {needed / 2**30:,.1f} GiB on the host to time; {available / 2**30:,.1f} GiB are available "
            f"and the limit is {MEMORY_FRACTION:.0%} of that",
        )


def _random_inputs(op: OpSpec, shardings) -> tuple:
    """Normal floats (small integers for int32), generated directly in each input's sharding."""
    arrays = []
    for index, (array, sharding) in enumerate(zip(op.arrays.values(), shardings)):
        dtype = jnp.dtype(array.dtype)
        key = jax.random.key(index)
        if jnp.issubdtype(dtype, jnp.integer):
            make = functools.partial(jax.random.randint, shape=array.shape, minval=-4, maxval=5, dtype=dtype)
        else:
            make = functools.partial(jax.random.normal, shape=array.shape, dtype=dtype)
        arrays.append(jax.jit(make, out_shardings=sharding)(key))
    return tuple(arrays)


def time_op(
    op: OpSpec,
    steps: int = 5,
    warmup: int = 1,
    on_step: Callable[[str, int, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> OpTiming:
    """Time ``steps`` calls of the sharded op, then of the same expression on device 0.

    ``on_step(which, i, seconds)`` (``which`` is "sharded" or "single") runs after each
    timed call, outside the timed region. The single-device run drops ``out_spec``: on
    one device there is nothing to constrain.
    """
    if not 1 <= steps <= 1000:
        raise ExplorerError("steps", steps, "must be between 1 and 1,000")
    if not 0 <= warmup <= 100:
        raise ExplorerError("warmup", warmup, "must be between 0 and 100")
    check_op_timeable(op)
    phase = on_phase or (lambda _: None)
    phase("compiling")
    compiled, _ = _compiled(op)
    mesh = layout_mesh(op.mesh)
    device = jax.devices()[0]
    single_sharding = jax.sharding.SingleDeviceSharding(device)
    single_inputs_abstract = tuple(jax.ShapeDtypeStruct(a.shape, jnp.dtype(a.dtype), sharding=single_sharding) for a in op.arrays.values())
    single = jax.jit(_function(op, mesh, constrain=False)).lower(*single_inputs_abstract).compile()
    phase("making inputs")
    inputs = _random_inputs(op, [s.sharding for s in _abstract_inputs(op, mesh)])
    single_inputs = tuple(jax.device_put(x, device) for x in inputs)
    jax.block_until_ready(single_inputs)
    results: dict[str, list[float]] = {"sharded": [], "single": []}
    stopped = False
    difference = float("nan")
    for which, function, arguments in (("sharded", compiled, inputs), ("single", single, single_inputs)):
        phase(f"warming up ({which})")
        for _ in range(warmup):
            jax.block_until_ready(function(*arguments))
        phase(f"timing ({which})")
        for index in range(steps):
            start = time.perf_counter()
            jax.block_until_ready(function(*arguments))
            results[which].append(time.perf_counter() - start)
            if on_step:
                on_step(which, index, results[which][-1])
            if should_stop and should_stop():
                stopped = True
                break
        if stopped:
            break
    if not stopped:
        difference = float(
            jnp.max(jnp.abs(jax.device_put(compiled(*inputs), device).astype(jnp.float32) - single(*single_inputs).astype(jnp.float32)))
        )
    empty = StepTimes.of([float("nan")])
    return OpTiming(
        devices=math.prod(op.mesh.shape),
        platform=device.platform,
        warmup=warmup,
        sharded=StepTimes.of(results["sharded"]) if results["sharded"] else empty,
        single=StepTimes.of(results["single"]) if results["single"] else empty,
        max_abs_difference=difference,
        stopped=stopped,
    )


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
