"""Explicit axes: the sharding JAX puts in every value's type, read from one trace under the layout.

On a mesh with Explicit axes (``jax.make_mesh``'s default since JAX 0.9) every value's
sharding is part of its type (``jax.typeof(x)`` prints ``f32[8@data,64@model]``), so there is
nothing to probe: the model is traced once under the layout's own mesh (an ``AbstractMesh``
with the layout's axis types) and rules, as a user of Flax's recipe would:

- the state: NNX's ``nnx.eval_shape`` of the builder and of ``nnx.Optimizer`` (Flax's eager
  sharding ``reshard``s each variable as it is created, logical names in its metadata resolved
  by ``nnx.logical_axis_rules``); Linen's ``init_fn`` under ``jax.eval_shape``. Each leaf's
  type (``ShapeDtypeStruct.sharding``) is the truth; its metadata names are kept beside it,
  since a variable whose initializer was given ``out_sharding=`` is sharded while
  ``nnx.get_partition_spec`` says ``P()``;
- the forward pass: ``jax.make_jaxpr`` on that state and the inputs (typed with the rules'
  sharding of their names). Every equation's outputs carry their type (``TypedValue``, the
  per-value view); an equation that *sets* a sharding (``reshard``, ``sharding_constraint``,
  an ``out_sharding=`` given to the op) is an activation row, with the source line that wrote it.

JAX's Explicit-mode refusals (an ambiguous contraction, ``with_sharding_constraint`` acting as an
assert, a shape the mesh does not divide) become one ``ExplorerError`` naming the operation, the
model's source line and the fix; JAX's own message names neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import linecache
import os
import traceback
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from explorer import auto_regions
from explorer.errors import ExplorerError
from explorer.reading import collector, trace
from explorer.train_step import make_optimizer
from explorer.reading.arrays import AbstractArray, AbstractModel, TypedValue
from explorer.reading.constraints import library_file, user_frame
from explorer.rules import resolve
from explorer.specs import spec_axes, spec_entry

# Equations whose params carry a sharding the program asked for (an ``out_sharding=``, ``reshard``'s destination,
# ``jnp.zeros(..., out_sharding=)`` as ``broadcast_in_dim``'s ``sharding``), by param name.
_SETTING_PARAMS = ("out_sharding", "dst_sharding", "sharding")


def key_of(model_spec, mesh: Any, rules: tuple) -> tuple[tuple, AbstractMesh, tuple]:
    """The reading's key for ``model_spec`` under ``mesh`` (a Mesh or AbstractMesh with some Explicit axis) and
    ``rules``, with the mesh and rules as ``read`` takes them (the mesh abstract, the rules as Flax reads them).

    On an Explicit mesh the types depend on all of the key: the model, the mesh's shape, axis names
    and types, and the rules (a rule edit re-traces, as it changes what Flax builds).
    """
    abstract = mesh if isinstance(mesh, AbstractMesh) else mesh.abstract_mesh
    rules = trace._flax_rules(rules)
    key = (*model_spec.key(), "explicit", tuple(abstract.axis_sizes), tuple(abstract.axis_names), _type_names(abstract), json.dumps(rules))
    return key, abstract, rules


def read(key: tuple, mesh: AbstractMesh, rules: tuple) -> tuple[AbstractModel, "trace.State"]:
    """The abstract model of ``key`` (``key_of``) read under ``mesh`` and ``rules``: the state's and every forward
    value's sharding from their types; and the state it was read from. Python's cyclic garbage collector is
    paused throughout, the model's import included (``collector.py``): it only finds nothing to collect."""
    with collector.paused():
        stage, closed, inputs = _traced(key, mesh, rules)
        values = program_values(closed, stage.framework)
    rows = tuple(v for v in values if v.sets_sharding)
    model = AbstractModel(
        key=key,
        mesh_axes=tuple(mesh.axis_names),
        framework=stage.framework,
        state_arrays=stage.state_arrays,
        inputs=tuple(dataclasses.replace(a, type_spec=_spec_of(x)) for a, x in zip(trace._input_arrays(stage.built), inputs)),
        activations=_activation_rows(rows),
        output=_output(closed, values, stage.framework),
        values=values,
        axis_types=_type_names(mesh),
    )
    return model, stage


