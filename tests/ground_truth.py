"""Ground truth from Flax's own recipes and JAX, computed with no explorer code at all.

This module imports nothing from ``explorer``: it names paths with JAX's ``keystr``, resolves
rules only through Flax, and tells weight constraints from activations by data flow on the
jaxpr, with its own code. A model is handed over as the model's author wrote it: a Linen
module (or a function building an ``nnx.Module``) and its inputs (anything with ``shape``,
``dtype`` and optionally ``model_arg``); :func:`factory` imports a ``package.module:function``
factory itself.

- Linen: ``jax.eval_shape(model.init)`` under ``jax.set_mesh`` (Auto axes) and
  ``nn.logical_axis_rules``; each parameter's sharding by the recipe its authors use:
  ``nn.logical_to_mesh_sharding`` of ``nn.get_partition_spec`` for boxes, of
  ``nn_partitioning.get_axis_names(params_axes)`` for ``flax.linen.partitioning`` models, or
  ``nn.get_sharding`` for models annotated with mesh axes; Adam's moments take their
  parameter's sharding. The guide's ``init_fn`` (``TrainState.create`` of ``model.init``'s
  params, boxes kept) is jitted with those out_shardings and really run. ``eager``: no
  out_shardings (NNX-in-Linen bridges: Flax places each NNX variable as it creates it).
- NNX: ``nnx.get_abstract_model`` under the mesh and the rules (Flax's ``get_partition_spec``
  of every variable), and the model and ``nnx.Optimizer`` really built in a jitted init with
  Flax's eager sharding.
- Paths: ``jax.tree_util.keystr(path, simple=True, separator="/")`` of the state, flattened
  with boxes (``flax.core.meta.AxisMetadata``) and ``nnx.Variable`` as leaves: nothing is ever
  dropped from a path (a module named ``value`` keeps its name); a box's or a Variable's own
  ``value`` attribute is never part of a path because the flattening stops at the box.
- Constraints: the forward pass (the state's parameters as the train step passes them, boxes
  kept) traced by ``jax.make_jaxpr`` under the real mesh (Auto axes) and the rules, the code
  its output does not need removed by JAX's own dead-code elimination, every
  ``sharding_constraint`` equation in program order (a loop body once), each with the spec
  JAX really received (so Linen's or NNX's semantics, whichever the call site used). A
  constraint is an *activation* when its operand depends, by data flow through the jaxpr
  (into calls, scans, conds and loops), on a model input; otherwise (a parameter read, a cast,
  slice or transpose of a weight, a constant) it is a *weight* constraint.

What each materialised leaf really is on the devices (spec, shard shape, bytes, how many
devices hold each block, which block each device holds) is read from the arrays.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.core import meta
from flax.linen import partitioning as nn_partitioning
from flax.training import train_state
from jax.sharding import AxisType, NamedSharding, PartitionSpec

# The state is materialised to read where each leaf really landed (its sharding, shape, dtype), never its values:
# XLA's CPU code generation at its lowest effort compiles these init functions several times faster and places every
# array the same way (sharding propagation and the SPMD partitioner run on the HLO, before the CPU backend).
MATERIALISE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


# --- the model, the mesh, the rules, as plain data -----------------------------------------


@dataclasses.dataclass(frozen=True)
class Model:
    """What a factory returns: the Linen module or the NNX builder, and the inputs."""

    module: Any
    inputs: tuple

    @property
    def framework(self) -> str:
        return "linen" if isinstance(self.module, nn.Module) else "nnx"

    def zeros(self) -> tuple:
        return tuple(jnp.zeros(tuple(i.shape), jnp.dtype(i.dtype)) for i in self.inputs)

    def model_args(self, xs: Sequence) -> tuple:
        return tuple(x for x, i in zip(xs, self.inputs) if getattr(i, "model_arg", True))

    def builder(self) -> Callable[[], Any]:
        return (lambda: self.module) if isinstance(self.module, nnx.Module) else self.module


def model_of(built: Any) -> Model:
    """A factory's ``(module, inputs, loss)`` triple, or any object with ``module`` and ``inputs``."""
    if isinstance(built, tuple):
        return Model(built[0], tuple(built[1]))
    return Model(built.module, tuple(built.inputs))


def factory(name: str, options: dict | None = None) -> Model:
    """Import ``package.module:function`` and call it with ``options`` (the ground truth's own import)."""
    module_name, function_name = name.split(":")
    return model_of(getattr(importlib.import_module(module_name), function_name)(**(options or {})))


