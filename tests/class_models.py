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
    return ShortAnnotation(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: (y**2).mean()


class PartitioningStyle(nn.Module):
    """``flax.linen.partitioning``: ``param_with_axes`` (a ``params_axes`` collection) and its constraint."""

    @nn.compact
    def __call__(self, x):
        w1 = nn_partitioning.param_with_axes("w1", nn.initializers.lecun_normal(), (D, 4 * D), axes=("embed", "mlp"))
        w2 = nn_partitioning.param_with_axes("w2", nn.initializers.lecun_normal(), (4 * D, D), axes=("mlp", "embed"))
        h = nn_partitioning.with_sharding_constraint(x @ w1, ("batch", "mlp"))
        return nn_partitioning.with_sharding_constraint(h @ w2, ("batch", "embed"))


def make_partitioning_style():
    return PartitioningStyle(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: (y**2).mean()


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
                RepeatedBody,
                length=self.layers,
                variable_axes={"params": 0},
                split_rngs={"params": True},
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


class NnxResolvedActivation(nn.Module):
    """An activation whose names Flax's NNX resolver reads (``flax.core.spmd``, as an NNX variable's ``out_sharding``):
    its name ``model`` has no rule, so NNX reads it as the mesh axis ``model``, while the kernel's ``model``, read the
    Linen way, is replicated."""

    @nn.compact
    def __call__(self, x):
        from flax.core import spmd

        kernel = self.param("kernel", _boxed(("embed", "model")), (x.shape[-1], D))
        return spmd.shard_value(x @ kernel, P("batch", "model"), None, None)


def make_nnx_resolved_activation():
    return NnxResolvedActivation(), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


ALL = ",".join(
    f"tests.class_models:{name}"
    for name in (
        "make_short_annotation",
        "make_partitioning_style",
        "make_repeated",
        "make_mesh_axis_constraint",
        "make_failing",
        "make_bridged",
        "make_nnx_logical",
        "make_dead_in_call",
        "make_nnx_resolved_activation",
    )
)


# =================================================================================================
# Issue 17's classes: one small model per class, each checked against the ground truth
# (tests/ground_truth.py: Flax's recipe, the materialised state, the jaxpr's constraints).
# =================================================================================================

BF16 = jnp.bfloat16


def _boxed(names):
    return nn.with_logical_partitioning(nn.initializers.lecun_normal(), names)


# (1) many logical names: the authors' rules name 200 logical names; the model carries 24 of them -------------------

MANY_NAMES = tuple(f"name_{i:03d}" for i in range(200))


def many_names_rules(mesh_axes=("data", "model")) -> list[list]:
    """200 rules, one per name, cycling through replicated and each mesh axis (first name of each rule wins)."""
    choices = [None, *mesh_axes]
    return [[name, choices[i % len(choices)]] for i, name in enumerate(MANY_NAMES)]


class ManyNames(nn.Module):
    """Twelve layers, each kernel and each activation with its own pair of the 200 names."""

    layers: int = 12

    @nn.compact
    def __call__(self, x):
        for i in range(self.layers):
            a, b = MANY_NAMES[(2 * i) % 200], MANY_NAMES[(2 * i + 1) % 200]
            kernel = self.param(f"kernel_{i}", _boxed((a, b)), (D, D))
            x = nn.with_logical_constraint(jnp.tanh(x @ kernel), (MANY_NAMES[150 + i % 3], b))
        return x


def make_many_names(layers: int = 12):
    return ManyNames(layers), [InputSpec("x", (B, D), "float32", ("name_150", None))], lambda y, x: y.mean()


# (2) a 12-axis MaxText-style mesh (most axes of size 1) with MaxText-style rules -----------------------------------

MAXTEXT_AXES = (
    "data",
    "stage",
    "fsdp",
    "fsdp_transpose",
    "sequence",
    "context",
    "context_autoregressive",
    "tensor",
    "tensor_transpose",
    "tensor_sequence",
    "expert",
    "autoregressive",
)
MAXTEXT_SHAPE = (1, 1, 4, 1, 1, 1, 1, 2, 1, 1, 1, 1)
# a subset of MaxText's base.yml logical_axis_rules (the order is MaxText's)
MAXTEXT_STYLE_RULES = [
    ["activation_batch", ["data", "fsdp", "fsdp_transpose", "expert"]],
    ["activation_length", ["sequence", "context"]],
    ["activation_embed", ["tensor", "tensor_transpose"]],
    ["activation_mlp", ["tensor", "tensor_transpose", "tensor_sequence"]],
    ["activation_heads", ["tensor", "tensor_transpose", "sequence", "tensor_sequence", "autoregressive"]],
    ["activation_kv", ["tensor", "tensor_transpose", "tensor_sequence"]],
    ["mlp", ["fsdp_transpose", "tensor", "tensor_sequence", "autoregressive"]],
    ["heads", ["tensor", "tensor_transpose", "tensor_sequence", "autoregressive"]],
    ["kv", []],
    ["embed", ["fsdp", "fsdp_transpose", "sequence", "tensor_transpose", "context", "expert"]],
    ["embed", ["fsdp", "sequence", "tensor_transpose", "context", "expert"]],
    ["embed", ["fsdp", "fsdp_transpose", "sequence", "context", "expert"]],
    ["embed", ["fsdp", "sequence", "context", "expert"]],
    ["norm", ["tensor", "tensor_transpose"]],
    ["layers", "stage"],
]


class TwelveAxisBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        q = self.param("query", _boxed(("embed", "heads", "kv")), (D, H, K))
        o = self.param("out", _boxed(("heads", "kv", "embed")), (H, K, D))
        wi = self.param("wi", _boxed(("embed", "mlp")), (D, 4 * D))
        wo = self.param("wo", _boxed(("mlp", "embed")), (4 * D, D))
        h = jnp.einsum("bse,ehk->bshk", x, q)
        h = nn.with_logical_constraint(h, ("activation_batch", "activation_length", "activation_heads", "activation_kv"))
        x = x + jnp.einsum("bshk,hke->bse", h, o)
        x = nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))
        m = nn.with_logical_constraint(jax.nn.gelu(x @ wi), ("activation_batch", "activation_length", "activation_mlp"))
        return nn.with_logical_constraint(x + m @ wo, ("activation_batch", "activation_length", "activation_embed"))


