"""A MaxText-style decoder for Partition Explorer's tests, built from MaxText's own layers.

Written for these tests (not MaxText code), following MaxText's ``src/maxtext/layers/decoders.py``: the Linen
``DecoderLayer`` (its ``_maybe_shard_with_logical`` calls, ``rms_norm`` and ``mlp_block`` bridged from NNX with
``variable_to_logically_partitioned`` as the ``metadata_fn``) and ``Decoder.scan_decoder_layers`` (``nn.scan`` with
``variable_axes={"params": param_scan_axis}`` and ``metadata_params={nn.PARTITION_NAME: "layers"}``). MaxText's
attention (``attentions.py``/``attention_op.py``: 4,300 lines with TPU kernels, tokamax and a KV cache) is replaced by
four of MaxText's ``dense_general`` projections named as MaxText names them (``query``, ``key``, ``value``, ``out``,
kernel axes ``("embed", "q_heads", "kv")`` ... as in ``attentions.py``) and a plain dot-product attention with
``attentions.py``'s logical constraints and checkpoint names. ``SimpleMlpDecoderLayerToLinen`` (MaxText's
``simple_layer.py``) and ``MixtralDecoderLayerToLinen`` (``mixtral.py``: the vendored ``moe.RoutedMoE`` after the
reduced ``attentions.Attention``) are the other blocks. ``Decoder`` wraps the layer in ``nn.remat`` with the policy
``config.remat_policy`` names, as ``decoders.py``'s ``get_remat_policy``/``set_remat_policy`` do (copied; see
SOURCE.md for what differs).
"""

from __future__ import annotations

import functools
import types
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx
from flax.linen import partitioning as nn_partitioning
from jax.ad_checkpoint import checkpoint_name

