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
    layer                the stacked-layer axis when ``scan`` is on

``remat`` recomputes each block's activations in the backward pass (``nn.remat`` with a
``jax.checkpoint_policies`` policy); ``microbatches`` is read by the train step
(``explorer.train_step``: gradient accumulation over that many slices of the batch).

Rotary position embeddings have no parameters and do not change any sharding, so
the Llama presets leave them out; GPT-2 keeps its learned positions.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from explorer.models.base import BuiltModel, InputSpec
from explorer.models.options import TransformerOptions


def _init(names):
    return nn.with_logical_partitioning(nn.initializers.normal(0.02), names)


class RMSNorm(nn.Module):
    dtype: str

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)), (x.shape[-1],), self.dtype)
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
        q = nn.with_logical_constraint(jnp.einsum("bte,ehd->bthd", x, wq), ("batch", "length", "heads", "kv"))
        k = nn.with_logical_constraint(jnp.einsum("bte,ehd->bthd", x, wk), ("batch", "length", "kv_heads", "kv"))
        v = nn.with_logical_constraint(jnp.einsum("bte,ehd->bthd", x, wv), ("batch", "length", "kv_heads", "kv"))
        group = o.heads // o.kv_heads
        k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(o.head_dim).astype(o.dtype)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, jnp.finfo(o.dtype).min).astype(jnp.float32), axis=-1)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(o.dtype), v)
        attended = nn.with_logical_constraint(attended, ("batch", "length", "heads", "kv"))
        out = jnp.einsum("bthd,hde->bte", attended, wo)
        return nn.with_logical_constraint(out, ("batch", "length", "embed"))


class Mlp(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, x):
        o = self.options
        dense = lambda features, names, name: nn.Dense(
            features, kernel_init=_init(names), use_bias=False, dtype=o.dtype, param_dtype=o.dtype, name=name
        )
        hidden = dense(o.mlp_dim, ("embed", "mlp"), "wi_0")(x)
        hidden = nn.silu(hidden) * dense(o.mlp_dim, ("embed", "mlp"), "wi_1")(x) if o.gated_mlp else nn.gelu(hidden)
        hidden = nn.with_logical_constraint(hidden, ("batch", "length", "mlp"))
        out = dense(o.d_model, ("mlp", "embed"), "wo")(hidden)
        return nn.with_logical_constraint(out, ("batch", "length", "embed"))


class DecoderBlock(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, x, _=None):
        x = x + Attention(self.options, name="attention")(RMSNorm(self.options.dtype, name="attention_norm")(x))
        x = x + Mlp(self.options, name="mlp")(RMSNorm(self.options.dtype, name="mlp_norm")(x))
        return nn.with_logical_constraint(x, ("batch", "length", "embed")), None


class Transformer(nn.Module):
    options: TransformerOptions

    @nn.compact
    def __call__(self, tokens):
        o = self.options
        embedding = self.param("embedding", _init(("vocab", "embed")), (o.vocab, o.d_model), o.dtype)
        x = jnp.take(embedding, tokens, axis=0)
        if o.learned_positions:
            positions = self.param("positions", _init(("length", "embed")), (o.seq_len, o.d_model), o.dtype)
            x = x + positions[None, : tokens.shape[1]]
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        block = _remat(DecoderBlock, o.remat)
        if o.scan:
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
        logits = nn.Dense(
            o.vocab, kernel_init=_init(("embed", "vocab")), use_bias=False, dtype=o.dtype, param_dtype=o.dtype, name="lm_head"
        )(x)
        return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))


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
    """Mean cross-entropy of predicting token t+1 from tokens up to t."""
    return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1].astype(jnp.float32), tokens[:, 1:]).mean()


def build_transformer(options: TransformerOptions) -> BuiltModel:
    tokens = InputSpec("tokens", (options.batch, options.seq_len), "int32", ("batch", "length"))
    return BuiltModel(Transformer(options), (tokens,), next_token_loss)
