"""Ground truth for Explicit mesh axes, from JAX and Flax alone: it imports no explorer code.

Under ``jax.set_mesh`` of an Explicit ``jax.make_mesh``:
- ``state_specs``: ``nnx.eval_shape`` of the model and of its ``nnx.Optimizer``, each leaf's sharding as its type
  carries it, keyed by the path ``nnx.to_flat_state`` gives ("embedder/embedding", "opt_state/0/mu/...");
- ``materialised_specs``: the model built for real under the mesh (Flax's eager sharding), each array's sharding;
- ``forward_rows``: the forward pass's jaxpr, every equation that sets a sharding (``reshard``,
  ``sharding_constraint``, an op given an ``out_sharding``) on an Explicit mesh from the model's own code, in
  program order, with its output's shape and spec, and how many times it runs (scan lengths);
- ``forward_output_spec``: the jitted forward pass run on real arrays, its output's sharding.

A Flax Linen model (a module written for Explicit axes, such as the built-in transformer) the same way, by the Flax
guide's recipe: ``linen_state_specs`` from ``jax.eval_shape`` of its ``init_fn`` (``model.init``, then
``TrainState.create`` with Adam; paths by JAX's ``keystr``, boxes as leaves), ``linen_materialised`` that init and the
forward pass jitted and run for real (one compile), ``linen_forward_rows`` from the forward pass's jaxpr.
"""

from __future__ import annotations

import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.core import meta
from flax.training import train_state
from jax.sharding import AxisType, NamedSharding, PartitionSpec

# A forward pass run only to read its output's sharding: XLA's CPU code generation at its lowest effort compiles it
# faster and places every array the same way (sharding propagation and the partitioner run before the CPU backend).
MATERIALISE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
_LIBRARIES = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, __import__("flax"), optax))


def mesh(shape: tuple[int, ...], axes: tuple[str, ...]):
    return jax.make_mesh(shape, axes, axis_types=(AxisType.Explicit,) * len(axes), devices=jax.devices()[: math.prod(shape)])


def normal(spec, ndim: int) -> tuple:
    """A spec's entries padded to the rank, one-axis tuples as the axis: comparable."""
    entries = []
    for entry in tuple(spec):
        if isinstance(entry, (tuple, list)):
            entry = entry[0] if len(entry) == 1 else tuple(entry) if entry else None
        entries.append(entry)
    return tuple(entries) + (None,) * (ndim - len(entries))


def _flat(obj) -> dict[str, object]:
    """path -> array (or ShapeDtypeStruct) of every leaf of the object's state, a plain array attribute included."""
    return {"/".join(str(p) for p in path): getattr(leaf, "get_value", lambda: leaf)() for path, leaf in nnx.to_flat_state(nnx.state(obj))}


def state_specs(builder, the_mesh, rules=()) -> tuple[dict[str, tuple], dict[str, tuple]]:
    """(parameters, optimizer state): path -> the spec in the leaf's type, from ``nnx.eval_shape`` under the mesh."""
    with jax.set_mesh(the_mesh), nnx.logical_axis_rules(rules):
        model = nnx.eval_shape(builder)
        optimizer = nnx.eval_shape(lambda: nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param))
    return tuple({path: normal(leaf.sharding.spec, len(leaf.shape)) for path, leaf in _flat(obj).items()} for obj in (model, optimizer))


def materialised_specs(builder, the_mesh, rules=()) -> dict[str, tuple]:
    """path -> the sharding of each parameter array Flax creates for real under the mesh (eager sharding)."""
    with jax.set_mesh(the_mesh), nnx.logical_axis_rules(rules):
        model = builder()
    return {path: normal(leaf.sharding.spec, leaf.ndim) for path, leaf in _flat(model).items()}


def _inputs(inputs, the_mesh, input_specs):
    return tuple(
        jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=NamedSharding(the_mesh, PartitionSpec(*spec)))
        for i, spec in zip(inputs, input_specs)
    )


def _forward_jaxpr(builder, inputs, the_mesh, input_specs, rules):
    with jax.set_mesh(the_mesh), nnx.logical_axis_rules(rules):
        graphdef, state = nnx.split(nnx.eval_shape(builder))
        return jax.make_jaxpr(lambda s, *xs: nnx.merge(graphdef, s)(*xs))(state, *_inputs(inputs, the_mesh, input_specs))


def _from_model_code(eqn) -> bool:
    """A frame of the equation's traceback is the model's own code: not JAX, Flax or optax, nor the explorer's machinery
    (its built-in models, ``explorer/models/``, are model code)."""
    traceback = eqn.source_info.traceback
    frames = traceback.frames if traceback is not None else ()
    return any(
        not f.file_name.startswith(_LIBRARIES)
        and not f.file_name.startswith("<")
        and (os.sep + "explorer" + os.sep not in f.file_name or os.sep + "explorer" + os.sep + "models" + os.sep in f.file_name)
        for f in frames
    )


def _on_explicit_mesh(aval) -> bool:
    sharding = getattr(aval, "sharding", None)
    return AxisType.Explicit in getattr(getattr(sharding, "mesh", None), "axis_types", ())


def forward_rows(builder, inputs, the_mesh, input_specs, rules=()) -> list[tuple[tuple, tuple, int]]:
    """(shape, spec, runs per step) of every equation of the forward pass that sets a sharding, in program order."""
    return _setting_rows(_forward_jaxpr(builder, inputs, the_mesh, input_specs, rules).jaxpr)


