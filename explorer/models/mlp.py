"""The Flax guide's model: ``LogicalMLP``, a stack of ``LogicalDotReluDot`` layers.

This is the code of Flax's "Scale up Flax modules on multiple devices" guide, kept
exactly (module names, logical axis names, the scan with partition name ``'layer'``)
so that parameter paths and specs match what the guide prints.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from explorer.models.base import BuiltModel, InputSpec
from explorer.models.options import MlpOptions


class LogicalDotReluDot(nn.Module):
    depth: int

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(
            self.depth,
            kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_normal(), ("embed", "hidden")),
            use_bias=False,
        )(x)
        y = jax.nn.relu(y)
        y = nn.with_logical_constraint(y, ("batch", "hidden"))
        W2 = self.param(
            "W2",
            nn.with_logical_partitioning(nn.initializers.xavier_normal(), ("hidden", "embed")),
            (self.depth, x.shape[-1]),
        )
        z = jnp.dot(y, W2)
        z = nn.with_logical_constraint(z, ("batch", "embed"))
        return z, None


class LogicalMLP(nn.Module):
    num_layers: int
    depth: int
    use_scan: bool

    @nn.compact
    def __call__(self, x):
        if self.use_scan:
            x, _ = nn.scan(
                LogicalDotReluDot,
                length=self.num_layers,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: "layer"},
            )(self.depth)(x)
        else:
            for _ in range(self.num_layers):
                x, _ = LogicalDotReluDot(self.depth)(x)
        return x


def guide_loss(y, *inputs):
    """The guide's loss: the sum of the output."""
    return y.sum()


def build_mlp(options: MlpOptions) -> BuiltModel:
    module = LogicalMLP(options.layers, options.depth, options.scan)
    x = InputSpec("x", (options.batch, options.depth), "float32", ("batch", "embed"))
    return BuiltModel(module, (x,), guide_loss)
