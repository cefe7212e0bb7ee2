"""A training step of one's own, planned for a TPU slice or a GPU cluster without owning either (docs/step.md).

Not the Flax guides' recipe: an MLP regression with its own loss (mean squared error plus an L2 penalty on the weight
matrices), two optimizers (AdamW for the matrices, SGD with momentum for the biases: ``optax.multi_transform``) and an
exponential moving average of the weights kept beside them; the whole state donated. The activations are constrained
with ``PartitionSpec``s, which JAX resolves against the mesh the step is lowered under.

``make_step(mesh, ...)`` is a step factory: the explorer builds the target's mesh (the layout's axis names and sizes
over the slice's devices) and hands it in; the factory returns the jitted step and its abstract arguments, sharded
FSDP-style over the mesh's first axis (the batch, and every matrix's rows)::

    EXPLORER_ALLOWED_FACTORIES=examples.steps.ema_step:make_step \\
        python -m explorer compile --step examples.steps.ema_step:make_step --target v5e-8

    import explorer, jax
    step, args = make_step(jax.make_mesh((8,), ("data",)))   # your own CPU mesh: explorer.plan moves it
    explorer.plan(step, *args, target="v5e-8")
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

EMA_DECAY = 0.999
L2 = 1e-4


def init_params(key, width: int, depth: int) -> dict:
    """``depth`` layers of a ``width`` x ``width`` matrix and a bias each."""
    keys = jax.random.split(key, depth)
    return {"layers": [{"w": jax.random.normal(k, (width, width)) / jnp.sqrt(width), "b": jnp.zeros((width,))} for k in keys]}


def loss_fn(params: dict, x, y):
    """Mean squared error of the MLP's output, plus an L2 penalty on the matrices."""
    h = x
    for index, layer in enumerate(params["layers"]):
        h = h @ layer["w"] + layer["b"]
        h = jax.lax.with_sharding_constraint(h, P(jax.sharding.get_abstract_mesh().axis_names[0], None))
        if index < len(params["layers"]) - 1:
            h = jax.nn.relu(h)
    penalty = sum(jnp.sum(layer["w"] ** 2) for layer in params["layers"])
    return jnp.mean((h - y) ** 2) + L2 * penalty


def optimizer(params: dict) -> optax.GradientTransformation:
    """AdamW for the matrices, SGD with momentum for the biases."""
    labels = jax.tree_util.tree_map_with_path(lambda path, _: "w" if path[-1].key == "w" else "b", params)
    return optax.multi_transform({"w": optax.adamw(1e-3), "b": optax.sgd(1e-2, momentum=0.9)}, labels)


def make_train_step(tx: optax.GradientTransformation):
    """The step: gradients of the loss, both optimizers' updates, the moving average of the new weights."""

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state: dict, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        ema = jax.tree_util.tree_map(lambda e, p: EMA_DECAY * e + (1 - EMA_DECAY) * p, state["ema"], params)
        return {"params": params, "ema": ema, "opt_state": opt_state}, loss

    return train_step


def make_step(mesh, batch: int = 256, width: int = 1024, depth: int = 4):
    """The step factory: ``(train_step, (state, x, y))``, every argument abstract (``jax.ShapeDtypeStruct``) with its
    sharding on ``mesh``: matrices and their optimizer moments sharded by rows over the mesh's first axis, the batch by
    its rows, vectors and counters replicated."""
    axis = mesh.axis_names[0]
    params = jax.eval_shape(functools.partial(init_params, width=width, depth=depth), jax.random.key(0))
    tx = optimizer(params)

    def init_state(params):
        return {"params": params, "ema": params, "opt_state": tx.init(params)}

    state = jax.eval_shape(init_state, params)

    def sharded(leaf):
        rows = leaf.ndim == 2 and leaf.shape[0] % mesh.shape[axis] == 0
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, P(axis, None) if rows else P()))

    batch_sharding = NamedSharding(mesh, P(axis, None))
    x = jax.ShapeDtypeStruct((batch, width), jnp.float32, sharding=batch_sharding)
    y = jax.ShapeDtypeStruct((batch, width), jnp.float32, sharding=batch_sharding)
    return make_train_step(tx), (jax.tree_util.tree_map(sharded, state), x, y)
