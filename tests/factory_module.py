"""A user's own model factory, used to test allow-listing (importing it must be refused unless allowed)."""

import flax.linen as nn

from explorer.models import InputSpec


class TinyDense(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        kernel_init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "hidden"))
        y = nn.Dense(self.features, kernel_init=kernel_init)(x)
        return nn.with_logical_constraint(y, ("batch", "hidden"))


def make_model(features: int = 16, batch: int = 8):
    inputs = [InputSpec("x", (batch, 32), "float32", ("batch", "embed"))]
    return TinyDense(features), inputs, lambda y, x: (y**2).mean()
