"""A MaxText-style decoder for Partition Explorer's tests, built from MaxText's own layers.

Written for these tests (not MaxText code), following MaxText's ``src/maxtext/layers/decoders.py``: the Linen
``DecoderLayer`` (its ``_maybe_shard_with_logical`` calls, ``rms_norm`` and ``mlp_block`` bridged from NNX with
``variable_to_logically_partitioned`` as the ``metadata_fn``) and ``Decoder.scan_decoder_layers`` (``nn.scan`` with
``variable_axes={"params": param_scan_axis}`` and ``metadata_params={nn.PARTITION_NAME: "layers"}``). MaxText's
attention (``attentions.py``/``attention_op.py``: 4,300 lines with TPU kernels, tokamax and a KV cache) is replaced by
four of MaxText's ``dense_general`` projections named as MaxText names them (``query``, ``key``, ``value``, ``out``,
kernel axes ``("embed", "q_heads", "kv")`` ... as in ``attentions.py``) and a plain dot-product attention with
``attentions.py``'s logical constraints. ``SimpleMlpDecoderLayerToLinen`` (MaxText's ``simple_layer.py``) is the
other block.
"""

from __future__ import annotations

import functools
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx
from flax.linen import partitioning as nn_partitioning

from . import sharding
from .common_types import DecoderBlockType, ShardMode
from .linears import dense_general, mlp_block
from .normalizations import rms_norm
from .simple_layer import SimpleMlpDecoderLayerToLinen


def small_config(**overrides) -> types.SimpleNamespace:
  """The config fields the vendored layers read (MaxText's ``pyconfig`` object stand-in; values from base.yml
  unless tiny shapes are needed)."""
  fields = dict(
      emb_dim=64, mlp_dim=128, num_query_heads=4, num_kv_heads=4, head_dim=16, num_decoder_layers=2,
      mlp_activations=("silu", "linear"), dtype=jnp.bfloat16, weight_dtype=jnp.float32,
      normalization_layer_epsilon=1e-5, fused_mlp=False, activations_in_float32=False, matmul_precision="default",
      shard_mode=ShardMode.AUTO, debug_sharding=False, dense_fsdp_use_two_stage_all_gather=False,
      decoder_block=DecoderBlockType.LLAMA2, scan_layers=True, param_scan_axis=1, dropout_rate=0.0,
      enable_dropout=False, parameter_memory_host_offload=False,
  )
  fields.update(overrides)
  return types.SimpleNamespace(**fields)