def state(key: tuple, mesh_axes: tuple[str, ...]) -> "trace.State":
    """The built model and typed state of a typed model's ``key``, read again (``explorer.reading.live``)."""
    sizes, names, types, rules = key[3], key[4], key[5], tuple(tuple(r) for r in json.loads(key[6]))
    mesh = AbstractMesh(
        tuple(sizes), tuple(names), axis_types=tuple(AxisType.Explicit if t == "explicit" else AxisType.Auto for t in types)
    )
    return _traced(key, mesh, trace._flax_rules(rules))[0]


def _traced(key: tuple, mesh: AbstractMesh, rules: tuple) -> tuple["trace.State", Any, tuple]:
    """The state and the forward program traced under the layout, and the step's typed inputs."""
    with collector.paused():  # the model's own modules are imported here on first use
        built = trace._built(key)
    if built.framework == "nnx" and len(set(mesh.axis_types)) > 1:
        raise ExplorerError(
            "mesh.axis_types",
            list(_type_names(mesh)),
            "mixes Auto and Explicit axes, which Flax NNX's eager sharding refuses (\"Mesh must have all axes as "
            'Explicit or all axes as Auto"): make every axis explicit, or every axis auto',
        )
    # Linen's init takes a key, made outside the abstract mesh (a concrete value cannot be made under it); NNX's
    # builder makes its own, and making one would start the backend for nothing
    rng = jax.random.key(0) if built.framework == "linen" else None
    with collector.paused(), _under(mesh, rules, built.framework):
        try:
            stage = _nnx_state(built) if built.framework == "nnx" else _linen_state(built, rng)
            inputs = _typed_inputs(built, mesh, rules)
            closed = jax.make_jaxpr(lambda variables, *xs: stage.forward(variables, *xs))(stage.variables, *inputs)
        except ExplorerError:
            raise
        except Exception as error:
            raise refusal(key[0], error) from None
    return stage, closed, inputs


def _type_names(mesh: AbstractMesh) -> tuple[str, ...]:
    """The mesh's axis types as a layout spells them (``"explicit"``/``"auto"``)."""
    return tuple("explicit" if t == AxisType.Explicit else "auto" for t in mesh.axis_types)


@contextlib.contextmanager
def _under(mesh: AbstractMesh, rules: tuple, framework: str):
    """The layout's mesh and its rules, as the framework reads them (NNX: ``nnx.logical_axis_rules`` for Variable
    metadata; Linen: ``nn.logical_axis_rules``)."""
    import flax.linen as nn

    with jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(rules):
        if framework == "nnx":
            from flax import nnx

            with nnx.logical_axis_rules(rules):
                yield
        else:
            yield


def _nnx_state(built) -> "trace.State":
    from flax import nnx

    optimizer = make_optimizer()
    build = built.nnx_builder()

    def model_and_optimizer():
        model = build()
        if not isinstance(model, nnx.Module):
            raise ExplorerError("model", type(model).__name__, "is what the NNX builder returned, not an nnx.Module")
        return model, nnx.Optimizer(model, optimizer, wrt=nnx.Param)

    # one trace for both, as the NNX guide creates them one after the other under the mesh
    model, opt = nnx.eval_shape(model_and_optimizer)
    with nnx.logical_axis_rules(()):  # the metadata's own names: get_partition_spec resolves them under the rules
        stage = trace.nnx_split_state(built, optimizer, model, opt)
    return dataclasses.replace(stage, state_arrays=_typed(stage.state_arrays, jax.tree_util.tree_leaves(stage.state)))