def make_twelve_axis(seq: int = 8):
    return (
        TwelveAxisBlock(),
        [InputSpec("x", (B, seq, D), "float32", ("activation_batch", "activation_length", "activation_embed"))],
        lambda y, x: y.mean(),
    )


# (3) lifted transforms with partitioning metadata: T5X/flaxformer's vmap_with_axes / scan_with_axes + param_with_axes


class AxesExpert(nn.Module):
    """One expert's MLP, parameters declared with ``param_with_axes`` (a ``params_axes`` collection)."""

    @nn.compact
    def __call__(self, x):
        wi = nn_partitioning.param_with_axes("wi", nn.initializers.lecun_normal(), (D, 2 * D), axes=("embed", "mlp"))
        wo = nn_partitioning.param_with_axes("wo", nn.initializers.lecun_normal(), (2 * D, D), axes=("mlp", "embed"))
        h = nn_partitioning.with_sharding_constraint(jax.nn.relu(x @ wi), ("length", "mlp"))
        return h @ wo


class AxesLayer(nn.Module):
    """A scanned layer: a dense projection, then experts stacked by ``vmap_with_axes`` (flaxformer's MoE style)."""

    experts: int = 4

    @nn.compact
    def __call__(self, x, _=None):
        w = nn_partitioning.param_with_axes("proj", nn.initializers.lecun_normal(), (D, D), axes=("embed", "joined_kv"))
        x = nn_partitioning.with_sharding_constraint(x @ w, ("batch", "embed"))
        experts = nn_partitioning.vmap_with_axes(
            AxesExpert,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            partitioning_axis_names={"params": "expert"},
            spmd_axis_name="data",
        )(name="experts")
        per_expert = x.reshape(self.experts, x.shape[0] // self.experts, D)
        y = experts(per_expert).reshape(x.shape)
        return nn_partitioning.with_sharding_constraint(x + y, ("batch", "embed")), None


class AxesStack(nn.Module):
    layers: int = 2

    @nn.compact
    def __call__(self, x):
        stack = nn_partitioning.scan_with_axes(
            AxesLayer,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=(nn.broadcast,),
            length=self.layers,
            axis_name="layers",
        )
        x, _ = stack(name="layers")(x, None)
        return x


def make_lifted_axes(layers: int = 2):
    return AxesStack(layers), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


# (4) submodules named value, query and key (Linen and NNX) -------------------------------------------------------


class HeadProjection(nn.Module):
    """lm1b / T5X / MaxText style: a (embed, heads, kv) kernel and a bias, in a submodule the attention names."""

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", _boxed(("embed", "heads", "kv")), (D, H, K))
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")), (H, K))
        return jnp.einsum("bse,ehk->bshk", x, kernel) + bias


class QKVAttention(nn.Module):
    """Submodules named ``query``, ``key`` and ``value``: ``params/value/kernel`` is a path of its own."""

    @nn.compact
    def __call__(self, x):
        q, k, v = HeadProjection(name="query")(x), HeadProjection(name="key")(x), HeadProjection(name="value")(x)
        v = nn.with_logical_constraint(v, ("batch", "length", "heads", "kv"))
        w = jax.nn.softmax(jnp.einsum("bqhk,bshk->bhqs", q, k), axis=-1)
        out = jnp.einsum("bhqs,bshk->bqhk", w, v)
        wo = self.param("out", _boxed(("heads", "kv", "embed")), (H, K, D))
        return nn.with_logical_constraint(jnp.einsum("bqhk,hke->bqe", out, wo), ("batch", "length", "embed"))


def make_value_named():
    return QKVAttention(), [InputSpec("x", (B, 8, D), "float32", ("batch", "length", "embed"))], lambda y, x: y.mean()


class NnxQKV(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        linear = lambda: nnx.Linear(D, D, kernel_init=nnx.with_partitioning(init, ("embed", "heads")), use_bias=False, rngs=rngs)
        self.query, self.key, self.value = linear(), linear(), linear()

    def __call__(self, x):
        w = jax.nn.softmax(self.query(x) @ self.key(x).T, axis=-1)
        return w @ self.value(x)


def make_nnx_value_named():
    return (lambda: NnxQKV(rngs=nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", None)], lambda y, x: y.mean()


# (5) an nn.scan'ned stack whose body reads boxed params, casts them to bf16 and transposes them --------------------


class CastBody(nn.Module):
    @nn.compact
    def __call__(self, x, _=None):
        w = self.param("w", _boxed(("embed", "mlp")), (D, 2 * D))
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)), (D,))
        w16 = nn.with_logical_constraint(w.astype(BF16), ("embed", "mlp"))  # a weight's constraint (MaxText style)
        wt = nn.with_logical_constraint(w16.T, ("mlp", "embed"))  # a weight's constraint, transposed
        s = nn.with_logical_constraint(scale[: D // 2].astype(BF16), ("embed",))  # a slice of a weight
        h = nn.with_logical_constraint(x.astype(BF16) @ w16, ("batch", "mlp"))  # an activation
        y = (h @ wt) * jnp.concatenate([s, s])
        return nn.with_logical_constraint(y.astype(jnp.float32), ("batch", "embed")), None


class CastStack(nn.Module):
    layers: int = 3

    @nn.compact
    def __call__(self, x):
        x, _ = nn.scan(
            CastBody,
            length=self.layers,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            metadata_params={nn.PARTITION_NAME: "layers"},
        )(name="stack")(x, None)
        return x


def make_weight_casts(layers: int = 3):
    return CastStack(layers), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


# (6) an NNX model calling Linen's nn.with_logical_constraint, with duplicate rules -------------------------------

DUPLICATE_RULES = [["batch", "data"], ["hidden", "model"], ["hidden", "data"], ["mlp", "model"]]


class NnxCallsLinen(nnx.Module):
    """NNX variables (NNX semantics: last duplicate wins, an unmatched name passes through as a mesh axis) and a
    Linen constraint (Linen semantics: the first rule whose mesh axes are free wins)."""

    def __init__(self, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (D, 2 * D)), out_sharding=("hidden", "mlp"))  # NNX: ('data','model')
        self.w2 = nnx.Param(init(rngs.params(), (2 * D, D)), out_sharding=(None, "model"))  # 'model': no rule

    def __call__(self, x):
        h = nn.with_logical_constraint(x @ self.w1[...], ("batch", "hidden"))  # Linen: P('data', 'model')
        return h @ self.w2[...]


def make_nnx_calls_linen():
    return (lambda: NnxCallsLinen(rngs=nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", None)], lambda y, x: y.mean()


# (7) mixture of experts, the common styles -------------------------------------------------------------------------

MOE_RULES = [
    ["batch", "data"],
    ["activation_batch", "data"],
    ["activation_batch_no_exp", "data"],
    ["activation_exp", "model"],
    ["activation_length", None],
    ["activation_embed", None],
    ["activation_mlp", None],
    ["exp", "model"],
    ["expert", "model"],
    ["expert_replicas", "data"],
    ["embed_no_exp", "data"],
    ["embed", "data"],
    ["mlp", None],
    ["unmodeled", None],
]


class MaxTextStyleMoE(nn.Module):
    """MaxText-style routed experts (stacked kernels ``('exp', 'embed_no_exp', 'mlp')``), a capacity factor, rank 4
    dispatch/combine masks and rank 3-5 constraints, plus a shared (dense) expert."""

    experts: int = 4
    top_k: int = 2
    capacity_factor: float = 2.0

    @nn.compact
    def __call__(self, x):
        b, s, d = x.shape
        e = self.experts
        capacity = int(self.capacity_factor * s * self.top_k / e)
        gate = self.param("gate", _boxed(("embed", None)), (d, e))
        wi = self.param("wi", _boxed(("exp", "embed_no_exp", "mlp")), (e, d, 2 * d))
        wo = self.param("wo", _boxed(("exp", "mlp", "embed_no_exp")), (e, 2 * d, d))
        shared_wi = self.param("shared_wi", _boxed(("embed", "mlp")), (d, 2 * d))
        shared_wo = self.param("shared_wo", _boxed(("mlp", "embed")), (2 * d, d))
        logits = nn.with_logical_constraint(x @ gate, ("activation_batch", "activation_length", None))
        weights, index = jax.lax.top_k(jax.nn.softmax(logits), self.top_k)  # (b, s, k)
        one_hot = jax.nn.one_hot(index, e)  # (b, s, k, e)
        position = jnp.cumsum(one_hot.reshape(b, s * self.top_k, e), axis=1).reshape(b, s, self.top_k, e) * one_hot
        slot = jax.nn.one_hot(position.sum(-1).astype(jnp.int32) - 1, capacity)  # (b, s, k, c), dropped if >= c
        dispatch = jnp.einsum("bske,bskc->bsec", one_hot, slot)
        dispatch = nn.with_logical_constraint(dispatch, ("activation_batch", "activation_length", "activation_exp", None))
        combine = jnp.einsum("bsk,bske,bskc->bsec", weights, one_hot, slot)
        combine = nn.with_logical_constraint(combine, ("activation_batch", "activation_length", "activation_exp", None))
        routed = jnp.einsum("bsec,bsd->ebcd", dispatch, x)
        routed = nn.with_logical_constraint(routed, ("activation_exp", "activation_batch_no_exp", None, "activation_embed"))
        hidden = jax.nn.silu(jnp.einsum("ebcd,edf->ebcf", routed, wi))
        hidden = hidden.reshape(e, b, capacity, 2, d)  # rank 5: (exp, batch, capacity, 2, mlp/2)
        hidden = nn.with_logical_constraint(hidden, ("activation_exp", "activation_batch_no_exp", None, None, "activation_mlp"))
        out = jnp.einsum("ebcf,efd->ebcd", hidden.reshape(e, b, capacity, 2 * d), wo)
        out = nn.with_logical_constraint(out, ("activation_exp", "activation_batch_no_exp", None, "activation_embed"))
        y = jnp.einsum("ebcd,bsec->bsd", out, combine)
        shared = jax.nn.silu(x @ shared_wi) @ shared_wo
        return nn.with_logical_constraint(y + shared, ("activation_batch", "activation_length", "activation_embed"))


def make_maxtext_style_moe(capacity_factor: float = 2.0, experts: int = 4):
    return (
        MaxTextStyleMoE(experts, 2, capacity_factor),
        [InputSpec("x", (B, 8, D), "float32", ("activation_batch", "activation_length", "activation_embed"))],
        lambda y, x: y.mean(),
    )


class VmapExpert(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(2 * D, use_bias=False, kernel_init=_boxed(("embed", "mlp")), name="wi")(x)
        h = nn.with_logical_constraint(jax.nn.gelu(h), ("batch", "mlp"))
        return nn.Dense(D, use_bias=False, kernel_init=_boxed(("mlp", "embed")), name="wo")(h)


class VmapMoE(nn.Module):
    """Expert kernels stacked by ``nn.vmap`` (boxes get the ``expert`` axis via ``metadata_params``), expert
    replicas, rank 3 dispatch and combine over groups."""

    experts: int = 4

    @nn.compact
    def __call__(self, x):
        g, d = x.shape[0] // self.experts, x.shape[-1]
        router = nn.Dense(self.experts, use_bias=False, kernel_init=_boxed(("embed", "unmodeled")), name="router")
        probs = jax.nn.softmax(router(x))
        dispatch = nn.with_logical_constraint(jnp.eye(self.experts)[jnp.argmax(probs, -1)], ("batch", "expert"))
        grouped = nn.with_logical_constraint(x.reshape(self.experts, g, d), ("expert", "expert_replicas", "embed"))
        experts = nn.vmap(
            VmapExpert,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            metadata_params={nn.PARTITION_NAME: "expert"},
        )(name="experts")
        out = nn.with_logical_constraint(experts(grouped), ("expert", "expert_replicas", "embed"))
        combined = out.reshape(x.shape) * (dispatch * probs).sum(-1, keepdims=True)
        return nn.with_logical_constraint(combined, ("batch", "embed"))


def make_vmap_moe(experts: int = 4):
    return VmapMoE(experts), [InputSpec("x", (B, D), "float32", ("batch", "embed"))], lambda y, x: y.mean()


class NnxMoE(nnx.Module):
    """NNX routed experts (a stacked ``('exp', 'embed', 'mlp')`` parameter) and a shared expert, activations
    constrained with Linen's ``nn.with_logical_constraint`` (as MaxText's NNX MoE does)."""

    def __init__(self, experts: int = 4, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.experts = experts
        self.gate = nnx.Param(init(rngs.params(), (D, experts)), out_sharding=("embed", None))
        self.wi = nnx.Param(init(rngs.params(), (experts, D, 2 * D)), out_sharding=("exp", "embed_no_exp", "mlp"))
        self.wo = nnx.Param(init(rngs.params(), (experts, 2 * D, D)), out_sharding=("exp", "mlp", "embed_no_exp"))
        self.shared = nnx.Linear(D, D, use_bias=False, kernel_init=nnx.with_partitioning(init, ("embed", "mlp")), rngs=rngs)

    def __call__(self, x):
        probs = jax.nn.softmax(x @ self.gate[...])  # (b, e)
        dispatch = nn.with_logical_constraint(
            jnp.einsum("be,bd->ebd", probs, x), ("activation_exp", "activation_batch_no_exp", "activation_embed")
        )
        h = nn.with_logical_constraint(
            jnp.einsum("ebd,edf->ebf", dispatch, self.wi[...]), ("activation_exp", "activation_batch_no_exp", "activation_mlp")
        )
        out = jnp.einsum("ebf,efd->bd", jax.nn.relu(h), self.wo[...])
        return nn.with_logical_constraint(out + self.shared(x), ("activation_batch", "activation_embed"))


def make_nnx_moe(experts: int = 4):
    return (lambda: NnxMoE(experts, rngs=nnx.Rngs(0))), [InputSpec("x", (B, D), "float32", None)], lambda y, x: y.mean()


# (8) NNX layers inside a Linen model through a bridge with a metadata_fn, scanned by the Linen decoder --------------


def out_sharding_to_logically_partitioned(variable: nnx.Variable):
    """MaxText's ``nnx_wrappers`` ``variable_to_logically_partitioned``: NNX ``out_sharding`` -> ``nn.LogicallyPartitioned``."""
    metadata = variable.get_metadata()
    names = metadata.get("out_sharding")
    if names:
        return nn.LogicallyPartitioned(variable.get_value(), tuple(names))
    return variable.get_value()


class NnxMlp(nnx.Module):
    def __init__(self, din: int, dmid: int, *, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.wi = nnx.Param(init(rngs.params(), (din, dmid)), out_sharding=("embed", "mlp"))
        self.wo = nnx.Param(init(rngs.params(), (dmid, din)), out_sharding=("mlp", "embed"))
        self.norm = nnx.Param(jnp.ones((din,)), out_sharding=("norm",))

    def __call__(self, x):
        h = nn.with_logical_constraint(jax.nn.relu(x @ self.wi[...]), ("activation_batch", "activation_mlp"))
        return (h @ self.wo[...]) * self.norm[...]


class BridgedLayer(nn.Module):
    @nn.compact
    def __call__(self, x, _=None):
        mlp = nnx.bridge.ToLinen(NnxMlp, args=(D, 2 * D), metadata_fn=out_sharding_to_logically_partitioned, name="mlp")
        y = nn.with_logical_constraint(x + mlp(x), ("activation_batch", "activation_embed"))
        return y, None


class BridgedDecoder(nn.Module):
    layers: int = 2

    @nn.compact
    def __call__(self, x):
        x, _ = nn.scan(
            BridgedLayer,
            length=self.layers,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            metadata_params={nn.PARTITION_NAME: "layers"},
        )(name="decoder")(x, None)
        return x


def make_bridged_scan(layers: int = 2):
    return BridgedDecoder(layers), [InputSpec("x", (B, D), "float32", ("activation_batch", "activation_embed"))], lambda y, x: y.mean()


BRIDGE_RULES = [
    ["activation_batch", "data"],
    ["activation_mlp", "model"],
    ["activation_embed", None],
    ["embed", "data"],
    ["mlp", "model"],
    ["norm", None],
    ["layers", None],
]

ISSUE17 = ",".join(
    f"tests.class_models:{name}"
    for name in (
        "make_many_names",
        "make_twelve_axis",
        "make_lifted_axes",
        "make_value_named",
        "make_nnx_value_named",
        "make_weight_casts",
        "make_nnx_calls_linen",
        "make_maxtext_style_moe",
        "make_vmap_moe",
        "make_nnx_moe",
        "make_bridged_scan",
    )
)