class DecoderLayer(nn.Module):
  """decoders.py's ``DecoderLayer`` with the attention reduced to MaxText's projections (see the module docstring)."""

  config: types.SimpleNamespace
  mesh: jax.sharding.Mesh
  model_mode: str = "train"
  quant: None = None

  @nn.compact
  def __call__(self, inputs, decoder_positions=None, deterministic=True, model_mode="train"):
    cfg = self.config
    _maybe_shard_with_logical = functools.partial(
        sharding.maybe_shard_with_logical, mesh=self.mesh, shard_mode=cfg.shard_mode, debug_sharding=cfg.debug_sharding
    )
    logical_axis_names = ("activation_batch", "activation_length", "activation_embed")
    inputs = _maybe_shard_with_logical(inputs, logical_axis_names)
    lnx = rms_norm(
        num_features=inputs.shape[-1], dtype=cfg.dtype, weight_dtype=cfg.weight_dtype, name="pre_self_attention_norm",
        epsilon=cfg.normalization_layer_epsilon, kernel_axes=("norm",),
    )(inputs)
    lnx = _maybe_shard_with_logical(lnx, logical_axis_names)

    def projection(name, heads, axes):
      return dense_general(
          in_features_shape=cfg.emb_dim, out_features_shape=(heads, cfg.head_dim), axis=-1, kernel_axes=axes,
          dtype=cfg.dtype, weight_dtype=cfg.weight_dtype, name=name, matmul_precision=cfg.matmul_precision,
          shard_mode=cfg.shard_mode,
      )

    # attentions.py: query ("embed", "q_heads", "kv"), key/value ("embed", "kv_heads", "kv_head_dim")
    query = projection("query", cfg.num_query_heads, ("embed", "q_heads", "kv"))(lnx)
    key = projection("key", cfg.num_kv_heads, ("embed", "kv_heads", "kv_head_dim"))(lnx)
    value = projection("value", cfg.num_kv_heads, ("embed", "kv_heads", "kv_head_dim"))(lnx)
    qkv_axes = ("activation_batch", "activation_length", "activation_heads", "activation_kv")
    query = _maybe_shard_with_logical(query, qkv_axes)
    key = _maybe_shard_with_logical(key, ("activation_batch", "activation_length", "activation_kv_heads", "activation_kv"))
    value = _maybe_shard_with_logical(value, ("activation_batch", "activation_length", "activation_kv_heads", "activation_kv"))
    weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", query, key) / jnp.sqrt(cfg.head_dim).astype(cfg.dtype))
    attended = _maybe_shard_with_logical(jnp.einsum("bhqk,bkhd->bqhd", weights, value), qkv_axes)
    attention_lnx = dense_general(
        in_features_shape=(cfg.num_query_heads, cfg.head_dim), out_features_shape=cfg.emb_dim, axis=(-2, -1),
        kernel_axes=("heads", "kv", "embed"), dtype=cfg.dtype, weight_dtype=cfg.weight_dtype, name="out",
        matmul_precision=cfg.matmul_precision, shard_mode=cfg.shard_mode,
    )(attended)
    attention_lnx = _maybe_shard_with_logical(attention_lnx, logical_axis_names)
    intermediate_inputs = inputs + attention_lnx

    mlp_lnx = mlp_block(
        in_features=lnx.shape[-1], intermediate_dim=cfg.mlp_dim, activations=cfg.mlp_activations,
        intermediate_dropout_rate=cfg.dropout_rate, dtype=cfg.dtype, weight_dtype=cfg.weight_dtype, name="mlp",
        model_mode=model_mode, config=cfg, quant=self.quant, mesh=self.mesh,
    )(lnx, deterministic=deterministic)
    mlp_lnx = _maybe_shard_with_logical(mlp_lnx, logical_axis_names)
    layer_output = _maybe_shard_with_logical(mlp_lnx + intermediate_inputs, logical_axis_names)
    if cfg.scan_layers:
      return layer_output, None
    return layer_output


class Decoder(nn.Module):
  """decoders.py's ``Decoder`` reduced to its layer stack: scanned (``scan_decoder_layers``) or a Python loop."""

  config: types.SimpleNamespace
  mesh: jax.sharding.Mesh
  block: str = "llama2"  # or "simple_mlp" (simple_layer.SimpleMlpDecoderLayerToLinen)

  def scan_decoder_layers(self, cfg, decoder_layer, length, metadata_axis_name, mesh, in_axes_tuple, **kwargs):
    """decoders.py ``Decoder.scan_decoder_layers`` (the collections this model has)."""
    initializing = self.is_mutable_collection("params")
    params_spec = cfg.param_scan_axis if initializing else nn_partitioning.ScanIn(cfg.param_scan_axis)
    scan_fn = nn.scan(
        decoder_layer,
        variable_axes={"params": params_spec, "cache": 0, "intermediates": 0},
        split_rngs={"params": True, "dropout": cfg.enable_dropout},
        in_axes=in_axes_tuple,
        length=length,
        metadata_params={nn.PARTITION_NAME: metadata_axis_name},
    )
    return scan_fn(config=cfg, mesh=mesh, name=metadata_axis_name, quant=None, **kwargs)

  @nn.compact
  def __call__(self, y):
    # MaxText turns Flax's eager sharding off for the whole process (nnx_wrappers.py, at import); here for this call
    with nnx.use_eager_sharding(False):
      return self._layers(y)

  def _layers(self, y):
    cfg = self.config
    layer = DecoderLayer if self.block == "llama2" else SimpleMlpDecoderLayerToLinen
    if self.block == "llama2":
      broadcast = (nn.broadcast, nn.broadcast, nn.broadcast)
      extra = (None, True, "train")
    else:
      broadcast = (nn.broadcast,) * 4
      extra = (None, None, True, "train")
    if cfg.scan_layers:
      y, _ = self.scan_decoder_layers(cfg, layer, cfg.num_decoder_layers, "layers", self.mesh, broadcast,
                                      model_mode="train")(y, *extra)
    else:
      for i in range(cfg.num_decoder_layers):
        y = layer(config=cfg, mesh=self.mesh, name=f"layers_{i}", model_mode="train")(y, *extra)
    return y
