"""One small model per annotation style a real Flax codebase uses (issue 8's classes).

Each ``make_*`` is a user factory (allow-listed by the tests) returning ``(module, inputs, loss)``.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx
from flax.linen import partitioning as nn_partitioning
from jax.sharding import PartitionSpec as P

from explorer.models import InputSpec

D, H, K, B = 32, 4, 8, 8


class ShortAnnotation(nn.Module):
    """A 3-D kernel annotated with two names: JAX replicates the third dimension."""

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "heads")), (D, H, K))
        y = jnp.einsum("be,ehk->bhk", x, kernel)
        y = nn.with_logical_constraint(y, ("batch", "heads"))  # shorter than the rank, too
        return y.reshape(x.shape[0], -1)


def make_short_annotation():
    return ShortAnnotation(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: (y ** 2).mean()


class PartitioningStyle(nn.Module):
    """``flax.linen.partitioning``: ``param_with_axes`` (a ``params_axes`` collection) and its constraint."""

    @nn.compact
    def __call__(self, x):
        w1 = nn_partitioning.param_with_axes("w1", nn.initializers.lecun_normal(), (D, 4 * D), axes=("embed", "mlp"))
        w2 = nn_partitioning.param_with_axes("w2", nn.initializers.lecun_normal(), (4 * D, D), axes=("mlp", "embed"))
        h = nn_partitioning.with_sharding_constraint(x @ w1, ("batch", "mlp"))
        return nn_partitioning.with_sharding_constraint(h @ w2, ("batch", "embed"))


def make_partitioning_style():
    return PartitioningStyle(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: (y ** 2).mean()


class RepeatedBody(nn.Module):
    @nn.compact
    def __call__(self, x, _=None):
        w = self.param("w", nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "hidden")), (D, D))
        for _ in range(6):
            x = nn.with_logical_constraint(jnp.tanh(x @ w), ("batch", "hidden"))
        return x, None


class Repeated(nn.Module):
    """Six identical constraints per layer; with ``scan`` the layer body is one scan over ``layers``."""

    layers: int = 3
    scan: bool = False

    @nn.compact
    def __call__(self, x):
        if self.scan:
            x, _ = nn.scan(
                RepeatedBody, length=self.layers, variable_axes={"params": 0}, split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: "layer"},
            )()(x, None)
            return x
        for _ in range(self.layers):
            x, _ = RepeatedBody()(x)
        return x


def make_repeated(scan: bool = False, layers: int = 3):
    return Repeated(layers, scan), [InputSpec("x", (B, D), "float32", ("batch", "hidden"))], lambda y, x: y.mean()


class MeshAxisConstraint(nn.Module):
    """The Flax guides' first models: a constraint written with mesh axes, and ``nn.with_partitioning``."""

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(D, use_bias=False, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), (None, "model")))(x)
        y = jax.lax.with_sharding_constraint(jax.nn.relu(y), P("data", "model"))
        return nn.Dense(D, use_bias=False, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), ("model", None)))(y)


def make_mesh_axis_constraint():
    return MeshAxisConstraint(), [InputSpec("x", (B, D), "float32", (("data",), None))], lambda y, x: y.sum()


def make_failing(reason: str = "no weights here"):
    raise RuntimeError(reason)


class BridgedInner(nnx.Module):
    def __init__(self, din: int, dout: int, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.w = nnx.Param(init(rngs.params(), (din, dout)), out_sharding=("embed", "hidden"))
        self.b = nnx.Param(jnp.zeros((dout,)), out_sharding=("hidden",))

    def __call__(self, x):
        return x @ self.w[...] + self.b[...]


class Bridged(nn.Module):
    """An NNX module inside a Linen model through ``nnx.bridge.to_linen``."""

    @nn.compact
    def __call__(self, x):
        y = nnx.bridge.to_linen(BridgedInner, D, 2 * D, name="inner")(x)
        return nn.with_logical_constraint(y, ("batch", "hidden"))


def make_bridged():
    return Bridged(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


class NnxLogical(nnx.Module):
    """A native NNX model with logical names on its parameters and a mesh-axis activation constraint."""

    def __init__(self, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(D, 4 * D, use_bias=False, kernel_init=nnx.with_partitioning(init, ("embed", "mlp")), rngs=rngs)
        self.down = nnx.Param(init(rngs.params(), (4 * D, D)), sharding_names=("mlp", "embed"))

    def __call__(self, x):
        h = jax.lax.with_sharding_constraint(jax.nn.relu(self.up(x)), P("data", None))
        return h @ self.down[...]


def make_nnx_logical():
    return (lambda: NnxLogical(rngs=nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", (("data",), None))], lambda y, x: y.mean()


class DeadInCall(nn.Module):
    """A jitted helper whose second, constrained result nobody uses: XLA drops it, so it is no activation."""

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(D, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "hidden")))(x)

        def helper(v):
            used = nn.with_logical_constraint(v * 2, ("batch", "hidden"))
            unused = nn.with_logical_constraint(jnp.exp(v), ("batch", None))
            return used, unused

        used, _ = jax.jit(helper)(y)
        return nn.with_logical_constraint(used + 1, ("batch", "hidden"))


def make_dead_in_call():
    return DeadInCall(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


ALL = ",".join(
    f"tests.class_models:{name}" for name in (
        "make_short_annotation", "make_partitioning_style", "make_repeated", "make_mesh_axis_constraint",
        "make_failing", "make_bridged", "make_nnx_logical", "make_dead_in_call",
    )
)