def _linen_state(built, rng) -> "trace.State":
    from flax.training import train_state

    optimizer = make_optimizer()
    module = built.module

    def init(rng, *xs):
        variables = module.init(rng, *built.model_args(xs))
        state = train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=optimizer)
        return state, variables.get("params_axes")

    state, params_axes = jax.eval_shape(init, rng, *_plain_inputs(built))
    arrays = trace._linen_state_arrays(state, optimizer, params_axes)
    leaves = [jax.tree_util.tree_leaves(leaf)[0] for leaf in jax.tree_util.tree_leaves(state, is_leaf=trace._is_box)]

    def forward(params, *xs):
        return module.apply({"params": params}, *built.model_args(xs))

    stage = trace.State(built, "linen", optimizer, state, arrays, forward, state.params, root=type(module).__name__)
    return dataclasses.replace(stage, state_arrays=_typed(arrays, leaves))


def _typed(arrays: tuple[AbstractArray, ...], leaves: list) -> tuple[AbstractArray, ...]:
    """The state's arrays with the spec of each leaf's type beside their metadata names."""
    return tuple(dataclasses.replace(a, type_spec=_spec_of(leaf)) for a, leaf in zip(arrays, leaves))


def _plain_inputs(built) -> tuple:
    return tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in built.inputs)


def _typed_inputs(built, mesh: AbstractMesh, rules: tuple) -> tuple:
    """The step's inputs typed with the sharding the rules give their names (NNX semantics for an NNX model)."""
    typed = []
    for spec in built.inputs:
        names = trace._padded(spec.logical_axes, len(spec.shape))
        entries = resolve(names, rules, len(spec.shape), semantics=built.framework).spec if names else ()
        for entry in entries:
            for axis in (entry,) if isinstance(entry, str) else entry or ():
                if axis not in mesh.axis_names:
                    raise ExplorerError(
                        f"inputs/{spec.name}", list(names), f"would be sharded over {axis!r}, which the mesh {list(mesh.axis_names)} lacks"
                    )
        typed.append(jax.ShapeDtypeStruct(spec.shape, jnp.dtype(spec.dtype), sharding=NamedSharding(mesh, PartitionSpec(*entries))))
    return tuple(typed)


# --- the per-value view -------------------------------------------------------------------------------------------


def program_values(closed, framework: str = "nnx") -> tuple[TypedValue, ...]:
    """Every value a program computes, in program order, with its type's sharding (sub-programs and scans included).

    Linen's name stack is the module path; NNX pushes none (its name stack holds only JAX's
    own scopes, such as an einsum's equation), so an NNX value is placed by its source line.
    """
    found: list[TypedValue] = []
    _walk(closed.jaxpr, "", ("", ""), 1, found, framework == "linen", {})
    return tuple(found)


def _walk(jaxpr, module: str, parent_source: tuple[str, str], runs: int, found: list, stacks: bool, types: dict) -> None:
    for eqn in jaxpr.eqns:
        stack = "/".join(p for p in (module, str(eqn.source_info.name_stack)) if p) if stacks else ""
        own = _source(eqn.source_info)  # None inside JAX's own helpers (jnp.where's jit): they inherit the caller's line
        source = own or parent_source
        setting = _sets_sharding(eqn)
        for var in eqn.outvars:
            aval = getattr(var, "aval", None)
            if aval is None or not hasattr(aval, "shape"):
                continue
            shape, dtype, spec, unreduced, reduced, type_text = _type_fields(aval, types)
            found.append(
                TypedValue(
                    index=len(found),
                    op=eqn.primitive.name,
                    shape=shape,
                    dtype=dtype,
                    spec=spec,
                    unreduced=unreduced,
                    reduced=reduced,
                    type_text=type_text,
                    source=source[0],
                    function=source[1],
                    module=stack,
                    runs=runs,
                    sets_sharding=setting and own is not None,
                    communication=_communication(eqn, var),
                )
            )
        for sub, times in _sub_programs(eqn):
            _walk(sub, stack, source, runs * times, found, stacks, types)