def mesh_of(shape: Sequence[int], axes: Sequence[str]) -> jax.sharding.Mesh:
    """A real mesh with Auto axes (what Flax's logical constraints want) on this process' first devices."""
    shape, axes = tuple(shape), tuple(axes)
    return jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes), devices=jax.devices()[: math.prod(shape)])


def flax_rules(rules: Sequence) -> tuple:
    """Rules from the layout file form (``[name, null | axis | [axes]]``) to Flax's ``((name, axes), ...)``."""
    return tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in rules)


def normal(spec, ndim: int) -> tuple:
    """A spec as a tuple of mesh-axis tuples, one per dimension: comparable whatever its spelling."""
    entries = list(spec) + [None] * (ndim - len(spec))
    return tuple(() if e is None or e is PartitionSpec.UNCONSTRAINED else (e,) if isinstance(e, str) else tuple(e) for e in entries)


def path_text(path) -> str:
    """JAX's own key path, nothing dropped (flatten with boxes/Variables as leaves so no ``value`` appears)."""
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def _is_box(x) -> bool:
    return isinstance(x, meta.AxisMetadata)


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def _array_of(leaf):
    """The array in a box / Variable leaf (a box holds exactly one)."""
    if _is_variable(leaf):
        return leaf.get_value()
    leaves = jax.tree_util.tree_leaves(leaf)
    assert len(leaves) == 1, f"a state leaf holding {len(leaves)} arrays"
    return leaves[0]


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


def linen_state(model: Model, mesh, rules, recipe: str = "logical") -> dict[str, dict]:
    """Path -> the really materialised TrainState leaf, under the authors' recipe.

    ``logical``: ``nn.logical_to_mesh_sharding``; ``mesh``: ``nn.get_sharding``; ``eager``:
    no out_shardings, each variable where Flax's eager sharding put it (NNX bridges).
    """
    xs = model.zeros()
    tx = optax.adam(1e-3)
    module = model.module

    def init(key, *inputs):
        variables = module.init(key, *model.model_args(inputs))
        return train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=tx)

    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        if recipe == "eager":
            state = jax.jit(init, compiler_options=MATERIALISE)(jax.random.key(0), *xs)
        else:
            variables = jax.eval_shape(module.init, jax.random.key(0), *model.model_args(xs))
            params = linen_param_shardings(variables, mesh, rules, recipe)
            abstract_state = jax.eval_shape(init, jax.random.key(0), *xs)
            shardings = _state_shardings(abstract_state, params, mesh)
            state = jax.jit(init, out_shardings=shardings, compiler_options=MATERIALISE)(jax.random.key(0), *xs)
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_box)[0]
    return {path_text(p): describe(_array_of(leaf)) for p, leaf in leaves}


def linen_param_shardings(variables, mesh, rules, recipe: str = "logical") -> dict[str, NamedSharding]:
    """``params/<path>`` -> the parameter's sharding by Flax's recipe (boxes; else ``params_axes``; else replicated)."""
    params = variables["params"]
    boxed = {"params": params}
    if recipe == "mesh":
        tree = nn.get_sharding(boxed, mesh)
    else:
        tree = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules)
    found = {path_text(p): s for p, s in jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, NamedSharding))[0]}
    if "params_axes" in variables:  # T5X's recipe: names in the params_axes collection, params unboxed
        axes = nn_partitioning.get_axis_names(variables["params_axes"])
        specs = nn.logical_to_mesh_sharding(axes, mesh, rules)
        for p, s in jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: isinstance(x, NamedSharding))[0]:
            key = "params/" + path_text(p)
            boxed_leaf = _box_at(params, p)
            if not boxed_leaf:
                found[key] = s
    return found


def _box_at(params, path) -> bool:
    node = params
    for entry in path:
        key = getattr(entry, "key", getattr(entry, "name", None))
        try:
            node = node[key]
        except (KeyError, TypeError):
            return False
    return _is_box(node)


def _state_shardings(abstract_state, param_shardings: dict[str, NamedSharding], mesh):
    """Each parameter its recipe's sharding; Adam's moments (``opt_state/<i>/mu|nu/<path>``) their parameter's."""
    replicated = NamedSharding(mesh, PartitionSpec())

    def pick(path, leaf):
        parts = path_text(path).split("/")
        key = "/".join(parts)
        if parts[0] == "opt_state":
            for i, part in enumerate(parts):
                if part in ("mu", "nu"):
                    key = "/".join(["params", *parts[i + 1 :]])
                    break
        sharding = param_shardings.get(key, replicated)
        return leaf.replace_boxed(sharding) if _is_box(leaf) else sharding

    return jax.tree_util.tree_map_with_path(pick, abstract_state, is_leaf=_is_box)


