"""The Flax NNX guide's model: ``MultiDotReluDot``, a stack of ``DotReluDot`` layers.

The code of Flax's NNX guide "Scale up on multiple devices" (``docs_nnx/guides/flax_gspmd.md``
at google/flax 18f8f311c275d57f46d95e41b15aa97b454754c0), kept exactly: module and
parameter names (``layers/dot1/kernel``, ``layers/w2``), the ``nnx.vmap``-created layer
stack with ``PARTITION_NAME: None`` (the layer axis replicated), the
``jax.lax.scan`` over layers, the activation constraint ``P('data', 'model')``, the
loss ``mean((y_pred - y) ** 2)``, Adam 1e-3 on ``nnx.Param``, inputs placed with
``P('data', None)``. Two spellings are updated to Flax 0.12.12's, which warns on the guide's:
``w2`` is annotated with ``out_sharding=`` (the guide wrote the deprecated alias ``sharding=``)
and the layer stack's keys come from ``rngs.split(num_layers)`` (the guide wrote
``rngs.fork(split=num_layers)``); both give the same metadata and the same keys.

With ``logical=True`` it is the guide's ``LogicalMultiDotReluDot``: the same model
annotated with logical names (``('embed', 'hidden')``, ``('hidden', 'embed')``) and the
activation constrained to ``P('data', None)``, meant for the guide's rules
``(('batch', 'data'), ('hidden', 'model'), ('embed', None))``.

The guide builds its mesh with ``jax.make_mesh((2, 4), ('data', 'model'))`` and calls
it an auto mesh; since JAX 0.9 that call makes Explicit axes, so the explorer makes
the mesh with ``axis_types=(AxisType.Auto, AxisType.Auto)`` explicitly, which is what
the guide's ``jax.lax.with_sharding_constraint`` needs. On a mesh of Explicit axes the guide's
code cannot run (its constraints are asserts there, and ``jnp.dot(y, w2)`` contracts a dimension
both operands shard with no ``out_sharding=``), so building it there is refused with that reason
and the fix, before JAX's own, vaguer, refusal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from explorer.errors import ExplorerError
from explorer.models.base import BuiltModel, InputSpec, on_explicit_axes
from explorer.models.options import NnxGuideOptions

GUIDE_RULES = (("batch", "data"), ("hidden", "model"), ("embed", None))
EXPLICIT_REFUSAL = (
    "is the Flax NNX guide's code, written for Auto axes: on Explicit axes its with_sharding_constraint calls are "
    "asserts and its jnp.dot(y, w2) contracts a sharded dimension with no out_sharding=, which JAX refuses. Fix: make "
    "every mesh axis Auto (no mesh.axis_types; in the app, Mesh › Explicit axes empty), or pick the transformer, "
    "which runs on both"
)


class DotReluDot(nnx.Module):
    def __init__(self, depth: int, rngs: nnx.Rngs):
        init_fn = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(
            depth,
            depth,
            kernel_init=nnx.with_partitioning(init_fn, (None, "model")),
            use_bias=False,  # or use `bias_init` to give it annotation too
            rngs=rngs,
        )
        self.w2 = nnx.Param(
            init_fn(rngs.params(), (depth, depth)),  # RNG key and shape for W2 creation
            out_sharding=("model", None),
        )

    def __call__(self, x: jax.Array):
        y = self.dot1(x)
        y = jax.nn.relu(y)
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        z = jnp.dot(y, self.w2[...])
        return z


class MultiDotReluDot(nnx.Module):
    def __init__(self, depth: int, num_layers: int, rngs: nnx.Rngs):
        # Annotate the additional axis with sharding=None, meaning it will be
        # replicated across all devices.
        @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: None})
        def create_sublayers(r):
            return DotReluDot(depth, r)

        self.layers = create_sublayers(rngs.split(num_layers))

    def __call__(self, x):
        def scan_over_layers(x, layer):
            return layer(x), None

        x, _ = jax.lax.scan(scan_over_layers, x, self.layers)
        return x


class LogicalDotReluDot(nnx.Module):
    def __init__(self, depth: int, rngs: nnx.Rngs):
        init_fn = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(
            depth,
            depth,
            kernel_init=nnx.with_partitioning(init_fn, ("embed", "hidden")),
            use_bias=False,  # or use `bias_init` to give it annotation too
            rngs=rngs,
        )
        self.w2 = nnx.Param(
            init_fn(rngs.params(), (depth, depth)),  # RNG key and shape for W2 creation
            out_sharding=("hidden", "embed"),
        )

    def __call__(self, x: jax.Array):
        y = self.dot1(x)
        y = jax.nn.relu(y)
        # Unfortunately the logical aliasing doesn't work on lower-level JAX calls.
        y = jax.lax.with_sharding_constraint(y, P("data", None))
        z = jnp.dot(y, self.w2[...])
        return z


class LogicalMultiDotReluDot(nnx.Module):
    def __init__(self, depth: int, num_layers: int, rngs: nnx.Rngs):
        @nnx.vmap(transform_metadata={nnx.PARTITION_NAME: None})
        def create_sublayers(r):
            return LogicalDotReluDot(depth, r)

        self.layers = create_sublayers(rngs.split(num_layers))

    def __call__(self, x):
        def scan_over_layers(x, layer):
            return layer(x), None

        x, _ = jax.lax.scan(scan_over_layers, x, self.layers)
        return x


def guide_loss(y_pred, x, y):
    """The guide's loss: mean squared error against the labels."""
    return jnp.mean((y_pred - y) ** 2)


def build_nnx_guide(options: NnxGuideOptions) -> BuiltModel:
    model_class = LogicalMultiDotReluDot if options.logical else MultiDotReluDot

    def build():
        if on_explicit_axes():
            raise ExplorerError("model", "nnx-guide", EXPLICIT_REFUSAL)
        return model_class(options.depth, options.layers, rngs=nnx.Rngs(0))

    placed = (("data",), None)  # jax.device_put(..., P('data', None)), as the guide places input and label
    inputs = (
        InputSpec("x", (options.batch, options.depth), "float32", placed),
        InputSpec("y", (options.batch, options.depth), "float32", placed, model_arg=False),
    )
    return BuiltModel(build, inputs, guide_loss, framework="nnx")