def _type_fields(aval, types: dict) -> tuple:
    """A value's shape, dtype, spec, unreduced and reduced axes and printed type, read once per distinct type (a
    program holds thousands of values of a few hundred types)."""
    try:
        fields = types.get(aval)
    except TypeError:  # an unhashable abstract value (a reference's): read it on its own
        return _read_type_fields(aval)
    if fields is None:
        fields = types[aval] = _read_type_fields(aval)
    return fields


def _read_type_fields(aval) -> tuple:
    return (
        tuple(aval.shape),
        str(aval.dtype),
        _spec_of(aval),
        _axes_attr(aval, "unreduced"),
        _axes_attr(aval, "reduced"),
        aval.str_short(short_dtypes=True),
    )


def _sub_programs(eqn) -> list[tuple[Any, int]]:
    if eqn.primitive.name == "scan":
        return [(eqn.params["jaxpr"].jaxpr, int(eqn.params["length"]))]
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                found.append((inner, 1))
    return found


def _source(source_info) -> tuple[str, str] | None:
    """``("modules.py:187", "Attention.__call__")``: the innermost frame of the model's own code."""
    frame = user_frame(source_info)
    if frame is None:
        return None
    return f"{os.path.basename(frame.file_name)}:{frame.line_num}", frame.function_name


def _sets_sharding(eqn) -> bool:
    """The equation sets a sharding: ``reshard``, ``sharding_constraint``, or an op given an ``out_sharding``."""
    if auto_regions.crossing(eqn) == auto_regions.ENTER:  # a library call's implicit reshard into auto_axes
        return True
    if not any(_explicit(v.aval) for v in eqn.outvars if hasattr(v, "aval")):
        return False  # inside auto_axes (an embedding lookup): onto an Auto copy of the mesh, where XLA decides
    if eqn.primitive.name in ("reshard", "sharding_constraint"):
        return True
    return any(
        eqn.params.get(name) is not None
        for name in _SETTING_PARAMS
        if not (name == "sharding" and eqn.primitive.name == "convert_element_type")
    )


def _spec_of(value: Any) -> tuple:
    """The type's spec as plain entries (None, an axis, a tuple of axes), padded to the rank; () without a mesh."""
    sharding = getattr(value, "sharding", None)
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return (None,) * len(getattr(value, "shape", ()))
    entries = tuple(None if e is PartitionSpec.UNCONSTRAINED else spec_entry(e) for e in spec)
    return entries + (None,) * (len(value.shape) - len(entries))


def _axes_attr(aval, name: str) -> tuple[str, ...]:
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    return tuple(sorted(getattr(spec, name, ()) or ()))


def _axes(entries) -> list[str]:
    return [axis for entry in entries for axis in spec_axes(entry)]


def _communication(eqn, var) -> str:
    """The communication an equation implies, from its operands' and output's types; "" for none."""
    if auto_regions.crossing(eqn):  # into or out of auto_axes (explorer/auto_regions.py)
        return auto_regions.communication(eqn, var)
    name = eqn.primitive.name
    if name == "reshard" and var is eqn.outvars[0]:
        source, target = eqn.invars[0].aval, var.aval
        if _explicit(source) and _explicit(target) and _spec_of(source) != _spec_of(target):
            return f"reshard {PartitionSpec(*_spec_of(source))} -> {PartitionSpec(*_spec_of(target))}"
        return ""
    if name == "dot_general":
        (lhs_contract, rhs_contract), _ = eqn.params["dimension_numbers"]
        lhs, rhs = _spec_of(eqn.invars[0].aval), _spec_of(eqn.invars[1].aval)
        shared = sorted(set(_axes(lhs[d] for d in lhs_contract)) & set(_axes(rhs[d] for d in rhs_contract)))
        if not shared:
            return ""
        out = set(_axes(_spec_of(var.aval)))
        unreduced = set(_axes_attr(var.aval, "unreduced"))
        parts = []
        for axis in shared:
            if axis in unreduced:
                parts.append(f"partial sums over {axis!r} left unreduced")
            elif axis in out:
                parts.append(f"reduce-scatter over {axis!r}")
            else:
                parts.append(f"all-reduce over {axis!r}")
        return "contraction over a dimension both operands shard: " + ", ".join(parts)
    return ""


