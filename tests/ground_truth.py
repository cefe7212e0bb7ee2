"""Ground truth from Flax's own recipes and JAX, computed without the explorer's analysis.

- Linen: ``jax.eval_shape(model.init)`` under the mesh and rules; each parameter's
  sharding by the recipe its authors use: ``nn.logical_to_mesh_sharding`` of
  ``nn.get_partition_spec`` (or of ``nn_partitioning.get_axis_names(params_axes)`` for
  ``flax.linen.partitioning`` models), or ``nn.get_sharding`` for models annotated
  with mesh axes; Adam's moments take their parameter's sharding. Then the guide's
  ``init_fn`` (``TrainState.create`` of ``model.init``'s params) is jitted with those
  out_shardings and really run.
- NNX: ``nnx.get_abstract_model`` under the mesh and ``nnx.logical_axis_rules``, and the
  model and ``nnx.Optimizer`` really built in a jitted init with Flax's eager sharding.
- Activations: the forward pass's jaxpr under the real mesh and rules, with the
  code its output does not need removed by JAX's own dead-code elimination (XLA
  keeps no more), every ``sharding_constraint`` in program order except those
  applied to a parameter argument itself.

What each materialised leaf really is on the devices (spec, shard shape, bytes, how
many devices hold each block, which block each device holds) is read from the arrays.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.core import meta
from flax.linen import partitioning as nn_partitioning
from flax.training import train_state
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from explorer.models import build_model


def real_mesh(layout):
    axes = tuple(layout.mesh.axes)
    shape = tuple(layout.mesh.shape)
    return jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes), devices=jax.devices()[: math.prod(shape)])


def normal(spec, ndim: int) -> tuple:
    """A spec as a tuple of mesh-axis tuples, one per dimension: comparable whatever its spelling."""
    entries = list(spec) + [None] * (ndim - len(spec))
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)


def _path(path) -> str:
    return "/".join(p for p in jax.tree_util.keystr(path, simple=True, separator="/").split("/") if p != "value")


def _zeros(built):
    return tuple(jnp.zeros(i.shape, i.dtype) for i in built.inputs)


def describe(leaf) -> dict:
    """What a materialised array really is on the devices."""
    sharding = leaf.sharding
    indices = sharding.devices_indices_map(leaf.shape)
    blocks: dict[tuple, list[int]] = {}
    for device, index in indices.items():
        key = tuple((s.start or 0, leaf.shape[d] if s.stop is None else s.stop) for d, s in enumerate(index))
        blocks.setdefault(key, []).append(device.id)
    first = leaf.addressable_shards[0]
    return {
        "shape": tuple(leaf.shape),
        "spec": normal(sharding.spec, leaf.ndim),
        "shard_shape": tuple(first.data.shape),
        "bytes_per_device": first.data.nbytes,
        "replication": len(blocks[next(iter(blocks))]),
        "tiles": {k: sorted(v) for k, v in blocks.items()},
    }


# --- Linen ---------------------------------------------------------------------------------

def linen_state(layout, recipe: str = "logical") -> dict[str, dict]:
    """Path -> the really materialised TrainState leaf, under the authors' recipe.

    ``logical``: ``nn.logical_to_mesh_sharding``; ``mesh``: ``nn.get_sharding``; ``eager``:
    no out_shardings, each variable where Flax's eager sharding put it (NNX bridges).
    """
    built = build_model(layout.model)
    mesh, rules = real_mesh(layout), layout.rules_for_flax()
    xs = _zeros(built)
    tx = optax.adam(1e-3)

    def init(key, *inputs):
        variables = built.module.init(key, *built.model_args(inputs))
        return train_state.TrainState.create(apply_fn=built.module.apply, params=variables["params"], tx=tx)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        if recipe == "eager":  # NNX-in-Linen: Flax places each variable itself when it creates it
            state = jax.jit(init)(jax.random.key(0), *xs)
        else:
            variables = jax.eval_shape(built.module.init, jax.random.key(0), *built.model_args(xs))
            param_shardings = _linen_param_shardings(variables, mesh, rules, recipe)
            abstract_state = jax.eval_shape(init, jax.random.key(0), *xs)
            out_shardings = _state_shardings(abstract_state, param_shardings, mesh)
            state = jax.jit(init, out_shardings=out_shardings)(jax.random.key(0), *xs)
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=lambda x: isinstance(x, meta.AxisMetadata))[0]
    return {_path(p): describe(jax.tree_util.tree_leaves(leaf)[0]) for p, leaf in leaves}


def _linen_param_shardings(variables, mesh, rules, recipe) -> dict[str, NamedSharding]:
    params = variables["params"]
    if "params_axes" in variables:  # T5X's recipe
        axes = nn_partitioning.get_axis_names(variables["params_axes"])
        specs = jax.tree_util.tree_map(lambda s: nn.logical_to_mesh_axes(tuple(s), rules), axes,
                                       is_leaf=lambda x: isinstance(x, PartitionSpec))
        named = {_path(p): NamedSharding(mesh, s) for p, s in jax.tree_util.tree_flatten_with_path(
            specs, is_leaf=lambda x: isinstance(x, PartitionSpec))[0]}
        return {"params/" + k: v for k, v in named.items()}
    boxed = {"params": params}
    if recipe == "mesh":
        tree = nn.get_sharding(boxed, mesh)
    else:
        tree = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules)
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, NamedSharding))[0]
    return {_path(p): s for p, s in leaves}


def _state_shardings(abstract_state, param_shardings, mesh):
    """Each parameter its recipe's sharding; Adam's moments their parameter's; counters replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())

    def pick(path, _):
        text = _path(path)
        if text in param_shardings:
            return param_shardings[text]
        for name, sharding in param_shardings.items():
            if text.endswith("/" + name[len("params/"):]):
                return sharding
        return replicated

    return jax.tree_util.tree_map_with_path(pick, abstract_state)


