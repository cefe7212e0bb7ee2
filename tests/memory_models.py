"""Models whose memory at the peak is known by construction, for the memory breakdown's tests (allow-listed factories).

``make_wide``: a two-layer model whose first layer makes one wide intermediate, ``[batch, WIDTH]`` in float32, on the
line marked ``# the wide intermediate``; the backward pass needs it (the second layer's weight gradient reads it), so
XLA keeps it from the forward pass to the backward. No gradient flows into it (the first layer's weight is read through
``stop_gradient``), so no buffer of its size is made in the backward pass: by construction the largest buffer at the
peak, with a per-device batch of 1024 sixteen times any parameter or moment.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from explorer.models import InputSpec

WIDTH = 4096
FEATURES = 64


class Wide(nn.Module):
    @nn.compact
    def __call__(self, x):
        w_in = self.param("w_in", nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "hidden")), (FEATURES, WIDTH))
        w_out = self.param("w_out", nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("hidden", "embed")), (WIDTH, FEATURES))
        wide = jnp.tanh(x @ jax.lax.stop_gradient(w_in))  # the wide intermediate
        return nn.with_logical_constraint(wide @ w_out, ("batch", "embed"))


def make_wide(batch: int = 1024):
    inputs = [InputSpec("x", (batch, FEATURES), "float32", ("batch", "embed"))]
    return Wide(), inputs, lambda y, x: ((y - x) ** 2).mean()