def _explicit(aval) -> bool:
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    return bool(mesh is not None and AxisType.Explicit in getattr(mesh, "axis_types", ()))


def _activation_rows(rows: tuple[TypedValue, ...]) -> tuple[AbstractArray, ...]:
    """The equations that set a sharding as activation arrays: ``activations/<source line>/<n-th there>``."""
    arrays, counters = [], {}
    for row in rows:
        where = row.module or row.function.removesuffix(".__call__") or "program"
        ordinal = counters.get(where, 0)
        counters[where] = ordinal + 1
        how = f"{row.op} at {row.source} ({row.function}): the spec of its output's type"
        if row.unreduced:
            how += f"; unreduced over {', '.join(row.unreduced)}"
        how += f"; communication: {row.communication}" if row.communication else ""
        runs = f"; runs {row.runs}x per step (loop body)" if row.runs > 1 else ""
        arrays.append(
            AbstractArray(
                f"activations/{where}/{ordinal}",
                "activation",
                row.shape,
                row.dtype,
                _as_names(row.spec),
                note=how + runs,
                annotation="type",
                module=where,
                runs_per_step=row.runs,
                semantics="explicit",
                type_spec=row.spec,
                source=row.source,
            )
        )
    return tuple(arrays)


def _as_names(spec: tuple) -> tuple:
    """A type's spec entries as an array's names: None stays None (no name), an entry its mesh axes."""
    return tuple(None if entry is None else spec_axes(entry) for entry in spec)


def _output(closed, values: tuple[TypedValue, ...], framework: str) -> AbstractArray:
    aval = closed.jaxpr.outvars[0].aval
    spec = _spec_of(aval)
    return AbstractArray(
        "activations/output",
        "activation",
        tuple(aval.shape),
        str(aval.dtype),
        _as_names(spec),
        note="model output; its sharding is its type's",
        annotation="type",
        module="output",
        semantics="explicit",
        type_spec=spec,
    )


# --- refusals -----------------------------------------------------------------------------------------------------

_FIXES = (
    (
        "Contracting dimensions are sharded",
        "its contracting dimensions are sharded and JAX cannot tell how to shard the output. Fix: pass "
        "out_sharding=P(...) to that call, or change the rule that shards its contracting dimension",
    ),
    (
        "acts as an assert",
        "on a mesh whose axes are all Explicit, with_sharding_constraint is an assert and the value is sharded "
        "otherwise (Flax Linen's logical constraints and boxed parameters do this). Fix: use Auto axes for this "
        "model, or jax.sharding.reshard in its code",
    ),
    ("evenly divide", "a dimension the mesh does not divide evenly. Fix: change the rule that shards it, or the mesh or the model's size"),
)


def refusal(model_name: str, error: Exception) -> ExplorerError:
    """JAX's refusal of an Explicit-axis program as one message naming the operation, the model's line and the fix."""
    text = trace.error_text(error)
    where, op = _where(error)
    for needle, fix in _FIXES:
        if needle in text:
            return ExplorerError("model", model_name, f"is refused by JAX under Explicit axes at {where}{op}: {fix}. (JAX: {text})")
    return ExplorerError("model", model_name, f"could not be traced under Explicit axes at {where}{op}: {text}")


def _where(error: Exception) -> tuple[str, str]:
    """The model's source line the error came from (``file:line `code```) and the library call made there."""
    frames = traceback.extract_tb(error.__traceback__)
    index = max((i for i, f in enumerate(frames) if not library_file(f.filename)), default=None)
    if index is None:
        return "an unknown line", ""
    frame = frames[index]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    where = f"{os.path.basename(frame.filename)}:{frame.lineno} ({frame.name}: `{code}`)"
    call = next((f.name for f in frames[index + 1 :] if library_file(f.filename)), "")
    return where, f" in {call}()" if call else ""
