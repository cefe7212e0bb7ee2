"""The train step's own pieces (``explorer/train_step.py``): the guides' optimizer and gradient accumulation. The
whole step is checked against Flax's recipe in tests/explorer/test_compiled.py and test_advisor_models.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from explorer.train_step import accumulated_grads, make_optimizer


def _loss(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)  # a mean over the batch, as the models' losses are


def test_accumulated_gradients_of_a_mean_loss_are_the_whole_batchs_for_every_count():
    keys = jax.random.split(jax.random.key(0), 3)
    params = {"w": jax.random.normal(keys[0], (4, 3)), "b": jnp.zeros(3)}
    x, y = jax.random.normal(keys[1], (8, 4)), jax.random.normal(keys[2], (8, 3))
    whole = jax.grad(lambda p: _loss(p, (x, y)))(params)
    for count in (1, 2, 4, 8):
        accumulated = accumulated_grads(lambda p, batch: _loss(p, batch), params, (x, y), count)
        for key in params:
            np.testing.assert_allclose(accumulated[key], whole[key], rtol=1e-5, atol=1e-6, err_msg=f"{count} microbatches")


def test_the_optimizer_is_the_guides_adam_at_1e_3():
    params = {"w": jnp.ones((2, 2))}
    grads = {"w": jnp.full((2, 2), 0.5)}
    ours, guide = make_optimizer(), optax.adam(1e-3)
    mine, _ = ours.update(grads, ours.init(params), params)
    theirs, _ = guide.update(grads, guide.init(params), params)
    np.testing.assert_allclose(mine["w"], theirs["w"])
    np.testing.assert_allclose(mine["w"], -1e-3, rtol=1e-4)  # Adam's first step: the learning rate against the sign
