"""Stage 3, state: the traced train state's arrays, each with its names and, under Explicit axes, its type's spec.

``read(traced)`` takes stage 2's ``TracedState`` and gives a ``State``: the live objects a compile needs (the
built model, the optimizer, the state in the framework's own tree, NNX's graph definitions) and every leaf as an
``AbstractArray``.

- Linen: every ``flax.core.meta.AxisMetadata`` box (``nn.with_logical_partitioning``, ``nn.with_partitioning``,
  NNX-in-Linen bridges) gives its names through ``get_partition_spec()``; ``param_with_axes`` models give theirs
  through ``nn_partitioning.get_axis_names`` on the ``params_axes`` collection (their parameters stay unboxed, as
  T5X keeps them), and Adam's moments take their parameter's names from ``optimizer.init`` of the parameters boxed
  with those names.
- NNX: the model and its optimizer split into graph and state; names from ``out_sharding`` metadata as
  ``nnx.get_partition_spec`` reads each Variable (``get_var_pspec``), outside any rules (the metadata's own names).
- Explicit axes: each leaf's type (``ShapeDtypeStruct.sharding``) is the truth, kept beside its metadata names
  (``type_spec``): a variable whose initializer was given ``out_sharding=`` is sharded while
  ``nnx.get_partition_spec`` says ``P()``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import flax.linen as nn
import jax
import optax
from flax.core import meta
from flax.linen import partitioning as nn_partitioning

from explorer.errors import ExplorerError
from explorer.models import BuiltModel
from explorer.reading.arrays import AbstractArray, AxisName, Kind
from explorer.reading.types import spec_of
from explorer.reading.trace import TracedState


@dataclasses.dataclass(frozen=True)
class State:
    """The model built and its train state read: everything but the activations (what ``reading.live`` gives).

    ``state`` is the state's abstract leaves in the framework's own tree (Linen's ``TrainState`` with its boxes;
    NNX's ``(model state, optimizer state)``), ``state_arrays`` the same leaves as arrays, in tree-flatten order;
    ``variables`` is the forward pass's first argument (Linen's parameters, NNX's model state), ``module`` the
    Linen module to apply, ``graphdefs`` NNX's model and optimizer graph definitions. ``inputs`` are the model's
    inputs as arrays (names from the factory), ``root`` the top module's class name.
    """

    built: BuiltModel
    framework: str
    optimizer: optax.GradientTransformation
    state: Any
    state_arrays: tuple[AbstractArray, ...]
    inputs: tuple[AbstractArray, ...]
    variables: Any
    root: str = ""
    graphdefs: Any = None
    explicit: bool = False
    layout: tuple | None = None  # Explicit axes: the (mesh, rules) the state was traced under
    key: tuple = ()  # the reading's key (``build.build``'s)


def read(traced: TracedState) -> State:
    """The arrays of ``traced``'s state, with their names (and their types' specs under Explicit axes)."""
    built = traced.built
    inputs = tuple(
        AbstractArray(f"inputs/{i.name}", "input", tuple(i.shape), i.dtype, padded(i.logical_axes, len(i.shape)), semantics=built.framework)
        for i in built.inputs
    )
    if built.framework == "linen":
        tree = traced.tree
        arrays = _linen_state_arrays(tree, traced.optimizer, traced.params_axes)
        leaves = [jax.tree_util.tree_leaves(leaf)[0] for leaf in jax.tree_util.tree_leaves(tree, is_leaf=_is_box)]
        variables, graphdefs = tree.params, None
    else:
        from flax import nnx

        model, opt = traced.tree
        model_def, model_state = nnx.split(model)
        opt_def, opt_state = nnx.split(opt)
        arrays = _nnx_state_arrays(model_state, "param") + _nnx_state_arrays(opt_state, "opt_state")
        tree, variables, graphdefs = (model_state, opt_state), model_state, (model_def, opt_def)
        leaves = jax.tree_util.tree_leaves(tree)
    if traced.explicit:
        arrays = tuple(dataclasses.replace(a, type_spec=spec_of(leaf)) for a, leaf in zip(arrays, leaves))
    return State(
        built,
        built.framework,
        traced.optimizer,
        tree,
        arrays,
        inputs,
        variables,
        traced.root,
        graphdefs,
        traced.explicit,
        traced.layout,
        traced.key,
    )


def padded(names, ndim: int) -> tuple[AxisName, ...] | None:
    """Names padded with None to the rank: JAX replicates the trailing dimensions."""
    if names is None:
        return None
    names = tuple(tuple(n) if isinstance(n, list) else n for n in names)
    if len(names) > ndim:
        raise ExplorerError("logical axes", list(names), f"name {len(names)} dimensions of an array of rank {ndim}")
    return names + (None,) * (ndim - len(names))


def path_to_str(path) -> str:
    """``params/LogicalDotReluDot_0/Dense_0/kernel`` from a JAX key path.

    Only a box's own ``value`` attribute is dropped (``GetAttrKey('value')``); a module or
    dictionary entry named ``value`` (an attention layer's value projection) is a path part.
    """
    kept = tuple(key for key in path if not (isinstance(key, jax.tree_util.GetAttrKey) and key.name == "value"))
    return jax.tree_util.keystr(kept, simple=True, separator="/")


# --- Linen ---------------------------------------------------------------------------------


def _is_box(x: Any) -> bool:
    return isinstance(x, meta.AxisMetadata)


def _boxed_with_axes(params, params_axes) -> Any:
    """``param_with_axes`` parameters boxed with their ``params_axes`` names (for reading names, never traced)."""
    names = nn_partitioning.get_axis_names(params_axes)
    flat_names = {
        path: spec
        for path, spec in jax.tree_util.tree_flatten_with_path(names, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))[0]
    }

    def box(path, leaf):
        spec = flat_names.get(path)
        if spec is None or isinstance(leaf, meta.AxisMetadata):
            return leaf
        return nn.LogicallyPartitioned(leaf, tuple(spec))

    return jax.tree_util.tree_map_with_path(box, params, is_leaf=lambda x: isinstance(x, meta.AxisMetadata))


def _linen_state_arrays(state, optimizer: optax.GradientTransformation, params_axes: Any) -> tuple[AbstractArray, ...]:
    """The state's leaves with their names; ``param_with_axes`` names read from a copy whose parameters are boxed."""
    if params_axes:
        boxed = _boxed_with_axes(state.params, params_axes)
        state = state.replace(params=boxed, opt_state=jax.eval_shape(optimizer.init, boxed))
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_box)[0]
    arrays = []
    for path, leaf in leaves:
        value = jax.tree_util.tree_leaves(leaf)[0]  # a box's one leaf (unboxing an NNX bridge box builds a Variable)
        names, annotation = _box_names(leaf, value.ndim)
        text = path_to_str(path)
        kind: Kind = "param" if text.startswith("params/") else "opt_state"
        note = "train step counter" if text == "step" else ""
        semantics = "nnx" if annotation == "nnx" else "linen"
        arrays.append(AbstractArray(text, kind, tuple(value.shape), str(value.dtype), names, note, annotation, semantics=semantics))
    return tuple(arrays)


