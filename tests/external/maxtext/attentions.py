"""A reduced stand-in for MaxText's ``src/maxtext/layers/attentions.py`` ``Attention``, for Partition Explorer's tests.

Written for these tests (not MaxText code). MaxText's ``Attention`` (with ``attention_op.py``: 4,300 lines of TPU
kernels, tokamax, a KV cache and RoPE) is reduced to what its training path does to shardings: the constructor
arguments ``mixtral.py`` passes; the ``query``/``key``/``value``/``out`` ``DenseGeneral`` projections built as
``init_query_w``/``init_kv_w``/``init_out_w`` build them (kernel axes ``("embed", "q_heads", "kv")``,
``("embed", "kv_heads", "kv_head_dim")``, ``("heads", "kv", "embed")``; the query initializer divided by
``sqrt(head_dim)``); ``__call__``'s train-mode logical constraints (``input_axis_names``, ``query_axis_names``,
``key_axis_names``, ``value_axis_names``, ``out_axis_names`` with ``common_types``' names) and checkpoint names
(``query_proj``, ``key_proj``, ``value_proj``, ``attention_out``, ``out_proj``: what MaxText's remat policies save);
and a plain causal dot-product attention (grouped-query: each key/value head serves ``num_query_heads //
num_kv_heads`` query heads) in place of ``AttentionOp``. No RoPE, no cache, no dropout.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh

from .common_types import (
    ATTN_EMBED,
    ATTN_INPUT_LENGTH,
    ATTN_LENGTH,
    BATCH_ATTN,
    D_KV,
    HEAD,
    KV_BATCH,
    KV_HEAD,
    KV_HEAD_DIM,
    Config,
    DType,
    ShardMode,
)
from .initializers import NdInitializer, nd_dense_init  # attentions.py re-exports NdInitializer (moe.py reads it here)
from .linears import DenseGeneral
from .sharding import create_sharding, maybe_shard_with_logical

__all__ = ["Attention", "NdInitializer"]


class Attention(nnx.Module):
  """MaxText's ``Attention`` reduced to its projections, train-mode constraints and a dot-product attention."""

  def __init__(
      self,
      config: Config,
      num_query_heads: int,
      num_kv_heads: int,
      head_dim: int,
      max_target_length: int,
      mesh: Mesh,
      attention_kernel: str,
      inputs_q_shape: Tuple,
      inputs_kv_shape: Tuple,
      dtype: DType = jnp.float32,
      weight_dtype: DType = jnp.float32,
      kernel_init: NdInitializer = nd_dense_init(1.0, "fan_in", "normal"),
      quant: Optional[Any] = None,
      model_mode: str = "train",
      *,
      rngs: nnx.Rngs,
      **unused: Any,  # the cache, RoPE, kernel and quantization settings MaxText's Attention also takes
  ):
    self.config = config
    self.num_query_heads = num_query_heads
    self.num_kv_heads = num_kv_heads
    self.head_dim = head_dim
    self.mesh = mesh
    self.dtype = dtype
    self.weight_dtype = weight_dtype
    self.kernel_init = kernel_init
    self.rngs = rngs
    # attentions.py's default axis names (train mode)
    self.query_axis_names = (KV_BATCH, ATTN_LENGTH, KV_HEAD, KV_HEAD_DIM)
    self.key_axis_names = (KV_BATCH, ATTN_LENGTH, KV_HEAD, KV_HEAD_DIM)
    self.value_axis_names = (KV_BATCH, ATTN_LENGTH, KV_HEAD, KV_HEAD_DIM)
    self.input_axis_names = (BATCH_ATTN, ATTN_INPUT_LENGTH, ATTN_EMBED)
    self.out_axis_names = (BATCH_ATTN, ATTN_LENGTH, HEAD, D_KV)

    depth_scaling = jnp.sqrt(self.head_dim).astype(self.dtype)

    def query_init(*args):
      return self.kernel_init(*args) / depth_scaling

    def dense(in_features, out_features, axis, kernel_axes, kernel_init):
      return DenseGeneral(
          in_features_shape=in_features, out_features_shape=out_features, axis=axis, kernel_init=kernel_init,
          kernel_axes=kernel_axes, dtype=self.dtype, weight_dtype=self.weight_dtype, quant=quant,
          matmul_precision=config.matmul_precision, use_bias=False, shard_mode=config.shard_mode, rngs=rngs,
      )

    emb = inputs_q_shape[-1]
    self.query = dense(emb, (num_query_heads, head_dim), -1, ("embed", "q_heads", "kv"), query_init)
    self.key = dense(inputs_kv_shape[-1], (num_kv_heads, head_dim), -1, ("embed", "kv_heads", "kv_head_dim"), kernel_init)
    self.value = dense(inputs_kv_shape[-1], (num_kv_heads, head_dim), -1, ("embed", "kv_heads", "kv_head_dim"), kernel_init)
    self.out = dense((num_query_heads, head_dim), emb, (-2, -1), ("heads", "kv", "embed"), kernel_init)

  def _maybe_shard_with_logical(self, inputs, logical_axes):
    return maybe_shard_with_logical(
        inputs, logical_axes, mesh=self.mesh, shard_mode=self.config.shard_mode, debug_sharding=self.config.debug_sharding
    )

  def __call__(self, inputs_q, inputs_kv, inputs_positions=None, decoder_segment_ids=None, *, model_mode="train",
               deterministic=False, previous_chunk=None, kv_cache=None, attention_metadata=None, **unused):
    inputs_q = self._maybe_shard_with_logical(inputs_q, self.input_axis_names)
    inputs_kv = self._maybe_shard_with_logical(inputs_kv, self.input_axis_names)
    qkv_sharding = create_sharding(self.mesh, self.input_axis_names) if self.config.shard_mode == ShardMode.EXPLICIT else None

    query = self.query(inputs_q, out_sharding=qkv_sharding)
    key = self.key(inputs_kv, out_sharding=qkv_sharding)
    value = self.value(inputs_kv, out_sharding=qkv_sharding)

    query = self._maybe_shard_with_logical(query, self.query_axis_names)
    key = self._maybe_shard_with_logical(key, self.key_axis_names)
    value = self._maybe_shard_with_logical(value, self.value_axis_names)

    query = checkpoint_name(query, "query_proj")
    key = checkpoint_name(key, "key_proj")
    value = checkpoint_name(value, "value_proj")

    groups = self.num_query_heads // self.num_kv_heads
    if groups > 1:
      key = jnp.repeat(key, groups, axis=2)
      value = jnp.repeat(value, groups, axis=2)
    length = query.shape[1]
    logits = jnp.einsum("bqhd,bkhd->bhqk", query, key)
    causal = jnp.tril(jnp.ones((length, key.shape[1]), dtype=bool))
    logits = jnp.where(causal, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(self.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, value)

    out = jax.ad_checkpoint.checkpoint_name(out, "attention_out")
    out = self._maybe_shard_with_logical(out, self.out_axis_names)
    out = self.out(out)
    out = checkpoint_name(out, "out_proj")
    return out, kv_cache