# --- NNX -----------------------------------------------------------------------------------


def nnx_state(model: Model, mesh, rules) -> tuple[dict[str, dict], dict[str, tuple]]:
    """Path -> the really materialised (model state, optimizer state) leaf, and Flax's abstract specs."""
    build = model.builder()

    def init():
        built = build()
        optimizer = nnx.Optimizer(built, optax.adam(1e-3), wrt=nnx.Param)
        return nnx.state(built), nnx.state(optimizer)

    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        _, abstract = nnx.get_abstract_model(build, mesh)
        state = jax.jit(init, compiler_options=MATERIALISE)()
    specs = {
        path_text(p): normal(v.sharding.spec, len(v.shape))
        for p, v in jax.tree_util.tree_flatten_with_path(abstract, is_leaf=_is_variable)[0]
        for v in [_array_of(v)]
    }
    leaves = {}
    for part in state:
        leaves.update(
            {path_text(p): describe(_array_of(leaf)) for p, leaf in jax.tree_util.tree_flatten_with_path(part, is_leaf=_is_variable)[0]}
        )
    return leaves, specs


# --- constraints of the forward pass --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One live ``sharding_constraint`` of the forward pass, as JAX received it."""

    shape: tuple[int, ...]
    spec: tuple  # normal form: one tuple of mesh axes per dimension
    dtype: Any
    name_stack: str  # JAX's name stack (Flax's module scopes), joined through the calls around it
    activation: bool  # its operand depends on a model input (else: a weight's constraint)


def constraints(model: Model, mesh, rules) -> list[Constraint]:
    """Every live constraint of the forward pass, in program order (a loop body once)."""
    xs = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in model.zeros())
    if model.framework == "linen":
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            abstract = jax.eval_shape(model.module.init, jax.random.key(0), *model.model_args(xs))["params"]
            closed = jax.make_jaxpr(lambda p, *x: model.module.apply({"params": p}, *model.model_args(x)))(abstract, *xs)
        n_state = len(jax.tree_util.tree_leaves(abstract))
    else:
        with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
            graphdef, abstract = nnx.get_abstract_model(model.builder(), mesh)
            closed = jax.make_jaxpr(lambda s, *x: nnx.merge(graphdef, s)(*model.model_args(x)))(abstract, *xs)
        n_state = len(jax.tree_util.tree_leaves(abstract))
    return _live_constraints(closed.jaxpr, n_state)


def activations(model: Model, mesh, rules, found: Sequence[Constraint] | None = None) -> list[tuple[tuple, tuple]]:
    """(shape, spec) of every activation constraint, in program order (of ``found``, ``constraints``' answer for
    these inputs, where the caller has it already)."""
    found = constraints(model, mesh, rules) if found is None else found
    return [(c.shape, c.spec) for c in found if c.activation]


def activation_bytes(model: Model, mesh, rules, found: Sequence[Constraint] | None = None) -> int:
    """Bytes one device holds of every activation constraint's value, by JAX's own shard shape (each once)."""
    found = constraints(model, mesh, rules) if found is None else found
    return sum(
        math.prod(NamedSharding(mesh, PartitionSpec(*c.spec)).shard_shape(c.shape)) * jnp.dtype(c.dtype).itemsize
        for c in found
        if c.activation
    )


def _live_constraints(jaxpr, n_state: int) -> list[Constraint]:
    """After JAX's dead-code elimination (a private function: JAX's reference, not ours)."""
    from jax._src.interpreters import partial_eval

    live, used_inputs = partial_eval.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    kept = [v for v, used in zip(jaxpr.invars, used_inputs) if used]
    model_inputs = set(jaxpr.invars[n_state:])
    dependent = {new for old, new in zip(kept, live.invars) if old in model_inputs}
    found: list[Constraint] = []
    _flow(live, dependent, "", found)
    return found


def _is_var(v) -> bool:
    return isinstance(v, jax.extend.core.Var)


def _sub(value):
    inner = getattr(value, "jaxpr", value)
    return inner if isinstance(inner, jax.extend.core.Jaxpr) else None


