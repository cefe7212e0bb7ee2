"""The train step, one home for both compiles (this process's devices, and a target's in ``target_compile``).

The Flax guides' recipe: Adam with learning rate 1e-3; Linen's ``init_fn`` (``model.init``
then ``TrainState.create``) and ``apply_gradients`` on the gradient of the model's loss; NNX's
builder and ``nnx.Optimizer`` (variables created under the mesh with Flax's eager sharding)
and ``optimizer.update``. ``make_init`` and ``make_train_step`` take the abstract model and
build from ``explorer.reading.live``; ``abstract_inputs`` and ``with_sharding`` type the inputs and the state's
leaves for lowering.
"""

from __future__ import annotations

import json
from typing import Any

import flax.linen as nn
import jax
import optax
from jax.sharding import NamedSharding, PartitionSpec
from flax.training import train_state

from explorer import reading
from explorer.reading import AbstractModel


def init_fn(key, *inputs, model: nn.Module, optimizer: optax.GradientTransformation):
    """The Flax guide's init_fn: initialise the variables and wrap their parameters in a TrainState."""
    variables = model.init(key, *inputs)
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optimizer)


def make_train_step(model: AbstractModel):
    """The guides' train step: Linen's ``apply_gradients`` on a TrainState, NNX's ``nnx.Optimizer.update``."""
    built = reading.live(model).built
    if model.framework == "nnx":
        return _nnx_train_step(model)

    microbatches = microbatches_of(model)

    def loss_fn(params, inputs):
        return built.loss(built.module.apply({"params": params}, *built.model_args(inputs)), *inputs)

    def train_step(state, *inputs):
        if microbatches == 1:
            grads = jax.grad(loss_fn)(state.params, inputs)
        else:
            grads = accumulated_grads(loss_fn, state.params, inputs, microbatches)
        return state.apply_gradients(grads=grads)

    return train_step


def microbatches_of(model: AbstractModel) -> int:
    """The model's ``microbatches`` option (gradient accumulation steps), 1 when it has none."""
    try:
        options = json.loads(model.key[1])
    except (IndexError, TypeError, ValueError):
        return 1
    value = options.get("microbatches", 1) if isinstance(options, dict) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def accumulated_grads(loss_fn, params, inputs: tuple, microbatches: int):
    """Gradient accumulation: the mean of ``loss_fn``'s gradients over ``microbatches`` equal slices of every input's
    leading (batch) dimension, one slice at a time (``lax.scan``: one slice's activations alive at once). For a
    loss that is a mean over the batch, the same gradient as the whole batch's."""
    sliced = tuple(_sliced(x, microbatches) for x in inputs)

    def one(total, batch):
        grads = jax.grad(loss_fn)(params, batch)
        return jax.tree_util.tree_map(jax.numpy.add, total, grads), None

    zeros = jax.tree_util.tree_map(jax.numpy.zeros_like, params)
    total, _ = jax.lax.scan(one, zeros, sliced)
    return jax.tree_util.tree_map(lambda g: g / microbatches, total)


def _sliced(x, microbatches: int):
    """``x`` as ``microbatches`` slices of its leading dimension. On Explicit axes the slices' axis is replicated
    (``lax.scan`` runs over it) and each slice keeps the batch's sharding, given as the reshape's ``out_sharding``."""
    shape = (microbatches, x.shape[0] // microbatches) + x.shape[1:]
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not mesh.are_all_axes_explicit:
        return x.reshape(shape)
    return x.reshape(shape, out_sharding=PartitionSpec(None, *jax.typeof(x).sharding.spec))


def _nnx_train_step(model: AbstractModel):
    from flax import nnx

    live = reading.live(model)
    built = live.built
    model_def, opt_def = live.graphdefs
    microbatches = microbatches_of(model)

    def loss(network, inputs):
        return built.loss(network(*built.model_args(inputs)), *inputs)

    def train_step(state, *inputs):
        network = nnx.merge(model_def, state[0])
        optimizer = nnx.merge(opt_def, state[1])
        if microbatches == 1:
            grads = nnx.grad(lambda m: loss(m, inputs))(network)
        else:  # the parameters as a pytree, the rest of the model's state held fixed, as nnx.grad differentiates
            graphdef, params, rest = nnx.split(network, nnx.Param, ...)
            grads = accumulated_grads(lambda p, xs: loss(nnx.merge(graphdef, p, rest), xs), params, inputs, microbatches)
        optimizer.update(network, grads)
        return nnx.state(network), nnx.state(optimizer)

    return train_step


def make_init(model: AbstractModel):
    """``init(key, *inputs) -> state``: Linen's ``init_fn``; for NNX the builder and ``nnx.Optimizer``
    (variables created under the mesh with Flax's eager sharding, as the NNX guide does)."""
    live = reading.live(model)
    if model.framework == "linen":
        built = live.built
        return lambda key, *inputs: init_fn(key, *built.model_args(inputs), model=built.module, optimizer=live.optimizer)
    from flax import nnx

    build = live.built.nnx_builder()

    def init(key, *inputs):
        network = build()
        optimizer = nnx.Optimizer(network, live.optimizer, wrt=nnx.Param)
        return nnx.state(network), nnx.state(optimizer)

    return init


ARGUMENT_KINDS = ("parameter", "optimizer state", "input")


def argument_kinds(framework: str, state: Any, inputs: tuple) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """Each argument of the compiled train step, in the order XLA numbers its entry parameters (the leaves of
    ``(state, *inputs)`` as JAX flattens them), as (path, kind, global shape): what the memory breakdown says a
    parameter's buffer holds. Decided by the train state's structure, which this module writes: Linen's ``TrainState`` holds the
    parameters under ``params`` and Adam's moments and the step counters under ``opt_state`` and ``step``; NNX's
    state is the pair (the model's variables, the optimizer's state); every input is an input.

    >>> [kind for _, kind, _ in argument_kinds("nnx", ({"w": 1}, {"mu": 2, "step": 3}), (4,))]
    ['parameter', 'optimizer state', 'optimizer state', 'input']
    """
    found = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        name = "state" + jax.tree_util.keystr(path)
        first = path[0] if path else None
        if framework == "nnx":
            kind = "parameter" if getattr(first, "idx", None) == 0 else "optimizer state"
        else:
            kind = "parameter" if getattr(first, "name", None) == "params" else "optimizer state"
        found.append((name, kind, tuple(getattr(leaf, "shape", ()))))
    for index, value in enumerate(inputs):
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            found.append((f"inputs[{index}]" + jax.tree_util.keystr(path), "input", tuple(getattr(leaf, "shape", ()))))
    return tuple(found)


def abstract_inputs(model: AbstractModel, shardings: tuple[NamedSharding, ...]) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The model's example inputs as abstract arrays carrying ``shardings``, for lowering."""
    return tuple(
        jax.ShapeDtypeStruct(i.shape, jax.numpy.dtype(i.dtype), sharding=s) for i, s in zip(reading.live(model).built.inputs, shardings)
    )


def with_sharding(sharding: NamedSharding, leaf: Any) -> Any:
    """A ShapeDtypeStruct carrying its sharding (mapped over leaves, so boxes and NNX Variables stay)."""
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)
