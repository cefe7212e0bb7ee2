"""A decoder-only language model annotated with the conventional logical axis names.

Token embedding, pre-norm blocks of multi-head (optionally grouped-query) causal
attention and an MLP (optionally gated, as in Llama), a final norm and an LM head,
trained with next-token cross-entropy. Every parameter and the main activations
carry logical names:

    batch, length        the token grid
    embed                the model width (d_model)
    heads, kv_heads, kv  query heads, key/value heads, per-head width
    mlp                  the MLP's hidden width
    vocab                the vocabulary
    layer                the stacked-layer axis when ``scan`` is on (and within a pipeline stage)
    stage                the pipeline's stage axis when ``pipeline_stages`` > 1 (``explorer.models.pipeline``)
    circular_repeats     the circular pipeline's repeat axis when ``pipeline_repeats`` > 1

``remat`` recomputes each block's activations in the backward pass (``nn.remat`` with a
``jax.checkpoint_policies`` policy); ``microbatches`` is read by the train step
(``explorer.compile.train_step``: gradient accumulation over that many slices of the batch).

Rotary position embeddings have no parameters and do not change any sharding, so
the Llama presets leave them out; GPT-2 keeps its learned positions.

On a mesh of Auto axes the layout's rules reach the model as Linen's logical constraints
(``nn.with_logical_constraint``), and XLA places everything else. On a mesh whose axes are all
Explicit (``jax.make_mesh``'s default) a constraint is an assert, so the model writes its
shardings as models written for Explicit axes do (Flax's ``examples/gemma``, bonsai's qwen3):
each parameter is created sharded (the initializer's ``out_sharding=``), each einsum and
projection gets ``out_sharding=`` from the rules (mesh axes, resolved by Linen's
``logical_to_mesh_axes`` under the layout's rules), the embedding lookup is
``.at[tokens].get(out_sharding=)``, a weight used whole where the rules shard it (the norms'
scales and the position table under FSDP) is ``reshard``ed, and the loss takes one-hot labels.
The parameters keep their logical names, so the report traces each one to its rule.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from explorer.models.base import BuiltModel, InputSpec, on_explicit_axes
from explorer.models.options import TransformerOptions
from explorer.models.pipeline import Pipeline


def _mesh_spec(names: tuple[str | None, ...]) -> P:
    """The layout's rules applied to logical ``names``: mesh axes, by Linen's semantics (the first rule whose mesh
    axes are still free wins; an unmatched name is replicated)."""
    return nn.logical_to_mesh_axes(names)


def _init(names, init=nn.initializers.normal(0.02)):
    """``init`` boxed with its logical names; on Explicit axes it creates the value already sharded as the rules say
    (Linen reads a boxed parameter through a sharding constraint, an assert there)."""
    if on_explicit_axes():
        init = functools.partial(init, out_sharding=_mesh_spec(names))
    return nn.with_logical_partitioning(init, names)


def _constrained(x, names):
    """Linen's logical constraint on Auto axes; on Explicit axes ``x`` as it is (its type already holds the layout,
    set where it was computed by ``out_sharding=``)."""
    return x if on_explicit_axes() else nn.with_logical_constraint(x, names)


def _out(names) -> dict:
    """``out_sharding=`` for an op whose output has logical ``names``: on Explicit axes only (none on Auto)."""
    return {"out_sharding": _mesh_spec(names)} if on_explicit_axes() else {}


def _differs(x, spec: P) -> bool:
    """On Explicit axes, ``x``'s type is laid out otherwise than ``spec`` (a ``reshard`` is needed)."""
    return on_explicit_axes() and jax.typeof(x).sharding.spec != P(*spec, *(None,) * (x.ndim - len(spec)))


def _dot_general(names):
    """``nn.Dense``'s ``dot_general``: ``lax.dot_general`` with the rules' ``out_sharding=`` on Explicit axes; Flax's
    default on Auto."""
    return functools.partial(jax.lax.dot_general, **_out(names)) if on_explicit_axes() else None


class RMSNorm(nn.Module):
    dtype: str

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", _init(("embed",), nn.initializers.ones), (x.shape[-1],), self.dtype)
        if _differs(scale, layout := P(jax.typeof(x).sharding.spec[-1])):  # laid out as x's last dimension: FSDP's gather
            scale = jax.sharding.reshard(scale, layout)
        variance = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        return (x * jax.lax.rsqrt(variance + 1e-6)).astype(self.dtype) * scale