def _box_names(leaf: Any, ndim: int) -> tuple[tuple[AxisName, ...] | None, str]:
    """A box's names through Flax's public ``get_partition_spec``, padded to the rank."""
    if not _is_box(leaf):
        return ((), "logical") if ndim == 0 else (None, "logical")
    bridge = sys.modules.get("flax.nnx.bridge.variables")  # loaded by any model with NNX parts
    if bridge is not None and isinstance(
        leaf, bridge.NNXMeta
    ):  # its get_partition_spec builds an eagerly sharded Variable, which needs a mesh
        # Flax shards an NNX variable as it creates it, with NNX's rule semantics, even inside a Linen model
        return padded(tuple(leaf.metadata.get("out_sharding") or ()), ndim), "nnx"
    else:
        spec = tuple(leaf.get_partition_spec())
    annotation = "logical" if isinstance(leaf, nn.LogicallyPartitioned) else "mesh-or-logical"
    return padded(spec, ndim), annotation


# --- NNX -----------------------------------------------------------------------------------


def _nnx_state_arrays(state, kind: Kind) -> tuple[AbstractArray, ...]:
    from flax import nnx

    def is_variable(x):
        return isinstance(x, nnx.Variable)

    from flax.nnx.spmd import get_var_pspec  # nnx.get_partition_spec's own reading of one Variable

    variables = jax.tree_util.tree_flatten_with_path(state, is_leaf=is_variable)[0]
    arrays = []
    for path, variable in variables:
        text = path_to_str(path)
        if not is_variable(variable):  # a plain array a module holds as an attribute (bonsai's position ids)
            arrays.append(
                AbstractArray(
                    text,
                    kind,
                    tuple(variable.shape),
                    str(variable.dtype),
                    () if variable.ndim == 0 else None,
                    "a plain array attribute, not an nnx.Variable",
                    semantics="nnx",
                )
            )
            continue
        value = variable.get_value()
        annotated = variable.has_metadata("out_sharding") and variable.get_metadata("out_sharding")
        names = padded(tuple(get_var_pspec(variable)), value.ndim) if annotated else (() if value.ndim == 0 else None)
        variable_type = type(variable).__name__
        note = "" if variable_type in ("Param", "OptVariable") else f"nnx.{variable_type}"
        arrays.append(AbstractArray(text, kind, tuple(value.shape), str(value.dtype), names, note, semantics="nnx"))
    return tuple(arrays)
