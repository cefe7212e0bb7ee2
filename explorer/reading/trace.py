"""Stage 2, trace: the model's train state traced, as a user of Flax's recipe traces it, without allocating an array.

``trace(key, built, layout)`` gives a ``TracedState``: the framework's own abstract objects, not yet read.

- Linen, Auto axes: the Flax guide's ``init_fn`` (``model.init`` then ``TrainState.create`` with Adam) under
  ``jax.eval_shape`` without a mesh, as the guide does; a model whose init needs a mesh (a ``PartitionSpec``
  constraint written by hand) under ``layout``'s mesh and rules. NNX variables inside (bridges) would shard
  themselves as they are created: eager sharding is off, shapes need no mesh.
- NNX, Auto axes: ``nnx.eval_shape`` of the factory's builder and of ``nnx.Optimizer`` (Adam, on ``nnx.Param``; the
  model's own optimizer where it has one, ``BuiltModel.optimizer``: MaxText's), eager sharding off.
- Explicit axes (``explicit``): the same recipes under the layout's own mesh (an ``AbstractMesh`` with its axis
  types) and rules: NNX's eager sharding ``reshard``s each variable as it is created, so every leaf's type carries
  its sharding. A mesh mixing Auto and Explicit axes is refused for NNX before anything is traced.

A model that cannot be traced is bad input: ``contexts.tracing`` (under Explicit axes, JAX's Explicit-mode
refusals) turns the failure into one ``ExplorerError``. The collector is paused throughout.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from explorer.errors import ExplorerError
from explorer.models import BuiltModel
from explorer.reading import contexts
from explorer.models.base import make_optimizer


@dataclasses.dataclass(frozen=True)
class TracedState:
    """The train state traced, in the framework's own abstract objects (``state.read`` reads its arrays).

    ``tree`` is Linen's ``TrainState`` (boxes kept) or NNX's ``(model, optimizer)``; ``params_axes`` is the
    ``params_axes`` collection of a ``param_with_axes`` model (Linen), else None. ``root`` is the top module's class
    name (the activations' paths start below it). ``explicit``: traced under ``layout``, a mesh with Explicit axes
    and its rules (Flax-ready), so every leaf's type carries its sharding.
    """

    key: tuple
    built: BuiltModel
    optimizer: optax.GradientTransformation
    tree: Any
    params_axes: Any
    root: str
    explicit: bool = False
    layout: tuple | None = None


def trace(key: tuple, built: BuiltModel, layout: tuple | None = None, explicit: bool = False) -> TracedState:
    """The train state of ``built`` traced (Auto axes: without a mesh; ``explicit``: under ``layout``, a
    ``(mesh, rules)`` pair with the rules as Flax reads them)."""
    if not explicit:
        with contexts.tracing(key[0]):
            if built.framework == "linen":
                return _linen_state(key, built, layout)
            return _nnx_state(key, built)
    mesh, rules = layout
    if built.framework == "nnx" and len(set(mesh.axis_types)) > 1:
        raise ExplorerError(
            "mesh.axis_types",
            list(contexts.type_names(mesh)),
            "mixes Auto and Explicit axes, which Flax NNX's eager sharding refuses (\"Mesh must have all axes as "
            'Explicit or all axes as Auto"): make every axis explicit, or every axis auto',
        )
    # Linen's init takes a key, made outside the abstract mesh (a concrete value cannot be made under it); NNX's
    # builder makes its own, and making one would start the backend for nothing
    rng = jax.random.key(0) if built.framework == "linen" else None
    with contexts.tracing(key[0], explicit=True), contexts.under(mesh, rules, built.framework):
        if built.framework == "nnx":
            return dataclasses.replace(_typed_nnx_state(key, built), explicit=True, layout=layout)
        return dataclasses.replace(_linen_init(key, built, rng), explicit=True, layout=layout)


def _linen_state(key: tuple, built: BuiltModel, layout: tuple | None) -> TracedState:
    """The guide's ``init_fn`` evaluated without a mesh, or under ``layout`` where the init needs one."""
    rng = jax.random.key(0)
    with contexts.no_eager_sharding():
        try:
            return _linen_init(key, built, rng)
        except Exception:
            if layout is None:
                raise
            with contexts.layout(*layout):
                return _linen_init(key, built, rng)


def _linen_init(key: tuple, built: BuiltModel, rng) -> TracedState:
    optimizer = make_optimizer()
    module = built.module

    def init(rng, *xs):
        variables = module.init(rng, *built.model_args(xs))
        state = train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=optimizer)
        return state, variables.get("params_axes")

    inputs = tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in built.inputs)
    tree, params_axes = jax.eval_shape(init, rng, *inputs)
    return TracedState(key, built, optimizer, tree, params_axes, type(module).__name__)


def _nnx_state(key: tuple, built: BuiltModel) -> TracedState:
    from flax import nnx

    build = built.nnx_builder()
    with nnx.use_eager_sharding(False):
        model = nnx.eval_shape(build)
        _check_module(model)
        optimizer = built.optimizer(model) if built.optimizer is not None else make_optimizer()
        opt = nnx.eval_shape(lambda: nnx.Optimizer(model, optimizer, wrt=nnx.Param))
    return TracedState(key, built, optimizer, (model, opt), None, type(model).__name__)


def _typed_nnx_state(key: tuple, built: BuiltModel) -> TracedState:
    """One trace for the model and its optimizer, as the NNX guide creates them one after the other under the mesh."""
    from flax import nnx

    build = built.nnx_builder()
    chosen = []

    def model_and_optimizer():
        model = build()
        _check_module(model)
        chosen.append(built.optimizer(model) if built.optimizer is not None else make_optimizer())
        return model, nnx.Optimizer(model, chosen[0], wrt=nnx.Param)

    model, opt = nnx.eval_shape(model_and_optimizer)
    optimizer = chosen[0]
    return TracedState(key, built, optimizer, (model, opt), None, type(model).__name__)


def _check_module(model) -> None:
    from flax import nnx

    if not isinstance(model, nnx.Module):
        raise ExplorerError("model", type(model).__name__, "is what the NNX builder returned, not an nnx.Module")