def _flow(jaxpr, dependent: set, prefix: str, found: list | None) -> set:
    """Mark every variable of ``jaxpr`` computed from a ``dependent`` one; record constraints in ``found``.

    Returns the marked variables. Calls are followed by position; a scan's or a while loop's
    carries until nothing changes (a carry fed by an input taints the next turn).
    """
    dep = set(dependent)
    for eqn in jaxpr.eqns:
        stack = "/".join(p for p in (prefix, str(eqn.source_info.name_stack)) if p)
        ins = [_is_var(v) and v in dep for v in eqn.invars]
        name = eqn.primitive.name
        if name == "sharding_constraint" and found is not None:
            aval = eqn.invars[0].aval
            spec = getattr(eqn.params["sharding"], "spec", PartitionSpec())
            found.append(Constraint(tuple(aval.shape), normal(spec, len(aval.shape)), aval.dtype, stack, bool(ins[0])))
        outs = _flow_call(eqn, ins, stack, found)
        dep.update(v for v, d in zip(eqn.outvars, outs) if d)
    return dep


def _run(sub, ins: list[bool], stack: str, found) -> list[bool]:
    marked = _flow(sub, {v for v, d in zip(sub.invars, ins) if d and _is_var(v)}, stack, found)
    return [_is_var(v) and v in marked for v in sub.outvars]


def _scan_counts(params, n: int) -> tuple[int, int]:
    """How many of a scan's operands are constants and carries (older JAX: counts; newer: a flat tree)."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].update(list(range(n))).unpack()
    return len(list(consts)), len(list(carry))


def _flow_call(eqn, ins: list[bool], stack: str, found) -> list[bool]:
    """Which outputs of ``eqn`` depend on a model input (and the constraints of the programs it calls)."""
    name, params = eqn.primitive.name, eqn.params
    anything = any(ins)
    if name == "scan":
        body = _sub(params["jaxpr"])
        n_consts, n_carry = _scan_counts(params, len(ins))
        ins = list(ins)
        while True:  # the carries' marks reach a fixed point
            outs = _run(body, ins, stack, None)
            carry = [a or b for a, b in zip(ins[n_consts : n_consts + n_carry], outs[:n_carry])]
            if carry == ins[n_consts : n_consts + n_carry]:
                break
            ins[n_consts : n_consts + n_carry] = carry
        return _run(body, ins, stack, found)
    if name == "while":
        cond, body = _sub(params["cond_jaxpr"]), _sub(params["body_jaxpr"])
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        carry = list(ins[nc + nb :])
        while True:
            outs = _run(body, ins[nc : nc + nb] + carry, stack, None)
            new = [a or b for a, b in zip(carry, outs)]
            test = _run(cond, ins[:nc] + new, stack, None)
            if any(test):  # the number of turns depends on an input: so does every carry
                new = [True] * len(new)
            if new == carry:
                break
            carry = new
        _run(cond, ins[:nc] + carry, stack, found)
        _run(body, ins[nc : nc + nb] + carry, stack, found)
        return carry
    if name == "cond":
        outs = [ins[0]] * len(eqn.outvars)
        for branch in params["branches"]:
            outs = [a or b for a, b in zip(outs, _run(_sub(branch), ins[1:], stack, found))]
        return outs
    subs = [
        s
        for value in params.values()
        for item in (value if isinstance(value, (tuple, list)) else (value,))
        for s in [_sub(item)]
        if s is not None
    ]
    if not subs:
        return [anything] * len(eqn.outvars)
    outs = [False] * len(eqn.outvars)
    for sub in subs:
        if len(sub.invars) == len(ins) and len(sub.outvars) == len(eqn.outvars):
            outs = [a or b for a, b in zip(outs, _run(sub, ins, stack, found))]
        else:  # a call whose arguments do not map by position: everything in it depends on any input given
            _run(sub, [anything] * len(sub.invars), stack, found)
            outs = [a or anything for a in outs]
    return outs


# --- comparing a report ---------------------------------------------------------------------


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
            "shape": tuple(info.shape),
            "spec": normal(info.spec, len(info.shape)),
            "shard_shape": tuple(info.shard_shape),
            "bytes_per_device": info.bytes_per_device,
            "replication": info.replication,
            "tiles": {tuple(tuple(r) for r in t.index): sorted(t.devices) for t in report.tiles(info.path)},
        }
        for field, value in mine.items():
            if value != real[field]:
                problems.append(f"{info.path} {field}: report {value}, JAX {real[field]}")
    return problems