def linen_activations(layout) -> list[tuple]:
    """(shape, spec, dtype) of every constraint of the forward pass under the real mesh, except on parameter arguments."""
    built = build_model(layout.model)
    mesh, rules = real_mesh(layout), layout.rules_for_flax()
    xs = _zeros(built)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract = jax.eval_shape(built.module.init, jax.random.key(0), *built.model_args(xs))["params"]
    params = jax.tree_util.tree_map(
        lambda x: jax.tree_util.tree_leaves(x)[0] if isinstance(x, meta.AxisMetadata) else x, abstract,
        is_leaf=lambda x: isinstance(x, meta.AxisMetadata),
    )
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        closed = jax.make_jaxpr(lambda p, *x: built.module.apply({"params": p}, *built.model_args(x)))(params, *xs)
    return _live_constraints(closed.jaxpr, len(jax.tree_util.tree_leaves(params)))


def activations(layout, framework: str) -> list[tuple[tuple, tuple]]:
    """(shape, spec) of every constraint of the forward pass, in program order."""
    found = linen_activations(layout) if framework == "linen" else nnx_activations(layout)
    return [(shape, normal(spec, len(shape))) for shape, spec, _ in found]


def activation_bytes(layout, framework: str) -> int:
    """Bytes one device holds of every constraint's value, by JAX's own shard shape (each once)."""
    mesh = real_mesh(layout)
    found = linen_activations(layout) if framework == "linen" else nnx_activations(layout)
    return sum(math.prod(NamedSharding(mesh, spec).shard_shape(shape)) * dtype.itemsize for shape, spec, dtype in found)


# --- NNX -----------------------------------------------------------------------------------

def nnx_state(layout) -> tuple[dict[str, dict], dict[str, tuple]]:
    """Path -> the really materialised (model state, optimizer state) leaf, and Flax's abstract specs."""
    built = build_model(layout.model)
    mesh, rules = real_mesh(layout), layout.rules_for_flax()
    build = built.module

    def init():
        model = build()
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        return nnx.state(model), nnx.state(optimizer)

    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        _, abstract = nnx.get_abstract_model(build, mesh)
        state = jax.jit(init)()
    specs = {
        _path(p): normal(v.sharding.spec, len(v.shape))
        for p, v in jax.tree_util.tree_flatten_with_path(abstract)[0]
    }
    leaves = {}
    for part in state:
        leaves.update({_path(p): describe(leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(part)[0]})
    return leaves, specs


def nnx_activations(layout) -> list[tuple]:
    built = build_model(layout.model)
    mesh, rules = real_mesh(layout), layout.rules_for_flax()
    xs = _zeros(built)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        graphdef, abstract = nnx.get_abstract_model(built.module, mesh)
        closed = jax.make_jaxpr(lambda s, *x: nnx.merge(graphdef, s)(*built.model_args(x)))(abstract, *xs)
    return _live_constraints(closed.jaxpr, len(jax.tree_util.tree_leaves(abstract)))


def _live_constraints(jaxpr, n_parameters: int) -> list[tuple]:
    """The constraints left after JAX's dead-code elimination (a private function: JAX's reference, not ours)."""
    from jax._src.interpreters import partial_eval

    live, used_inputs = partial_eval.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    kept = [v for v, used in zip(jaxpr.invars, used_inputs) if used]
    given = set(jaxpr.invars[:n_parameters])
    parameters = {new for old, new in zip(kept, live.invars) if old in given}
    return list(_constraints(live, parameters))


def _constraints(jaxpr, parameters):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            if eqn.invars[0] in parameters:
                continue
            sharding = eqn.params["sharding"]
            aval = eqn.invars[0].aval
            yield tuple(aval.shape), sharding.spec, aval.dtype
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from _constraints(inner, set())


def compare(report, truth: dict[str, dict], kinds=("param", "opt_state")) -> list[str]:
    """Every disagreement between the report and the materialised truth, as readable lines."""
    problems = []
    ours = [a for a in report.arrays if a.kind in kinds]
    if sorted(a.path for a in ours) != sorted(truth):
        missing = sorted(set(truth) - {a.path for a in ours})[:5]
        extra = sorted({a.path for a in ours} - set(truth))[:5]
        problems.append(f"paths differ: missing {missing}, extra {extra}")
    for info in ours:
        real = truth.get(info.path)
        if real is None:
            continue
        mine = {
            "shape": info.shape, "spec": normal(info.spec, len(info.shape)), "shard_shape": info.shard_shape,
            "bytes_per_device": info.bytes_per_device, "replication": info.replication,
            "tiles": {tuple(t.index): sorted(t.devices) for t in report.tiles(info.path)},
        }
        for field, value in mine.items():
            if value != real[field]:
                problems.append(f"{info.path} {field}: report {value}, JAX {real[field]}")
    return problems