from . import base_config, mixtral, sharding
from ._shims import max_logging, maxtext_utils
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
      # decoders.py's remat (base.yml's default is "full"; "none" here: no nn.remat, see SOURCE.md)
      remat_policy="none", gradient_accumulation_steps=1, hardware="tpu",
      # mixtral.py / moe.py (base.yml's values; sparse_matmul off and a capacity factor: the dense einsum path)
      num_experts=8, num_experts_per_tok=2, capacity_factor=1.25, sparse_matmul=False, megablox=False,
      moe_expert_input_dim=-1, moe_mlp_dim=128, shared_experts=1, shard_exp_on_fsdp=False, use_2d_fsdp_sharding=False,
      use_batch_split_schedule=False, attention="dot_product", enable_dp_attention=False, custom_mesh_and_rule="",
      model_name="default", float32_gate_logits=False, routed_bias=False, routed_score_func="",
      padded_base_moe_mlp_dim=None, prefuse_moe_weights=False, mlp_bias=False, model_call_mode="",
      fuse_expert_scales=False, use_random_routing=False, norm_topk_prob=False, routed_bias_update_rate=0.0,
      load_balance_loss_weight=0.0, moe_dispatch_no_expert_sharding=False, float32_weight_sum=True,
      mlp_activations_limit=-1.0, routed_scaling_factor=1.0, n_routing_groups=-1, topk_routing_group=-1,
      dense_init_scale=1.0, max_target_length=16, max_prefill_predict_length=64, micro_batch_size_to_train_on=8,
      float32_qk_product=False, float32_logits=False, quantize_kvcache=False, prefill_cache_axis_order="1,2,0,3",
      ar_cache_axis_order="1,2,0,3", compute_axis_order="0,1,2,3", reshape_q=False, use_ragged_attention=False,
      ragged_block_size=256, record_internal_nn_metrics=0,
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
  def __call__(self, inputs, decoder_segment_ids=None, decoder_positions=None, deterministic=True, model_mode="train",
               previous_chunk=None):  # MaxText's decoder-layer signature (nn.remat's static_argnums=(4, 5) count on it)
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
    query = checkpoint_name(query, "query_proj")  # attentions.py's checkpoint names (what remat policies save)
    key = checkpoint_name(key, "key_proj")
    value = checkpoint_name(value, "value_proj")
    weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", query, key) / jnp.sqrt(cfg.head_dim).astype(cfg.dtype))
    attended = _maybe_shard_with_logical(jnp.einsum("bhqk,bkhd->bqhd", weights, value), qkv_axes)
    attention_lnx = dense_general(
        in_features_shape=(cfg.num_query_heads, cfg.head_dim), out_features_shape=cfg.emb_dim, axis=(-2, -1),
        kernel_axes=("heads", "kv", "embed"), dtype=cfg.dtype, weight_dtype=cfg.weight_dtype, name="out",
        matmul_precision=cfg.matmul_precision, shard_mode=cfg.shard_mode,
    )(attended)
    attention_lnx = checkpoint_name(attention_lnx, "out_proj")
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
  """decoders.py's ``Decoder`` reduced to its layer stack: each layer wrapped in ``nn.remat`` with the policy
  ``config.remat_policy`` names (``get_remat_policy``/``set_remat_policy``), then scanned (``scan_decoder_layers``)
  or called in a Python loop."""

  config: types.SimpleNamespace
  mesh: jax.sharding.Mesh | None  # None: the mesh the model is traced under (jax.sharding.get_abstract_mesh())
  block: str = "llama2"  # or "simple_mlp" (simple_layer.SimpleMlpDecoderLayerToLinen), "mixtral" (mixtral.py)
  quant: None = None

  def minimal_policy(self, with_context=False, with_quantization=False):
    """Helper for creating minimal checkpoint policies."""
    names = [
        "query_proj",
        "value_proj",
        "key_proj",
        "kv_proj",
        "qkv_proj",
        "out_proj",
        "mlpwi_0",
        "mlpwi_1",
        "mlpwi",
        "mlpwo",
    ]
    if with_context:
      names.append("context")
    if with_quantization:
      names.append("quantization")
    return jax.checkpoint_policies.save_only_these_names(*names)

  def get_remat_policy(self):
    """Get remat policy"""
    policy = None
    cfg = self.config
    if cfg.remat_policy and cfg.remat_policy != "none":
      if cfg.remat_policy in ("minimal_with_context", "minimal_flash"):
        # save all
        if cfg.remat_policy == "minimal_flash":
          max_logging.log("WARNING: 'minimal_flash' will be deprecated soon, please use 'minimal_with_context' instead.")
          max_logging.log("WARNING: 'minimal_flash' will be deprecated soon, please use 'minimal_with_context' instead.")
        policy = self.minimal_policy(with_context=True)
      elif cfg.remat_policy == "minimal":
        # save all except context
        policy = self.minimal_policy()
      elif cfg.remat_policy == "minimal_with_quantization":
        if cfg.scan_layers:
          warnings.warn(
              "Scan layers can introduce overhead to checkpointed values that in some configurations is slower"
              "than not checkpointing at all. If you are using scan layers, benchmark with and without quantization "
              "checkpointing in your workflow to see which is faster. Without scan layers, checkpointing quantizations is "
              "beneficial for performance."
          )
        policy = self.minimal_policy(with_context=False, with_quantization=True)
      elif cfg.remat_policy == "minimal_with_context_and_quantization":
        if cfg.scan_layers:
          warnings.warn(
              "Scan layers can introduce overhead to checkpointed values that in some configurations is slower"
              "than not checkpointing at all. If you are using scan layers, benchmark with and without quantization "
              "checkpointing in your workflow to see which is faster. Without scan layers, checkpointing quantizations is "
              "beneficial for performance."
          )
        policy = self.minimal_policy(with_context=True, with_quantization=True)
      elif cfg.remat_policy == "save_dot_with_context_except_mlp":
        policy = jax.checkpoint_policies.save_only_these_names(
            "query_proj",
            "value_proj",
            "key_proj",
            "kv_proj",
            "qkv_proj",
            "context",
            "out_proj",
        )
      elif cfg.remat_policy == "save_dot_except_mlpwi":
        policy = jax.checkpoint_policies.save_only_these_names(
            "query_proj",
            "value_proj",
            "key_proj",
            "kv_proj",
            "qkv_proj",
            "out_proj",
            "mlpwo",
        )
      elif cfg.remat_policy == "save_dot_except_mlp":
        policy = jax.checkpoint_policies.save_only_these_names(
            "query_proj",
            "value_proj",
            "key_proj",
            "kv_proj",
            "qkv_proj",
            "out_proj",
        )
      elif cfg.remat_policy == "save_qkv_proj":
        policy = jax.checkpoint_policies.save_only_these_names(
            "query_proj",
            "value_proj",
            "key_proj",
            "kv_proj",
            "qkv_proj",
        )
      # adapted: the host-offloading policies ("qkv_proj_offloaded", "minimal_offloaded", "custom") not copied
      elif cfg.remat_policy == "save_out_proj":
        policy = jax.checkpoint_policies.save_only_these_names(
            "out_proj",
        )
      else:
        assert cfg.remat_policy == "full", "Remat policy needs to be on list of remat policies"
        policy = None
    return policy

  def set_remat_policy(self, block_layers, policy):
    """Set remat policy"""
    RemattedBlockLayers = []
    for block_layer in block_layers:
      # adapted: parameter_memory_host_offload's nn.map_variables (host offload is off) not copied
      if self.config.remat_policy in (None, "none"):  # adapted: no nn.remat (see SOURCE.md)
        RemattedBlockLayers.append(block_layer)
        continue
      # Apply remat policy to layer
      layer = nn.remat(
          block_layer,
          prevent_cse=maxtext_utils.should_prevent_cse_in_remat(self.config),
          policy=policy,
          static_argnums=(4, 5),  # Deterministic and model mode are static arguments.
      )
      RemattedBlockLayers.append(layer)
    return RemattedBlockLayers

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
    return scan_fn(config=cfg, mesh=mesh, name=metadata_axis_name, quant=self.quant, **kwargs)

  @nn.compact
  def __call__(self, y):
    # MaxText turns Flax's eager sharding off for the whole process (nnx_wrappers.py, at import); here for this call
    with nnx.use_eager_sharding(False):
      return self._layers(y)

  def _layers(self, y):
    cfg = self.config
    # MaxText builds the mesh from its config and hands it to every layer; without one, the mesh of the trace, and
    # outside any (shapes evaluated without a mesh) base.yml's axes on one device: every constraint replicates
    mesh = self.mesh if self.mesh is not None else jax.sharding.get_abstract_mesh()
    if mesh.empty:
      axes = tuple(base_config.MESH_AXES)
      mesh = jax.sharding.AbstractMesh((1,) * len(axes), axes, axis_types=(jax.sharding.AxisType.Auto,) * len(axes))
    layer = {"llama2": DecoderLayer, "simple_mlp": SimpleMlpDecoderLayerToLinen,
             "mixtral": mixtral.MixtralDecoderLayerToLinen}[self.block]
    policy = self.get_remat_policy()
    (layer,) = self.set_remat_policy([layer], policy)
    # decoders.py's broadcast_args (decoder_segment_ids, decoder_positions, deterministic, model_mode) and the
    # previous_chunk it appends; simple_layer's order is (positions, segmentation, ...), both None here
    broadcast_args = (None, None, True, "train", None)
    if cfg.scan_layers:
      y, _ = self.scan_decoder_layers(cfg, layer, cfg.num_decoder_layers, "layers", mesh,
                                      (nn.broadcast,) * len(broadcast_args), model_mode="train")(y, *broadcast_args)
    else:
      for i in range(cfg.num_decoder_layers):
        y = layer(config=cfg, mesh=mesh, name=f"layers_{i}", quant=self.quant, model_mode="train")(y, *broadcast_args)
        if isinstance(y, tuple):  # the NNX blocks return (output, kv_cache)
          y = y[0]
    return y