def _setting_rows(program) -> list[tuple[tuple, tuple, int]]:
    """(shape, spec, runs per step) of every equation of ``program`` that sets a sharding from the model's code."""
    rows: list[tuple[tuple, tuple, int]] = []

    def walk(jaxpr, runs):
        for eqn in jaxpr.eqns:
            sets = eqn.primitive.name in ("reshard", "sharding_constraint") or any(
                eqn.params.get(name) is not None
                for name in ("out_sharding", "dst_sharding", "sharding")
                if not (name == "sharding" and eqn.primitive.name == "convert_element_type")
            )
            if sets and _from_model_code(eqn):
                for var in eqn.outvars:
                    if _on_explicit_mesh(var.aval):
                        rows.append((tuple(var.aval.shape), normal(var.aval.sharding.spec, len(var.aval.shape)), runs))
            times = int(eqn.params["length"]) if eqn.primitive.name == "scan" else 1
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        walk(inner, runs * times)

    walk(program, 1)
    return rows


def forward_output_spec(builder, inputs, the_mesh, input_specs, rules=()) -> tuple:
    """The model output's sharding from the jitted forward pass run on real arrays under the mesh."""
    with jax.set_mesh(the_mesh), nnx.logical_axis_rules(rules):
        graphdef, state = nnx.split(builder())
        arguments = [
            jax.device_put(jnp.zeros(i.shape, i.dtype), NamedSharding(the_mesh, PartitionSpec(*spec)))
            for i, spec in zip(inputs, input_specs)
        ]
        forward = jax.jit(lambda s, *xs: nnx.merge(graphdef, s)(*xs), compiler_options=MATERIALISE)
        output = forward(state, *arguments)
    return normal(output.sharding.spec, output.ndim)


# --- Flax Linen -------------------------------------------------------------------------------------------------------


def _is_box(x) -> bool:
    return isinstance(x, meta.AxisMetadata)


def _linen_flat(tree) -> dict[str, object]:
    """path -> the array (or ShapeDtypeStruct) of every leaf, boxes as leaves: JAX's keystr, nothing dropped."""
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_box)[0]
    return {jax.tree_util.keystr(path, simple=True, separator="/"): jax.tree_util.tree_leaves(leaf)[0] for path, leaf in flat}


def _linen_init(module, inputs):
    """The Flax guide's init_fn: ``model.init`` on the model's inputs, then ``TrainState.create`` with Adam 1e-3."""

    def init(key, *xs):
        variables = module.init(key, *(x for x, i in zip(xs, inputs) if getattr(i, "model_arg", True)))
        return train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=optax.adam(1e-3))

    return init


def _linen_apply(module, inputs):
    return lambda params, *xs: module.apply({"params": params}, *(x for x, i in zip(xs, inputs) if getattr(i, "model_arg", True)))


def linen_state_specs(module, inputs, the_mesh, input_specs, rules=()) -> dict[str, tuple]:
    """path -> the spec in each TrainState leaf's type (parameters, step, Adam's state), from ``jax.eval_shape`` of the
    init under the mesh and the rules."""
    with jax.set_mesh(the_mesh), nn.logical_axis_rules(rules):
        state = jax.eval_shape(_linen_init(module, inputs), jax.random.key(0), *_inputs(inputs, the_mesh, input_specs))
    # the step is the Python int TrainState.create starts from: no sharding in its type, replicated where it lands
    return {path: normal(leaf.sharding.spec if leaf.sharding else (), len(leaf.shape)) for path, leaf in _linen_flat(state).items()}


def linen_materialised(module, inputs, the_mesh, input_specs, rules=()) -> tuple[dict[str, tuple], tuple]:
    """The init and the forward pass jitted and run for real under the mesh and the rules (one compile): path -> each
    materialised TrainState leaf's sharding, and the output's sharding."""
    init, apply = _linen_init(module, inputs), _linen_apply(module, inputs)

    def init_and_forward(key, *xs):
        state = init(key, *xs)
        return state, apply(state.params, *xs)

    with jax.set_mesh(the_mesh), nn.logical_axis_rules(rules):
        arguments = [
            jax.device_put(jnp.zeros(i.shape, i.dtype), NamedSharding(the_mesh, PartitionSpec(*spec)))
            for i, spec in zip(inputs, input_specs)
        ]
        state, output = jax.jit(init_and_forward, compiler_options=MATERIALISE)(jax.random.key(0), *arguments)
    specs = {path: normal(leaf.sharding.spec, leaf.ndim) for path, leaf in _linen_flat(state).items()}
    return specs, normal(output.sharding.spec, output.ndim)


def linen_forward_rows(module, inputs, the_mesh, input_specs, rules=()) -> list[tuple[tuple, tuple, int]]:
    """(shape, spec, runs per step) of every equation of the forward pass that sets a sharding, in program order (the
    parameters as the train step passes them: boxed)."""
    with jax.set_mesh(the_mesh), nn.logical_axis_rules(rules):
        xs = _inputs(inputs, the_mesh, input_specs)
        params = jax.eval_shape(_linen_init(module, inputs), jax.random.key(0), *xs).params
        closed = jax.make_jaxpr(_linen_apply(module, inputs))(params, *xs)
    return _setting_rows(closed.jaxpr)
