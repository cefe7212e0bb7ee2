"""Small NNX models written for Explicit mesh axes, one per behaviour the typed reading must get right.

Each ``make_*`` is a user factory (allow-listed by the tests) returning ``(builder, inputs, loss)``; every one
expects a mesh with axes ``data`` and ``model`` whose types are Explicit.
"""

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P, reshard

from explorer.layout import Layout, parse_layout
from explorer.models import InputSpec

B, D, H = 8, 16, 32


def _loss(y, *inputs):
    return jnp.mean(y.astype(jnp.float32) ** 2)


class TypeOverMetadata(nnx.Module):
    """A kernel whose initializer is given ``out_sharding=`` and no Flax metadata (bonsai's SigLIP does this):
    ``nnx.get_partition_spec`` says ``P()``, its type says ``P(None, 'model')``."""

    def __init__(self, rngs: nnx.Rngs):
        init = partial(jax.nn.initializers.lecun_normal(), out_sharding=P(None, "model"))
        self.kernel = nnx.Param(init(rngs.params(), (D, H)))

    def __call__(self, x):
        return jnp.dot(x, self.kernel[...], out_sharding=P("data", "model"))


def make_type_over_metadata():
    return (lambda: TypeOverMetadata(nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", ("data", None))], _loss


class ReshardAndContract(nnx.Module):
    """A reshard in the forward pass (gathering ``model`` off the features), then a contraction over a dimension
    both operands shard, resolved by ``out_sharding=`` (a reduce-scatter), and one left unreduced."""

    def __init__(self, rngs: nnx.Rngs):
        self.up = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (D, H)), out_sharding=(None, "model"))
        self.down = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (H, D)), out_sharding=("model", None))

    def __call__(self, x):
        h = jnp.dot(x, self.up[...], out_sharding=P("data", "model"))  # line: the first out_sharding
        y = jnp.dot(h, self.down[...], out_sharding=P("data", "model"))  # contracts 'model' on both: reduce-scatter
        return reshard(y, P("data", None))  # the reshard: gathers 'model'


def make_reshard_and_contract():
    return (lambda: ReshardAndContract(nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", ("batch", None))], _loss


class LogicalOnExplicit(nnx.Module):
    """Logical names in Variable metadata (resolved by ``nnx.logical_axis_rules``) and a call-time ``out_sharding``
    in mesh axes (which the rules never touch)."""

    def __init__(self, rngs: nnx.Rngs):
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (D, H)), out_sharding=("embed", "hidden"))

    def __call__(self, x):
        return jnp.dot(x, self.kernel[...], out_sharding=P("data", "model"))


def make_logical_on_explicit():
    return (lambda: LogicalOnExplicit(nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", ("batch", None))], _loss


class ScannedLayers(nnx.Module):
    """A stack of ``layers`` kernels applied by ``jax.lax.scan``, each step resharding its output."""

    def __init__(self, rngs: nnx.Rngs, layers: int):
        init = nnx.initializers.lecun_normal()
        self.kernels = nnx.Param(init(rngs.params(), (layers, D, D)), out_sharding=(None, None, "model"))

    def __call__(self, x):
        def body(carry, kernel):
            y = jnp.dot(carry, kernel, out_sharding=P("data", "model"))
            return reshard(y, P("data", None)), None

        y, _ = jax.lax.scan(body, x, self.kernels[...])
        return y


def make_scanned_layers(layers: int = 3):
    return (lambda: ScannedLayers(nnx.Rngs(0), layers)), [InputSpec("x", (B, D), "float32", ("data", None))], _loss


class AmbiguousContraction(nnx.Module):
    """A contraction over a dimension both operands shard over ``model`` with no ``out_sharding``: JAX refuses it."""

    def __init__(self, rngs: nnx.Rngs):
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (D, H)), out_sharding=("model", None))

    def __call__(self, x):
        return jnp.einsum("bd,dh->bh", x, self.kernel[...])  # the refused line


def make_ambiguous_contraction():
    return (lambda: AmbiguousContraction(nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", (None, ("model",)))], _loss


class RuledOnly(nnx.Module):
    """Logical names only, no mesh axis in the model's code: its mesh's axis names come from the rules alone."""

    def __init__(self, rngs: nnx.Rngs):
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (D, H)), out_sharding=("embed", "hidden"))

    def __call__(self, x):
        return x @ self.kernel[...]


def make_ruled_only():
    return (lambda: RuledOnly(nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", ("batch", None))], _loss


# --- the layouts the tests read these models (and the external ones written for Explicit axes) under -----------------

EXTERNAL = "tests.external.factories"
CLASSES = "tests.explicit_models"
# every factory here and the external models written for Explicit axes, for EXPLORER_ALLOWED_FACTORIES
ALLOWED = ",".join(
    [f"{EXTERNAL}:make_flax_gemma", f"{EXTERNAL}:make_bonsai_siglip", f"{EXTERNAL}:make_bonsai_qwen3"]
    + [f"{CLASSES}:{name}" for name in sorted(globals()) if name.startswith("make_")]
)


def explicit_layout(factory: str, shape, axes, rules=(), options=None, types=None) -> Layout:
    """A layout of ``factory``'s model on a mesh whose axes are all Explicit (or of ``types``)."""
    return parse_layout(
        {
            "name": "explicit",
            "rules": [list(r) for r in rules],
            "mesh": {"shape": list(shape), "axes": list(axes), "axis_types": types or ["explicit"] * len(axes)},
            "model": {"name": factory, "options": options or {}},
        }
    )
