"""The Arrays page's ops compiled and timed: what XLA makes of an expression over arrays on a mesh.

This module's one job is compiling and timing an op; what an op is (``OpSpec``, its parsing, the presets) is
``op_spec``'s. ``analyze_op`` jits the expression with the inputs' shardings (``out_spec``, when given,
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
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from explorer.hlo import program as hlo
from explorer.meshes import layout_mesh, mesh_info
from explorer.compile.compiled import MEMORY_FRACTION, available_memory_bytes, memory_of
from explorer.errors import ExplorerError
from explorer.specs import entry_json, normal_spec, spec_text
from explorer.tiles import MeshInfo, Tile, replication, shard_shape, tiles
from explorer.timing.timing import StepTimes
from explorer.ops.op_spec import OpSpec, parse_op


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