class Attention(nn.Module):
    """Causal multi-head attention; fewer kv_heads than heads gives grouped-query attention.

    Projections are plain ``self.param`` + einsum rather than ``nn.DenseGeneral``:
    DenseGeneral initialises a flattened 2-D kernel, which breaks 3-D logical
    annotations once a mesh is set.
    """

    options: TransformerOptions

    def _weight(self, name, shape, names):
        return self.param(name, _init(names), shape, self.options.dtype)

    @nn.compact
    def __call__(self, x):
        o = self.options
        wq = self._weight("query", (o.d_model, o.heads, o.head_dim), ("embed", "heads", "kv"))
        wk = self._weight("key", (o.d_model, o.kv_heads, o.head_dim), ("embed", "kv_heads", "kv"))
        wv = self._weight("value", (o.d_model, o.kv_heads, o.head_dim), ("embed", "kv_heads", "kv"))
        wo = self._weight("out", (o.heads, o.head_dim, o.d_model), ("heads", "kv", "embed"))
        q_names, kv_names = ("batch", "length", "heads", "kv"), ("batch", "length", "kv_heads", "kv")
        q = _constrained(jnp.einsum("bte,ehd->bthd", x, wq, **_out(q_names)), q_names)
        k = _constrained(jnp.einsum("bte,ehd->bthd", x, wk, **_out(kv_names)), kv_names)
        v = _constrained(jnp.einsum("bte,ehd->bthd", x, wv, **_out(kv_names)), kv_names)
        group = o.heads // o.kv_heads
        if on_explicit_axes():  # each key/value head beside its group of query heads, laid out as the queries (a repeat
            # would gather them): the same values as jnp.repeat's
            k, v = (jnp.broadcast_to(t[:, :, :, None], (*t.shape[:3], group, o.head_dim)).reshape(q.shape, **_out(q_names)) for t in (k, v))
        else:
            k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, **_out(("batch", "heads", "length", None)))  # keys whole
        scores = scores / jnp.sqrt(o.head_dim).astype(o.dtype)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, jnp.finfo(o.dtype).min).astype(jnp.float32), axis=-1)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(o.dtype), v, **_out(q_names))
        attended = _constrained(attended, q_names)
        out = jnp.einsum("bthd,hde->bte", attended, wo, **_out(("batch", "length", "embed")))
        return _constrained(out, ("batch", "length", "embed"))


class Mlp(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, x):
        o = self.options
        dense = lambda features, names, out_names, name: nn.Dense(
            features,
            kernel_init=_init(names),
            use_bias=False,
            dtype=o.dtype,
            param_dtype=o.dtype,
            dot_general=_dot_general(out_names),
            name=name,
        )
        hidden_names, out_names = ("batch", "length", "mlp"), ("batch", "length", "embed")
        hidden = dense(o.mlp_dim, ("embed", "mlp"), hidden_names, "wi_0")(x)
        if o.gated_mlp:
            hidden = nn.silu(hidden) * dense(o.mlp_dim, ("embed", "mlp"), hidden_names, "wi_1")(x)
        else:
            hidden = nn.gelu(hidden)
        hidden = _constrained(hidden, hidden_names)
        out = dense(o.d_model, ("mlp", "embed"), out_names, "wo")(hidden)
        return _constrained(out, out_names)


class DecoderBlock(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, x, _=None):
        x = x + Attention(self.options, name="attention")(RMSNorm(self.options.dtype, name="attention_norm")(x))
        x = x + Mlp(self.options, name="mlp")(RMSNorm(self.options.dtype, name="mlp_norm")(x))
        return _constrained(x, ("batch", "length", "embed")), None


class Transformer(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, tokens):
        o = self.options
        embedding = self.param("embedding", _init(("vocab", "embed")), (o.vocab, o.d_model), o.dtype)
        x_names = ("batch", "length", "embed")
        if on_explicit_axes():  # the lookup's output sharding, given as bonsai's qwen3 gives it
            x = embedding.at[tokens].get(out_sharding=_mesh_spec(x_names))
        else:
            x = jnp.take(embedding, tokens, axis=0)
        if o.learned_positions:
            positions = self.param("positions", _init(("length", "embed")), (o.seq_len, o.d_model), o.dtype)[None, : tokens.shape[1]]
            if _differs(positions, layout := P(None, *jax.typeof(x).sharding.spec[1:])):  # laid out as x: FSDP's gather
                positions = jax.sharding.reshard(positions, layout)
            x = x + positions
        x = _constrained(x, x_names)
        block = _remat(DecoderBlock, o.remat)
        if o.pipeline_stages > 1:
            x = Pipeline(block, o, o.layers, o.pipeline_stages, o.pipeline_microbatches, o.pipeline_repeats, name="pipeline")(x)
        elif o.scan:
            x, _ = nn.scan(
                block,
                length=o.layers,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                metadata_params={nn.PARTITION_NAME: "layer"},
            )(o, name="blocks")(x, None)
        else:
            for i in range(o.layers):
                x, _ = block(o, name=f"block_{i}")(x)
        x = RMSNorm(o.dtype, name="final_norm")(x)
        logits_names = ("batch", "length", "vocab")
        logits = nn.Dense(
            o.vocab,
            kernel_init=_init(("embed", "vocab")),
            use_bias=False,
            dtype=o.dtype,
            param_dtype=o.dtype,
            dot_general=_dot_general(logits_names),
            name="lm_head",
        )(x)
        return _constrained(logits, logits_names)


REMAT_POLICIES = {
    "dots_saveable": "dots_saveable",
    "dots_with_no_batch_dims_saveable": "dots_with_no_batch_dims_saveable",
    "full": None,  # nothing saveable: the block's input only
}


def _remat(block, policy: str):
    """The decoder block under ``nn.remat`` with a ``jax.checkpoint_policies`` policy ("none": as it is)."""
    if policy == "none":
        return block
    name = REMAT_POLICIES[policy]
    return nn.remat(block, policy=getattr(jax.checkpoint_policies, name) if name else None, prevent_cse=False)


def next_token_loss(logits, tokens):
    """Mean cross-entropy of predicting token t+1 from tokens up to t.

    On Explicit axes the labels are one-hot (as Flax's ``examples/gemma`` trains): picking each label's logit is a
    gather over a vocabulary the rules may shard, which JAX refuses to lay out on its own."""
    logits, labels = logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    if on_explicit_axes():
        return optax.softmax_cross_entropy(logits, jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)).mean()
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def build_transformer(options: TransformerOptions) -> BuiltModel:
    tokens = InputSpec("tokens", (options.batch, options.seq_len), "int32", ("batch", "length"))
    return BuiltModel(Transformer(options), (tokens,), next_token_loss)
