# Copyright 2023–2026 Google LLC
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#    https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.


"""MoE related Layers."""


# adapted for Partition Explorer's tests (see SOURCE.md): the dense (einsum dispatch/combine) path. RoutedMoE's
# sparse-matmul methods (megablox/tokamax/ragged all-to-all: permute ... sparse_matmul), the tpu-inference fused path
# (fused_moe_matmul) and quantized serving (retrieve_quantized_weight) are not copied; imports of aqt, megablox, the
# ragged sort kernels, qwix, qwix's sparsity module and tokamax removed; maxtext.* imports made relative; max_logging,
# max_utils, maxtext_utils, quantizations and qwix.pallas (qpl) from _shims.py.
import enum
import functools
import math
import random
from typing import Iterable, Optional, Tuple, Union

from flax import nnx
from flax import struct
import jax
from jax import ad_checkpoint as adc
from jax.experimental import xla_metadata
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from . import common_types as ctypes  # adapted
from .common_types import ShardMode  # adapted
from . import attentions, linears, nnx_wrappers  # adapted
from ._shims import quantizations  # adapted
from .initializers import NdInitializer, default_bias_init, nd_dense_init, variable_to_logically_partitioned  # adapted
from ._shims import max_logging, max_utils, maxtext_utils  # adapted
from .sharding import (  # adapted
    create_sharding,
    get_logical_axis_rules,
    logical_to_mesh_axes,
    maybe_shard_with_logical,
    maybe_shard_with_pspec,
    remove_expert_from_partition_spec,
)
import numpy as np
from ._shims import qpl  # adapted: qwix.pallas

set_xla_metadata = xla_metadata.set_xla_metadata


DISPATCH = "dispatch"
COMBINE = "combine"


@struct.dataclass
class RouteMetadata:
  """EP communication state needed to undo the forward all-to-all after expert computation."""

  # Index of this device's EP shard.
  expert_shard_id: int
  # Permutation of [tokens received by this expert shard], sorted by local expert ID.
  local_sorted_indices: Optional[jax.Array]
  # Shape [num_ep].  Aggregates group_sizes per EP shard; tracks how many local tokens are routed to each EP shard.
  reshaped_group_sizes: Optional[jax.Array]
  # Shape [num_ep, num_ep]. all_gather of reshaped_group_sizes across EP shards.
  # [i, j] = number of tokens from batch shard i sent to expert shard j.
  all_shards_group_sizes: Optional[jax.Array]


@struct.dataclass
class RouteOutput:
  """Holds state of routing output"""

  # Shape [num experts], tracks number of local tokens routed to every expert.
  group_sizes: jax.Array
  # Indices of experts chosen for each token.
  selected_experts: jax.Array
  # Tokens sorted by experts they are routed to.
  sorted_selected_experts: jax.Array
  # Weights for each of the selected experts.
  weights: jax.Array
  # Auxiliary loss for token distribution among experts.
  lb_loss: Optional[jax.Array]
  # Dynamic bias updates for loss-free load balancing, used only for Deepseek models
  bias_updates: Optional[jax.Array]
  # Shape [local experts], tracks number of local tokens routed to every local expert.
  local_group_sizes: Optional[jax.Array] = None


def _truncate_matrix(all_shards_group_sizes: jax.Array, buffer_size: int) -> jax.Array:
  """Truncates the traffic matrix to fit in buffer_size on receiver side.

  When ragged_buffer_factor > 0, the receiver buffer has a fixed capacity
  (buffer_size). Due to routing imbalance, some shards might receive more tokens
  than this capacity. We use a prefix sum to deterministically truncate the
  received tokens on all shards, ensuring we don't write out of bounds.
  """
  cumsum = jnp.cumsum(all_shards_group_sizes, axis=0)
  clamped_cumsum = jnp.minimum(cumsum, buffer_size)
  clamped_cumsum_extended = jnp.concatenate(
      [
          jnp.zeros((1, all_shards_group_sizes.shape[1]), dtype=clamped_cumsum.dtype),
          clamped_cumsum,
      ],
      axis=0,
  )
  return jnp.diff(clamped_cumsum_extended, axis=0)


def _sort_activations(
    inputs: jax.Array,
    sort_indices: jax.Array,
    use_custom_vjp: bool,
) -> jax.Array:
  """Sort activations by `sort_indices`.

  If `use_custom_vjp=True`, then we use a custom backward pass that
  reverses the sort order. Specifically, this unsort operation is simply a sort
  with `jnp.argsort(sort_indices)` as the sort indices. This is only needed in
  the case where the compiler generates a less efficient backward pass op.

  Note that `use_custom_vjp=True` assumes that `sort_indices` is a permutation
  of `jnp.arange(inputs.shape[0])`.

  Args:
    inputs: `(tokens, ...)`-shaped array of input activations to sort.
    sort_indices: `(tokens,)`-shaped array containing the sort order.
    use_custom_vjp: Whether to use the explicit backward pass.

  Returns:
    `(tokens, ...)`-shaped array of input activations sorted by `sort_indices`.
  """
  assert inputs.shape[0] == sort_indices.shape[0]

  with jax.named_scope("sort_activations"):
    if use_custom_vjp:
      return _sort_activations_custom(inputs, sort_indices)
    return inputs[sort_indices, ...]


@jax.custom_vjp
def _sort_activations_custom(inputs: jax.Array, sort_indices: jax.Array) -> jax.Array:
  """Sort functions with custom vjp."""
  return inputs[sort_indices, ...]


def _sort_activations_custom_fwd(inputs: jax.Array, sort_indices: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Forward pass of the custom vjp for `_sort_activations()`."""
  return _sort_activations_custom(inputs, sort_indices), sort_indices


def _sort_activations_custom_bwd(residuals: jax.Array, grads: jax.Array) -> tuple[jax.Array, None]:
  """Backward pass of the custom vjp for `_sort_activations()`."""
  sort_indices = residuals
  return _sort_activations_custom(grads, jnp.argsort(sort_indices)), None


_sort_activations_custom.defvjp(_sort_activations_custom_fwd, _sort_activations_custom_bwd)


def get_batchsplit_init_kernel_axes():
  return (
      ("expert_only", "embed_moe", None),
      ("expert_only", None, "embed_moe"),
  )


def random_routing(rng_key, gate_logits, num_experts_per_tok):
  """Performs random routing of tokens to experts.

  Args:
    rng_key: A JAX PRNGKey for randomness.
    gate_logits: A JAX array of shape (batch_size, sequence_length, num_experts)
      representing the logits for each expert.
    num_experts_per_tok: The number of experts to select for each token.

  Returns:
    A tuple containing:
      - top_k_indices: JAX array of shape (batch_size, sequence_length,
      num_experts_per_tok)
                       representing the indices of the selected experts for each
                       token.
      - top_k_weights: JAX array of shape (batch_size, sequence_length,
      num_experts_per_tok)
                       representing the weights for the selected experts.
  """
  bs, seq_len, num_experts = gate_logits.shape
  selected_num = bs * seq_len * num_experts_per_tok
  # Directly generate random integers in the range [0, num_experts)
  top_k_indices = jax.random.randint(
      rng_key,
      shape=(selected_num,),
      minval=0,
      maxval=num_experts,
      dtype=jnp.int32,
  )
  top_k_indices = top_k_indices.reshape(bs, seq_len, num_experts_per_tok)
  top_k_weights = jnp.take_along_axis(gate_logits, top_k_indices, axis=-1)
  return top_k_weights, top_k_indices


def calculate_load_balance_updates(top_k_indices, num_experts, rate):
  """
  Computes a bias adjustment update based on expert load.
  Used in DeepSeek V3: https://arxiv.org/html/2412.19437v1.
  Implementation reference: https://arxiv.org/pdf/2408.15664.

  Args:
      top_k_indices: Shape (batch, sequence, top_k).
      num_experts: Total number of experts.
      rate: The update rate.

  Returns:
      update: The value to add to the expert bias. Shape (num_experts,).
  """
  flat_indices = top_k_indices.ravel()
  expert_counts = jnp.bincount(flat_indices, length=num_experts)

  total_tokens = flat_indices.size
  average_load = total_tokens / num_experts
  direction = jnp.sign(average_load - expert_counts)
  output = direction * rate
  return output


class Tid2EidVar(nnx.Variable):
  """Custom variable to hold tid2eid without trainable param overhead."""


class MoEBiasVar(nnx.Variable):
  """Custom NNX Variable for Auxiliary-Loss-Free MoE Routing Bias (DSV4)."""


class GateLogit(nnx.Module):
  """A layer used to compute gate logits, allowing to return the pre bias values for DeepSeek routing."""

  def __init__(
      self,
      in_features_shape: Union[Iterable[int], int],
      out_features_shape: Union[Iterable[int], int],
      model_name: str,
      mesh: Mesh,
      rngs: nnx.Rngs,
      axis: Union[Iterable[int], int] = -1,
      weight_dtype: ctypes.DType = jnp.float32,
      dtype: ctypes.DType = jnp.float32,
      kernel_init: NdInitializer = nd_dense_init(1.0, "fan_in", "truncated_normal"),
      kernel_axes: Tuple[Optional[str], ...] = (),
      use_bias: bool = False,
      score_func: str = "",
      quant: Optional[quantizations.AqtQuantization] = None,
      shard_mode: ShardMode = ShardMode.AUTO,
      matmul_precision: str = "default",
  ):
    """Initializes the GateLogit module.

    Attributes:
      in_features_shape: The shape of the input features.
      out_features_shape: The shape of the output features, typically the number of experts.
      model_name: The name of the model.
      rngs: An `nnx.Rngs` object used for initializing parameters.
      axis: The axis or axes over transformation is applied.
      weight_dtype: The data type of the kernel weights.
      dtype: The data type for the computation.
      kernel_init: The initializer function for the kernel weight matrix.
      kernel_axes: A tuple of logical axis names for partitioning the kernel.
      use_bias: Whether to add learnable bias in gate logit scores. When enabled,
        this bias aids expert load balancing (like in DeepSeek V3), and is not
        part of the loss calculation.
      score_func: Scoring function for output normalization before applying bias.
      quant: The quantization configuration. If None, no quantization is applied.
      matmul_precision: The precision level for the matrix multiplication.
    """
    self.in_features_shape = linears.canonicalize_tuple(in_features_shape)
    self.out_features_shape = linears.canonicalize_tuple(out_features_shape)
    self.model_name = model_name
    self.mesh = mesh
    self.axis = linears.canonicalize_tuple(axis)
    self.weight_dtype = weight_dtype
    self.dtype = dtype
    self.kernel_init = kernel_init
    self.kernel_axes = kernel_axes
    self.use_bias = use_bias
    self.score_func = score_func
    self.quant = quant
    self.shard_mode = shard_mode
    self.matmul_precision = matmul_precision

    # Parameter initialization
    kernel_shape = self.in_features_shape + self.out_features_shape
    kernel_in_axis = np.arange(len(self.axis))
    kernel_out_axis = np.arange(len(self.axis), len(self.axis) + len(self.out_features_shape))

    if not quantizations.in_serve_mode(self.quant):
      self.kernel = nnx.Param(
          self.kernel_init(
              rngs.params(),
              kernel_shape,
              self.weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.kernel_axes,
      )

    if self.use_bias:
      bias_axes = self.kernel_axes[-len(self.out_features_shape) :]
      bias_shape = kernel_shape[-len(self.out_features_shape) :]
      # DSV3 was using nnx.Param and that code we are keeping the same
      self.bias = nnx.Param(
          default_bias_init(rngs.params(), bias_shape, self.weight_dtype),
          out_sharding=bias_axes,
      )
      if self.model_name.startswith("deepseek4"):
        # DSV4 uses MoEBiasVar to naturally isolate from sequence-wise updates
        self.bias = MoEBiasVar(
            default_bias_init(rngs.params(), bias_shape, self.weight_dtype),
            out_sharding=bias_axes,
        )
    else:
      self.bias = None

    if quant:
      dot_general_cls = quant.dot_general_cls(mesh_axes=kernel_axes)
      dot_general_linen = dot_general_cls()
      quant_dot_general = nnx_wrappers.ToNNX(dot_general_linen, rngs=rngs)
      self._quant_dot_general_name = f"{type(dot_general_linen).__name__}_0"
      setattr(self, self._quant_dot_general_name, quant_dot_general)
      dummy_inputs = jnp.zeros((1, *self.in_features_shape), dtype=self.dtype)
      self(dummy_inputs, _initializing=True)
    else:
      self._quant_dot_general_name = None

  @property
  def quant_dot_general(self) -> nnx_wrappers.ToNNX | None:
    if self._quant_dot_general_name is None:
      return None
    return getattr(self, self._quant_dot_general_name)

  def __call__(self, inputs: jax.Array, _initializing: bool = False) -> Tuple[jax.Array, Optional[jax.Array]]:
    inputs = jnp.asarray(inputs, self.dtype)
    norm_axis = linears.normalize_axes(self.axis, inputs.ndim)

    if quantizations.in_serve_mode(self.quant):
      kernel_shape = self.in_features_shape + self.out_features_shape
      kernel = jnp.zeros(kernel_shape, dtype=self.dtype)
    else:
      kernel = self.kernel[...]
    kernel = jnp.asarray(kernel, self.dtype)

    contract_ind = tuple(range(0, len(norm_axis)))
    output_sharding = (
        create_sharding(self.mesh, ("activation_batch", "activation_length", None))
        if self.shard_mode == ShardMode.EXPLICIT
        else None
    )
    output = linears._compute_dot_general_nnx(
        inputs,
        kernel,
        norm_axis,
        contract_ind,
        self.matmul_precision,
        self.quant_dot_general,
        _initializing,
        out_sharding=output_sharding,
    )
    pre_bias_logits = None

    if self.score_func:
      output = linears._convert_to_activation_function(self.score_func)(output)

    # NOTE: deepseek2 has a different pattern
    if self.model_name.startswith(("deepseek3", "deepseek4")):
      pre_bias_logits = output

    if self.use_bias:
      bias = jnp.asarray(self.bias[...], self.dtype)
      output += bias
    return output, pre_bias_logits


class RoutedMoE(nnx.Module):
  """Implements a routed MoE block."""

  def __init__(
      self,
      config: ctypes.Config,
      num_experts: int,
      num_experts_per_tok: int,
      mesh: jax.sharding.Mesh,
      kernel_init: attentions.NdInitializer,
      kernel_axes: Tuple[Optional[str], ...],
      rngs: nnx.Rngs,
      intermediate_dim: int = 2048,
      weight_dtype: ctypes.DType = jnp.float32,
      dtype: ctypes.DType = jnp.float32,
      quant: Optional[quantizations.AqtQuantization] = None,
      is_hash_routing: bool = False,
  ):
    """Initializes the RoutedMoE module.

    Attributes:
      config: The main config setting.
      num_experts: Number of experts.
      num_experts_per_tok: Number of experts for each token.
      mesh: Mesh, device mesh.
      kernel_init: The initializer function for the kernel weight matrix.
      kernel_axes: A tuple of logical axis names for partitioning the kernel.
      rngs: An `nnx.Rngs` object used for initializing parameters.
      intermediate_dim: Intermediate dimension of MoE.
      weight_dtype: The data type of the kernel weights.
      dtype: The data type for the computation.
      quant: The quantization configuration. If None, no quantization is applied.
      is_hash_routing: Whether this layer uses deterministic hash routing instead of top-K routing.
    """
    self.config = config
    self.num_experts = num_experts
    self.num_experts_per_tok = num_experts_per_tok
    self.mesh = mesh
    self.kernel_init = kernel_init
    self.kernel_axes = kernel_axes
    self.intermediate_dim = intermediate_dim
    self.weight_dtype = weight_dtype
    self.dtype = dtype
    self.quant = quant
    self.rngs = rngs
    self.is_hash_routing = is_hash_routing

    # DeepSeek V4 Hash Routing
    if self.is_hash_routing:
      # Token-ID to Expert-ID lookup table for static routing
      # Must be stored as float32 because MaxText passes the entire variable tree
      # through jax.value_and_grad, which strictly requires all leaves to be inexact types
      # (even if they receive no gradients). We cast to int32 dynamically during routing.
      self.tid2eid = Tid2EidVar(
          jnp.zeros(
              (self.config.vocab_size, self.num_experts_per_tok),
              dtype=jnp.float32,
          ),
          out_sharding=None,  # Replicated across shards for local lookup
      )
    else:
      self.tid2eid = None

    self.moe_expert_input_dim = (
        self.config.emb_dim if self.config.moe_expert_input_dim <= 0 else self.config.moe_expert_input_dim
    )

    if self.config.shard_exp_on_fsdp:
      # special sharding for dsv3
      self.wi_kernel_axes = ("embed_moe", None, "mlp_moe")
      self.wo_kernel_axes = ("embed_moe", "mlp_moe", None)
    elif self.config.use_2d_fsdp_sharding:
      self.wi_kernel_axes = ("embed_moe", "mlp_moe", None)
      self.wo_kernel_axes = ("embed_moe", "mlp_moe", None)
    elif self.config.use_batch_split_schedule:
      self.wi_kernel_axes, self.wo_kernel_axes = get_batchsplit_init_kernel_axes()
    else:
      self.wi_kernel_axes = ("exp", "embed_moe", "mlp_moe")
      self.wo_kernel_axes = ("exp", "mlp_moe", "embed_moe")

    if self.config.attention in ("vllm_rpa", "vllm_batched_rpa"):
      # vLLM uses 'model' as the tensor parallelism axis name
      self._tensor_parallelism_name = ("model", "attn_dp")
    else:
      self._tensor_parallelism_name = "tensor"

    if self.config.attention in ("vllm_rpa", "vllm_batched_rpa") and self.config.enable_dp_attention:
      self._expert_parallelism_name = "attn_dp_expert"
    elif self.config.custom_mesh_and_rule == ctypes.CustomRule.CP_AS_EP:
      # when custom mesh and rule is cp-as-ep, context axis is same with expert in MoE component
      self._expert_parallelism_name = ("context", "expert")
    else:
      self._expert_parallelism_name = "expert"

    self.gate = GateLogit(
        in_features_shape=self.moe_expert_input_dim,
        out_features_shape=self.num_experts,
        mesh=self.mesh,
        model_name=self.config.model_name,
        dtype=jnp.float32 if self.config.float32_gate_logits else self.dtype,
        weight_dtype=self.weight_dtype,
        quant=self.quant,
        kernel_init=self.kernel_init,
        kernel_axes=self.kernel_axes,
        use_bias=self.config.routed_bias and not self.is_hash_routing,
        # tpu-inference applies the score function in the fused_moe_gmm kernel,
        # so we don't apply it here to avoid redundant computation.
        # See https://github.com/vllm-project/tpu-inference/blob/main/tpu_inference/layers/common/fused_moe_gmm.py#L58.
        score_func="" if self.config.attention in ("vllm_rpa", "vllm_batched_rpa") else self.config.routed_score_func,
        matmul_precision=self.config.matmul_precision,
        shard_mode=config.shard_mode,
        rngs=self.rngs,
    )
    rule = qpl.get_current_rule("gmm")
    sparsity_rule = None
    if rule is not None:
      if not isinstance(rule, qwix.QtRule):
        raise ValueError("Expect a QtRule for quantized training.")
      if rule.additional_qt_config and "sparsity_rule" in rule.additional_qt_config:
        q_s_rule = rule.additional_qt_config["sparsity_rule"]
        if q_s_rule and q_s_rule.weight_sparsity_n and q_s_rule.weight_sparsity_m:
          sparsity_rule = q_s_rule

    if sparsity_rule is not None:
      self.wi_0_sparsity_module = sparsity_module.SparsityModule(
          shape=(self.num_experts, self.config.emb_dim, self.intermediate_dim),
          sharding_axes=self.wi_kernel_axes,
          sparsity_rule=sparsity_rule,
      )
      self.wi_1_sparsity_module = sparsity_module.SparsityModule(
          shape=(self.num_experts, self.config.emb_dim, self.intermediate_dim),
          sharding_axes=self.wi_kernel_axes,
          sparsity_rule=sparsity_rule,
      )
      self.wo_sparsity_module = sparsity_module.SparsityModule(
          shape=(self.num_experts, self.intermediate_dim, self.config.emb_dim),
          sharding_axes=self.wo_kernel_axes,
          sparsity_rule=sparsity_rule,
      )
    else:
      self.wi_0_sparsity_module = None
      self.wi_1_sparsity_module = None
      self.wo_sparsity_module = None

    # pylint: disable=protected-access
    self.activation_fn = linears._convert_to_activation_function(self.config.mlp_activations[0])

    kernel_in_axis = np.arange(1)
    kernel_out_axis = np.arange(1, 2)
    # Pad the MoE input weight kernels for GMM_v2 execution when configured.
    moe_intermediate_dim = (
        self.config.padded_base_moe_mlp_dim if self.config.padded_base_moe_mlp_dim is not None else self.intermediate_dim
    )

    if quantizations.in_serve_mode(self.quant):
      # During aqt convert state we delete kernel weight from params to save
      # memory. Instead they are retrieved from the tensors stored in the 'aqt'
      # collection.
      self.wi_0 = jnp.zeros((num_experts, self.moe_expert_input_dim, intermediate_dim))
      self.wi_1 = jnp.zeros((num_experts, self.moe_expert_input_dim, intermediate_dim))
      self.wo = jnp.zeros((num_experts, intermediate_dim, self.moe_expert_input_dim))
    elif self.config.prefuse_moe_weights:
      self.wi = nnx.Param(
          self.kernel_init(
              self.rngs.params(),
              (num_experts, self.moe_expert_input_dim, moe_intermediate_dim * 2),
              weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.wi_kernel_axes,
      )
      self.wo = nnx.Param(
          self.kernel_init(
              self.rngs.params(),
              (
                  self.num_experts,
                  self.intermediate_dim,
                  self.moe_expert_input_dim,
              ),
              self.weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.wo_kernel_axes,
      )
    else:
      self.wi_0 = nnx.Param(
          self.kernel_init(
              self.rngs.params(),
              (num_experts, self.moe_expert_input_dim, moe_intermediate_dim),
              weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.wi_kernel_axes,
      )
      self.wi_1 = nnx.Param(
          self.kernel_init(
              self.rngs.params(),
              (num_experts, self.moe_expert_input_dim, moe_intermediate_dim),
              weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.wi_kernel_axes,
      )
      self.wo = nnx.Param(
          self.kernel_init(
              self.rngs.params(),
              (
                  self.num_experts,
                  self.intermediate_dim,
                  self.moe_expert_input_dim,
              ),
              self.weight_dtype,
              kernel_in_axis,
              kernel_out_axis,
          ),
          out_sharding=self.wo_kernel_axes,
      )

    if self.config.mlp_bias:
      wi_bias_axes = ("exp", "activation_mlp")
      wo_bias_axes = ("exp", "activation_embed")
      wi_bias_shape = (self.num_experts, self.intermediate_dim)
      wo_bias_shape = (self.num_experts, self.moe_expert_input_dim)
      self.wi_0_bias = nnx.Param(
          default_bias_init(self.rngs.params(), wi_bias_shape, self.weight_dtype),
          out_sharding=wi_bias_axes,
      )
      self.wi_1_bias = nnx.Param(
          default_bias_init(self.rngs.params(), wi_bias_shape, self.weight_dtype),
          out_sharding=wi_bias_axes,
      )
      self.wo_bias = nnx.Param(
          default_bias_init(self.rngs.params(), wo_bias_shape, self.weight_dtype),
          out_sharding=wo_bias_axes,
      )
    else:
      self.wi_0_bias = None
      self.wi_1_bias = None
      self.wo_bias = None

    if self.config.decoder_block == ctypes.DecoderBlockType.GEMMA4:
      self.per_expert_scale = nnx.Param(
          jnp.ones((self.num_experts,), dtype=self.weight_dtype),
          out_sharding=("exp",),
      )
    else:
      self.per_expert_scale = None

    # Scale the output projection ahead of time during inference for higher generation throughput.
    if (
        self.per_expert_scale is not None
        and self.config.model_call_mode == "inference"
        and self.config.fuse_expert_scales
    ):
      self.wo.value = self.wo.value * self.per_expert_scale.value[:, None, None]

  def _maybe_shard_with_logical(self, inputs, logical_name):
    return maybe_shard_with_logical(
        inputs,
        logical_name,
        mesh=self.mesh,
        shard_mode=self.config.shard_mode,
        debug_sharding=self.config.debug_sharding,
        extra_stack_level=1,
    )

  def _logical_to_mesh_axes(self, logical_name):
    logical_rules = get_logical_axis_rules()
    return logical_to_mesh_axes(logical_name, mesh=self.mesh, rules=logical_rules)

  def _maybe_shard_with_pspec(self, inputs, pspec: jax.sharding.PartitionSpec | None, logical_axes=None):
    return maybe_shard_with_pspec(
        inputs,
        pspec,
        mesh=self.mesh,
        shard_mode=self.config.shard_mode,
        debug_sharding=self.config.debug_sharding,
        extra_stack_level=1,
        logical_axes=logical_axes,
    )

  def _maybe_shard_moe_dispatch(self, inputs, logical_axis, peel_expert):
    """Shard a MoE dispatch/MLP activation. When `peel_expert` is set, drop the 'expert'
    mesh axis from the batch dim (index 1) so the GEMM stays expert-parallel (AllToAll)
    instead of double-mapping E and B onto 'expert'. Each logical dim is resolved
    independently so the shared 'expert' axis is not deduped off the expert dim before
    the peel."""
    if not peel_expert:
      return self._maybe_shard_with_logical(inputs, logical_axis)
    spec = [None if name is None else self._logical_to_mesh_axes((name,))[0] for name in logical_axis]
    pspec = remove_expert_from_partition_spec(jax.sharding.PartitionSpec(*spec), dims_to_peel=(1,))
    return self._maybe_shard_with_pspec(inputs, pspec)

  def get_expert_parallelism_size(self):
    # When expert parallelism has more than one physical axes, take product of their shapes
    if isinstance(self._expert_parallelism_name, tuple):
      return math.prod(self.mesh.shape.get(name, 1) for name in self._expert_parallelism_name)
    return self.mesh.shape.get(self._expert_parallelism_name, 1)

  def get_tensor_parallelism_size(self):
    if isinstance(self._tensor_parallelism_name, tuple):
      size = 1
      for axis in self._tensor_parallelism_name:
        size *= self.mesh.shape.get(axis, 1)
      return size
    return self.mesh.shape.get(self._tensor_parallelism_name, 1)

  def get_context_autoregressive_parallelism_size(self):
    return self.mesh.shape.get("context_autoregressive", 1)

  def should_update_load_balance(self):
    """Determines if loss-free load balancing updates should be applied.

    The bias update logic is only applicable to Top-K router.
    Hash router does not use routed bias.
    """
    return self.config.routed_bias and self.config.routed_bias_update_rate > 0.0 and not self.is_hash_routing

  def get_topk(self, gate_logits, pre_bias_logits, rngs=None, input_ids=None):
    """get topk."""
    # shape of top_k_weights & top_k_indices:
    # (batch, sequence, num_experts_per_tok).
    if self.config.use_random_routing:
      if rngs is None:
        raise ValueError("The random key cannot be None for random routing.")
      # Reuse the 'params' RNG stream to ensure random routing
      rng = rngs.params() if hasattr(rngs, "params") and callable(getattr(rngs, "params")) else rngs
      top_k_weights, top_k_indices = random_routing(rng, gate_logits, self.num_experts_per_tok)
      return top_k_weights, top_k_indices

    if self.is_hash_routing:
      if input_ids is None:
        raise ValueError("input_ids cannot be None when is_hash_routing is True")
      # Access the static routing table
      tid2eid_int = self.tid2eid.value
      # Cast the float32 array to int32 (JAX automatically assigns 0.0 gradients to integer casts)
      tid2eid_int = tid2eid_int.astype(jnp.int32)
      # Cast input_ids to int32 to safely index the hash routing table
      top_k_indices = tid2eid_int[input_ids.astype(jnp.int32)]
      top_k_weights = jnp.take_along_axis(pre_bias_logits, top_k_indices, axis=-1)
    # NOTE: deepseek2 has a different pattern
    elif self.config.model_name.startswith(("deepseek3", "deepseek4")):
      top_k_weights, top_k_indices = self.deepseek_routing(gate_logits, pre_bias_logits)
    elif self.config.decoder_block == ctypes.DecoderBlockType.GEMMA4:
      router_probs = jax.nn.softmax(gate_logits.astype(jnp.float32), axis=-1)
      _, top_k_indices = jax.lax.top_k(gate_logits, self.num_experts_per_tok)
      top_k_weights = jnp.take_along_axis(router_probs, top_k_indices, axis=-1).astype(self.dtype)
    else:
      top_k_weights, top_k_indices = jax.lax.top_k(gate_logits, self.num_experts_per_tok)

    if self.config.decoder_block in (ctypes.DecoderBlockType.DEEPSEEK, ctypes.DecoderBlockType.DEEPSEEK4):
      top_k_weights = self.deepseek_scale_weights(top_k_weights)
    else:
      if self.config.decoder_block not in (ctypes.DecoderBlockType.LLAMA4, ctypes.DecoderBlockType.GEMMA4):
        top_k_weights = jax.nn.softmax(top_k_weights.astype(jnp.float32), axis=-1).astype(self.dtype)

      # Normalization of router weights (e.g. used by Qwen3, Gemma4).
      if self.config.norm_topk_prob:
        top_k_weights /= top_k_weights.sum(axis=-1, keepdims=True)

      if self.per_expert_scale is not None and not (
          self.config.model_call_mode == "inference" and self.config.fuse_expert_scales
      ):
        per_expert_scale_topk = jnp.take_along_axis(self.per_expert_scale.value[None, None, :], top_k_indices, axis=-1)
        top_k_weights = top_k_weights * per_expert_scale_topk.astype(top_k_weights.dtype)

    return top_k_weights, top_k_indices

  def deepseek_scale_weights(self, weights):
    """Scales weights according to DeepSeek's v3 reference implementation."""
    # https://github.com/deepseek-ai/DeepSeek-V3/blob/2f7b80eecebf3d1c84da5a0d465f6639ea175012/inference/model.py#L592-L594.
    if self.config.routed_score_func in ("sigmoid", "sqrtsoftplus"):
      weights /= weights.sum(-1, keepdims=True) + 1e-20
    weights *= self.config.routed_scaling_factor
    return weights

  def expert_group_mask(self, gate_logits: jax.Array) -> jax.Array:
    """Returns a mask that selects only the top-k groups of experts.

    Groups of experts are selected based on the sum of the top-2 expert scores
    for each group.

    Args:
      gate_logits: Array of shape `(batch, seq, num_experts)`.

    Returns:
      Array of shape `(batch, seq, num_experts)` that is 1 for experts in the
      top-k groups and 0 elsewhere.
    """
    # Find top groups based on each group's top-2 expert scores, where
    # `scores_grouped.shape =
    # (batch * seq, n_routing_groups, experts_per_group)`.
    scores_grouped = jnp.reshape(
        gate_logits,
        gate_logits.shape[:-1] + (self.config.n_routing_groups, -1),
    )
    top2_in_group_vals, _ = jax.lax.top_k(scores_grouped, k=2)
    group_scores = jnp.sum(jnp.astype(top2_in_group_vals, jnp.float32), axis=-1)
    _, group_idx = jax.lax.top_k(group_scores, k=self.config.topk_routing_group)

    # Mask selected groups so that only those experts are considered.
    group_mask = jax.nn.one_hot(group_idx, num_classes=self.config.n_routing_groups, dtype=jnp.float32)
    group_mask = jnp.sum(group_mask, axis=-2)

    # Apply masks and get top-k indices.
    score_mask_expanded = jnp.broadcast_to(
        group_mask[..., None],
        group_mask.shape + (self.num_experts // self.config.n_routing_groups,),
    )
    return jnp.reshape(
        score_mask_expanded,
        score_mask_expanded.shape[:-2] + (self.num_experts,),
    )

  def deepseek_routing(self, gate_logits: jax.Array, pre_bias_logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """DeepSeek routing logit.

    If the configuration does not specify routing groups (`n_routing_groups` is
    -1), we use a standard top-k routing mechanism. Otherwise, we force all
    selected experts to be from the a subset of the highest rated expert groups.

    The selection process uses post_bias logits, while the return weights use
    pre_bias logits.

    Args:
      gate_logits: Array of shape `(batch, seq, num_experts)`.
      pre_bias_logits: Array of shape `(batch, seq,num_experts)`.

    Returns:
      - top_k_weights: `(batch, seq, num_experts_per_tok)` array of weight values for
        each selected expert.
      - top_k_indices: `(batch, seq, num_experts_per_tok)` array of indices
        identifying the selected experts for each token.
    """
    expert_mask = 1 if self.config.n_routing_groups == -1 else self.expert_group_mask(gate_logits)
    _, top_k_indices = jax.lax.top_k(
        jnp.where(expert_mask > 0, gate_logits, -jnp.inf),
        k=self.num_experts_per_tok,
    )
    top_k_weights = jnp.take_along_axis(pre_bias_logits, top_k_indices, axis=-1)
    return top_k_weights, top_k_indices

  def apply_ffn_activation(self, layer_w0, layer_w1):
    """Applies FFN activation function."""
    with jax.named_scope("ffn_act"):
      if self.config.decoder_block == ctypes.DecoderBlockType.GPT_OSS:
        layer_w0 = jnp.clip(layer_w0, min=None, max=self.config.mlp_activations_limit)
        layer_w1 = jnp.clip(
            layer_w1,
            min=-self.config.mlp_activations_limit,
            max=self.config.mlp_activations_limit,
        )
        layer_act = self.activation_fn(layer_w0 * 1.702)
        glu = jnp.multiply(layer_w0, layer_act)
        intermediate_layer = jnp.multiply(glu, (layer_w1 + 1))
      elif (
          self.config.decoder_block in (ctypes.DecoderBlockType.DEEPSEEK, ctypes.DecoderBlockType.DEEPSEEK4)
          and self.config.mlp_activations_limit > 0.0
      ):
        # DeepSeek V4 uses bounds to clip the SwiGLU activations
        layer_w0 = jnp.clip(layer_w0, min=None, max=self.config.mlp_activations_limit)
        layer_w1 = jnp.clip(
            layer_w1,
            min=-self.config.mlp_activations_limit,
            max=self.config.mlp_activations_limit,
        )
        layer_act = self.activation_fn(layer_w0)
        intermediate_layer = jnp.multiply(layer_act, layer_w1)
      else:
        layer_act = self.activation_fn(layer_w0)
        intermediate_layer = jnp.multiply(layer_act, layer_w1)
      return intermediate_layer.astype(self.dtype)

  # adapted: permute, unpermute, _maybe_truncate_local_group_size, local_permute, get_all_to_all_params,
  # transform_bias, get_ragged_buffer_size and sparse_matmul (the sparse-matmul path) not copied

  def reshape_and_update_weights(self, weights, indices):
    """reshape and update weights."""
    # input of weights and indices: (batch_size, seq_len, num_experts_per_tok)
    # output of updated weights: (batch_size, seq_len, num_experts)
    update_weights = jnp.zeros((weights.shape[0], weights.shape[1], self.num_experts), dtype=self.dtype)
    index_update = (
        self._maybe_shard_with_logical(
            jnp.arange(weights.shape[0])[:, None, None],
            ("activation_batch", None, None),
        ),
        self._maybe_shard_with_logical(jnp.arange(weights.shape[1])[:, None], ("activation_length", None)),
        indices,
    )
    weight_sharding = (
        create_sharding(self.mesh, ("activation_batch", "activation_length", None))
        if self.config.shard_mode == ShardMode.EXPLICIT
        else None
    )
    update_weights = update_weights.at[index_update].set(weights, out_sharding=weight_sharding)
    return update_weights

  def get_context_partition_and_sub_seq(self, seq_len):
    cp = self.get_context_autoregressive_parallelism_size()
    if seq_len % cp != 0:
      cp = 1
    sub_seq = seq_len // cp
    return cp, sub_seq

  def generate_masks_subgroup(self, top_k_indices, softmax_probs):
    """Subgroup mask generation for inference only."""
    # calculate
    # expert_capacity = (tokens_per_batch / num_experts) * capacity_factor
    batch_size, seq_len, _ = top_k_indices.shape
    cp, sub_seq = self.get_context_partition_and_sub_seq(seq_len)

    # Break sequence into subsequences (groups) of tokens, and route only within
    # each group.
    top_k_indices = jnp.reshape(top_k_indices, (batch_size, cp, sub_seq, top_k_indices.shape[2]))

    tokens_per_batch = sub_seq * self.num_experts_per_tok
    # this is to avoid expert_capacity_per_batch = 0
    expert_capacity_per_batch = int(
        max(
            math.ceil(tokens_per_batch / self.num_experts) * self.config.capacity_factor,
            self.config.capacity_factor,
        )
    )
    max_logging.log("Applying potential token dropping with a batch expert_capacity of" f" {expert_capacity_per_batch}")

    # calculate expert mask and drop tokens if needed
    # shape of output expert mask: (batch, sequence, num_experts_per_tok)
    #
    # A small example:
    # give num_experts=4 & num_experts_per_tok=2, and two tokens are routed to
    # expert [0, 1] & [1, 3],
    # then expert_mask becomes
    # [[[[1, 0, 0, 0],[0, 1, 0, 0]], [[0, 1, 0, 0],[0, 0, 0, 1]]]],
    # after cumsum, expert_token_count becomes
    # [[[[1, 0, 0, 0],[1, 1, 0, 0]], [[1, 2, 0, 0],[1, 2, 0, 1]]]],
    # if we set expert_capacity=1,
    # trunc_expert_mask becomes
    # [[[[1, 0, 0, 0],[0, 1, 0, 0]], [[0, 0, 0, 0],[0, 0, 0, 1]]]],
    # so the 2nd token for expert #1 ([0, 1] & [1, 3]) is dropped, output of
    # updated_expert_mask is [[[1, 1],[0, 1]]].
    expert_mask = jax.nn.one_hot(top_k_indices, num_classes=self.num_experts, dtype=jnp.int32)
    expert_mask_fused = jnp.reshape(
        expert_mask,
        (batch_size, cp, sub_seq * self.num_experts_per_tok, self.num_experts),
    )
    expert_mask_fused = self._maybe_shard_with_logical(expert_mask_fused, ("activation_batch", None, None, None))
    expert_token_count_fused = jnp.cumsum(expert_mask_fused, axis=2)
    expert_token_count = jnp.reshape(
        expert_token_count_fused,
        ((batch_size, cp, sub_seq, self.num_experts_per_tok, self.num_experts)),
    )
    expert_token_count = self._maybe_shard_with_logical(
        expert_token_count,
        ("activation_batch", "activation_norm_length", None, None, None),
    )
    trunc_expert_mask = expert_mask * jnp.less_equal(expert_token_count, expert_capacity_per_batch)
    combined_expert_mask = jnp.sum(trunc_expert_mask, axis=3)

    # reshape & update weights
    softmax_probs = jnp.reshape(
        softmax_probs,
        ((batch_size, cp, sub_seq, self.num_experts)),
    )
    softmax_probs *= combined_expert_mask

    # calculate token position in expert capacity dimension
    expert_token_position_fused = expert_mask_fused * expert_token_count_fused
    expert_token_position = jnp.reshape(
        expert_token_position_fused,
        (batch_size, cp, sub_seq, self.num_experts_per_tok, self.num_experts),
    )
    combined_expert_token_position = jnp.sum(expert_token_position, axis=3) * combined_expert_mask
    expert_token_position_in_capacity = jax.nn.one_hot(
        combined_expert_token_position,
        num_classes=expert_capacity_per_batch + 1,
        dtype=jnp.int32,
    )

    # shape of combine_mask is
    # (batch_size, seq_len, num_experts, expert_capacity_per_batch + 1),
    # and cut 0-dimension which is always 0
    combine_mask = softmax_probs[..., None] * expert_token_position_in_capacity
    combine_mask = combine_mask[..., 1:]
    dispatch_mask = combine_mask.astype(bool)

    # ici_context_parallelism
    dispatch_mask = jnp.reshape(
        dispatch_mask,
        (batch_size, cp, sub_seq, self.num_experts, expert_capacity_per_batch),
    )
    combine_mask = jnp.reshape(
        combine_mask,
        (batch_size, cp, sub_seq, self.num_experts, expert_capacity_per_batch),
    )

    return dispatch_mask, combine_mask

  def generate_masks(self, top_k_indices, softmax_probs):
    """Generate masks."""
    # calculate
    # expert_capacity = (tokens_per_batch / num_experts) * capacity_factor
    batch_size, seq_len, _ = top_k_indices.shape

    tokens_per_batch = seq_len * self.num_experts_per_tok
    # this is to avoid expert_capacity_per_batch = 0
    expert_capacity_per_batch = int(
        max(
            math.ceil(tokens_per_batch / self.num_experts) * self.config.capacity_factor,
            self.config.capacity_factor,
        )
    )
    max_logging.log("Applying potential token dropping with a batch expert_capacity of" f" {expert_capacity_per_batch}")

    # calculate expert mask and drop tokens if needed
    # shape of output expert mask: (batch, sequence, num_experts_per_tok)
    #
    # A small example:
    # give num_experts=4 & num_experts_per_tok=2, and two tokens are routed to
    # expert [0, 1] & [1, 3],
    # then expert_mask becomes
    # [[[[1, 0, 0, 0],[0, 1, 0, 0]], [[0, 1, 0, 0],[0, 0, 0, 1]]]],
    # after cumsum, expert_token_count becomes
    # [[[[1, 0, 0, 0],[1, 1, 0, 0]], [[1, 2, 0, 0],[1, 2, 0, 1]]]],
    # if we set expert_capacity=1,
    # trunc_expert_mask becomes
    # [[[[1, 0, 0, 0],[0, 1, 0, 0]], [[0, 0, 0, 0],[0, 0, 0, 1]]]],
    # so the 2nd token for expert #1 ([0, 1] & [1, 3]) is dropped, output of
    # updated_expert_mask is [[[1, 1],[0, 1]]].
    expert_mask = jax.nn.one_hot(top_k_indices, num_classes=self.num_experts, dtype=jnp.int32)
    expert_mask_fused = jnp.reshape(
        expert_mask,
        (batch_size, seq_len * self.num_experts_per_tok, self.num_experts),
    )
    expert_mask_fused = self._maybe_shard_with_logical(expert_mask_fused, ("activation_batch_moe", None, None))
    expert_token_count_fused = jnp.cumsum(expert_mask_fused, axis=1)
    expert_token_count = jnp.reshape(
        expert_token_count_fused,
        ((batch_size, seq_len, self.num_experts_per_tok, self.num_experts)),
    )
    expert_token_count = self._maybe_shard_with_logical(
        expert_token_count,
        ("activation_batch", "activation_norm_length", None, None),
    )
    trunc_expert_mask = expert_mask * jnp.less_equal(expert_token_count, expert_capacity_per_batch)
    combined_expert_mask = jnp.sum(trunc_expert_mask, axis=2)

    softmax_probs *= combined_expert_mask

    # calculate token position in expert capacity dimension
    expert_token_position_fused = expert_mask_fused * expert_token_count_fused
    expert_token_position = jnp.reshape(
        expert_token_position_fused,
        (batch_size, seq_len, self.num_experts_per_tok, self.num_experts),
    )
    combined_expert_token_position = jnp.sum(expert_token_position, axis=2) * combined_expert_mask
    expert_token_position_in_capacity = jax.nn.one_hot(
        combined_expert_token_position,
        num_classes=expert_capacity_per_batch + 1,
        dtype=jnp.int32,
    )

    # shape of combine_mask is
    # (batch_size, seq_len, num_experts, expert_capacity_per_batch + 1),
    # and cut 0-dimension which is always 0
    combine_mask = softmax_probs[..., None] * expert_token_position_in_capacity
    combine_mask = combine_mask[..., 1:]
    dispatch_mask = combine_mask.astype(bool)

    return dispatch_mask, combine_mask

  # See Switch Transformer (https://arxiv.org/abs/2101.03961) for more details.
  def load_balance_loss(self, top_k_indices, logits) -> jax.Array:
    """Compute the sequence-wise load balance loss.

    For DeepSeek V4 like models, standard load balancing across an entire batch can
    be inadequate due to heterogeneous prompt lengths and varying sequence
    characteristics. This method implements sequence-wise load balancing by
    computing the token density and routing probabilities on a per-sequence basis.

    The resulting loss is scaled by `self.config.load_balance_loss_weight`.
    When this configuration value is set > 0, the computed loss is aggregated
    into the total training loss. By minimizing this scaled auxiliary loss,
    the optimizer updates the routing parameters to actively enforce an even
    distribution of tokens to experts within each individual sequence.
    """
    expert_mask = jax.nn.one_hot(top_k_indices, num_classes=self.num_experts, dtype=jnp.int32)
    summed_expert_mask = jnp.sum(expert_mask, axis=2)
    # Get fraction of tokens dispatched to each expert
    # jnp.mean over axis=1 (sequence length) isolates the token density per sequence.
    density = jnp.mean(summed_expert_mask, axis=1)
    # get fraction of probability allocated to each expert
    # jnp.mean over axis=1 isolates the routing probability per sequence.
    density_prob = jnp.mean(logits, axis=1)
    # The sequence-wise densities and probabilities are multiplied and then averaged
    # over the batch dimension, scaled by the required constant.
    loss = jnp.mean(density * density_prob) * (self.num_experts**2) * self.config.load_balance_loss_weight
    return loss

  def get_einsum(
      self,
      rhs_mesh_axes: Tuple[Optional[str], ...] = (),
      einsum_name: str | None = None,
  ):
    """Get the Einstein summation."""

    # the check is to prevent aqteinsum as einsum op for dispatch and combine
    # einsums in ase when capacity_factor > 0
    # this is necessary to load pre-quantized weights in case of inference
    if self.config.model_call_mode == "inference" and einsum_name in (
        DISPATCH,
        COMBINE,
    ):
      return jnp.einsum

    if self.quant:

      def aqt_einsum(*args, **kwargs):  # pylint: disable=unused-argument
        # simply skip kwargs, since aqt einsum doesn't support any kwargs
        # like precision
        is_aqt = not isinstance(self.quant, quantizations.Fp8Quantization)
        kw = {"mesh_axes": rhs_mesh_axes} if is_aqt else {"dtype": self.dtype}
        return self.quant.einsum(**kw)(*args)  # pytype: disable=attribute-error

      einsum_op = aqt_einsum
    else:
      einsum_op = jnp.einsum
    return einsum_op

  def maybe_all_gather_kernel_weight_in_expert_parallelism(
      self, kernel: jax.Array, kernel_axes: Tuple[Optional[str], ...]
  ):
    """All-gather kernel weight in expert parallelism if needed."""
    if self.get_expert_parallelism_size() > 1:
      # This will trigger all-gather using weight_dtype
      # relax it unless really necessary in expert parallelism only
      # Otherwise compiler will handle communication automatically
      # esp. with int8 quantization, kernel will be all-gathered in int8 instead
      # of weight_dtype
      kernel = self._maybe_shard_with_logical(kernel, kernel_axes)
    return kernel

  def dense_matmul(
      self,
      inputs,
      gate_logits,
      pre_bias_logits,
      w0_kernel,
      w1_kernel,
      wo_kernel,
      w0_bias,
      w1_bias,
      wo_bias,
      input_ids=None,
  ) -> tuple[jax.Array, Optional[jax.Array], Optional[jax.Array]]:
    """Dense matrix multiplication."""
    # gate_logits: batch, length, expert
    gate_logits = self._maybe_shard_with_logical(gate_logits, ("activation_batch_moe", "activation_length_moe", None))
    # NOTE: deepseek2 has a different pattern
    if self.config.model_name.startswith(("deepseek3", "deepseek4")):
      # pre_bias_logits is None for non-deepseek3/4 models, including deepseek2
      pre_bias_logits = self._maybe_shard_with_logical(
          pre_bias_logits, ("activation_batch_moe", "activation_length_moe", None)
      )
    top_k_weights, top_k_indices = self.get_topk(gate_logits, pre_bias_logits, self.rngs, input_ids=input_ids)
    is_llama4_decoder_layer = self.config.decoder_block == ctypes.DecoderBlockType.LLAMA4
    if is_llama4_decoder_layer:
      router_scores = jax.nn.sigmoid(top_k_weights.astype(jnp.float32)).astype(self.dtype)
      inputs = inputs * router_scores
    else:
      weights = self.reshape_and_update_weights(top_k_weights, top_k_indices)
    matmul_precision = jax.lax.Precision(self.config.matmul_precision)

    # Calculate load balance loss
    # DeepSeek V4 uses Hash Routing for the first `first_num_hash_layers` layers.
    # These layers route deterministically based on token IDs and do not generate auxiliary loss.
    if self.config.model_call_mode != "inference" and not self.is_hash_routing:
      softmax_probs = jax.nn.softmax(gate_logits.astype(jnp.float32), axis=-1).astype(self.dtype)
      lb_loss = (
          self.load_balance_loss(top_k_indices, softmax_probs) if self.config.load_balance_loss_weight > 0.0 else None
      )
      # TODO(dipakg-lang, b/521990776): Add sequence-wise balance loss * 0.0001
    else:
      lb_loss = None

    # Calculate routed bias updates (loss-free)
    # The bias update logic is only applicable to Top-K routed layers.
    if self.should_update_load_balance():
      bias_updates = calculate_load_balance_updates(
          top_k_indices,
          self.config.num_experts,
          self.config.routed_bias_update_rate,
      )
    else:
      bias_updates = None

    batch_size = inputs.shape[0]
    seq_len = inputs.shape[1]

    cp, sub_seq = self.get_context_partition_and_sub_seq(seq_len)

    if self.config.capacity_factor > 0:
      # token dropping if needed
      moe_peel_expert = False  # only the training dispatch/MLP path peels 'expert' from the batch dim
      if self.config.model_call_mode != "inference":
        # TODO(b/425930949): remove this pylint by refactoring the logic here.
        dispatch_mask, combine_mask = self.generate_masks(
            top_k_indices, weights  # pylint: disable=undefined-variable,possibly-used-before-assignment
        )
        mask_axes = (
            "activation_batch_moe",
            "activation_norm_length_moe",
            None,
            None,
        )
        # Dispatch/MLP are already expert-sharded via "activation_exp". With
        # moe_dispatch_no_expert_sharding we peel 'expert' off the batch dim of these specs
        # (see _maybe_shard_moe_dispatch) so the GEMM stays expert-parallel (AllToAll) instead
        # of double-mapping E and B onto 'expert' (FSDP-style fallback).
        moe_peel_expert = self.config.moe_dispatch_no_expert_sharding
        dispatch_axis = (
            "activation_exp",
            "activation_batch_moe",
            None,
            "activation_embed_moe",
        )
        mlp_axis = (
            "activation_exp",
            "activation_batch_moe",
            None,
            "activation_mlp",
        )
        dispatch_eimsum = "BSM,BSEC -> EBCM"
        mlp_up_einsum = "EBCM,EMH -> EBCH"
        mlp_down_einsum = "EBCH,EHM -> EBCM"
        output_einsum = "EBCM,BSEC -> BSM"
      else:
        # TODO(b/425930507): Try replacing `softmax_probs` with padded weights
        # and verify with decode acc tests.
        softmax_probs = jax.nn.softmax(gate_logits.astype(jnp.float32), axis=-1).astype(self.dtype)
        dispatch_mask, combine_mask = self.generate_masks_subgroup(top_k_indices, softmax_probs)
        if self.get_context_autoregressive_parallelism_size() > 0 and cp == 1:
          mask_axes = (
              "activation_norm_length_moe",
              "activation_batch_moe",
              None,
              None,
              None,
          )
          input_axis = (
              "activation_norm_length_moe",
              "activation_batch_moe",
              None,
              "activation_embed_moe",
          )
          dispatch_axis = (
              "activation_exp",
              "activation_batch_moe",
              None,
              None,
              "activation_embed_moe",
          )
          mlp_axis = (
              "activation_exp",
              "activation_batch_moe",
              None,
              None,
              "activation_mlp",
          )
        else:
          mask_axes = (
              "activation_batch_moe",
              "activation_norm_length_moe",
              None,
              None,
              None,
          )
          input_axis = (
              "activation_batch_moe",
              "activation_norm_length_moe",
              None,
              "activation_embed_moe",
          )
          dispatch_axis = (
              "activation_exp",
              "activation_batch_moe",
              None,
              None,
              "activation_embed_moe",
          )
          mlp_axis = (
              "activation_exp",
              "activation_batch_moe",
              None,
              None,
              "activation_mlp",
          )
        dispatch_eimsum = "BNSM,BNSEC -> EBNCM"
        mlp_up_einsum = "EBNCM,EMH -> EBNCH"
        mlp_down_einsum = "EBNCH,EHM -> EBNCM"
        output_einsum = "EBNCM,BNSEC -> BNSM"

        inputs = jnp.reshape(inputs, (batch_size, cp, sub_seq, inputs.shape[2]))
        inputs = self._maybe_shard_with_logical(inputs, input_axis)

      dispatch_mask = self._maybe_shard_with_logical(dispatch_mask, mask_axes)
      combine_mask = self._maybe_shard_with_logical(combine_mask, mask_axes)

      with jax.named_scope("dispatch"):
        # only cp during prefill
        dispatch = self.get_einsum(rhs_mesh_axes=mask_axes, einsum_name=DISPATCH)(
            dispatch_eimsum, inputs, dispatch_mask, precision=matmul_precision
        )
        if cp > 1:
          dispatch = self._maybe_shard_with_logical(
              dispatch,
              (
                  None,
                  "activation_batch_moe",
                  "activation_norm_length_moe",
                  None,
                  "activation_embed_moe",
              ),
          )
        dispatch = self._maybe_shard_moe_dispatch(dispatch, dispatch_axis, moe_peel_expert)
      with jax.named_scope("wi_0"):
        w0_kernel_axes = ("exp", None, "mlp")
        w0_kernel = self.maybe_all_gather_kernel_weight_in_expert_parallelism(w0_kernel, w0_kernel_axes)
        layer_w0 = self.get_einsum(rhs_mesh_axes=w0_kernel_axes)(
            mlp_up_einsum, dispatch, w0_kernel, precision=matmul_precision
        )
        if self.config.mlp_bias:
          w0_bias = w0_bias[:, None, None, :]
          layer_w0 = layer_w0 + w0_bias

        if self.config.activations_in_float32:
          layer_w0 = layer_w0.astype(jnp.float32)
        layer_w0 = self._maybe_shard_moe_dispatch(layer_w0, mlp_axis, moe_peel_expert)
        layer_w0 = adc.checkpoint_name(adc.checkpoint_name(layer_w0, "mlpwi_0"), "moe_mlpwi_0")
      with jax.named_scope("wi_1"):
        w1_kernel_axes = ("exp", None, "mlp")
        w1_kernel = self.maybe_all_gather_kernel_weight_in_expert_parallelism(w1_kernel, w1_kernel_axes)
        layer_w1 = self.get_einsum(rhs_mesh_axes=w1_kernel_axes)(
            mlp_up_einsum, dispatch, w1_kernel, precision=matmul_precision
        )
        if self.config.mlp_bias:
          w1_bias = w1_bias[:, None, None, :]
          layer_w1 = layer_w1 + w1_bias
        if self.config.activations_in_float32:
          layer_w1 = layer_w1.astype(jnp.float32)
        layer_w1 = self._maybe_shard_moe_dispatch(layer_w1, mlp_axis, moe_peel_expert)
        layer_w1 = adc.checkpoint_name(adc.checkpoint_name(layer_w1, "mlpwi_1"), "moe_mlpwi_1")
      layer_multiply = self.apply_ffn_activation(layer_w0, layer_w1)
      with jax.named_scope("wo"):
        wo_kernel_axes = ("exp", "mlp", None)
        wo_kernel = self.maybe_all_gather_kernel_weight_in_expert_parallelism(wo_kernel, wo_kernel_axes)
        intermediate_layer = self.get_einsum(rhs_mesh_axes=wo_kernel_axes)(
            mlp_down_einsum,
            layer_multiply,
            wo_kernel,
            precision=matmul_precision,
        )
        if self.config.mlp_bias:
          wo_bias = wo_bias[:, None, None, :]
          intermediate_layer = intermediate_layer + wo_bias
        if self.config.activations_in_float32:
          intermediate_layer = intermediate_layer.astype(jnp.float32)
        if self.config.model_call_mode != "inference":
          intermediate_layer = self._maybe_shard_with_logical(
              intermediate_layer,
              (
                  "activation_exp",
                  "activation_batch_moe",
                  None,
                  "activation_embed_moe",
              ),
          )
        intermediate_layer = adc.checkpoint_name(adc.checkpoint_name(intermediate_layer, "mlpwo"), "moe_mlpwo")
      with jax.named_scope("combine"):
        # Matmul & element wise operation
        output = self.get_einsum(rhs_mesh_axes=mask_axes, einsum_name=COMBINE)(
            output_einsum,
            intermediate_layer,
            combine_mask,
            precision=matmul_precision,
        )
        if output.ndim == 4:
          output = jnp.reshape(
              output,
              (
                  output.shape[0],
                  output.shape[1] * output.shape[2],
                  output.shape[3],
              ),
          )
      return output, lb_loss, bias_updates
    else:
      inputs = self._maybe_shard_with_logical(
          inputs,
          (
              "activation_batch_moe",
              "activation_norm_length_moe",
              "activation_embed_moe",
          ),
      )
      with jax.named_scope("wi_0"):
        layer_w0 = self.get_einsum(rhs_mesh_axes=self.wi_kernel_axes)(
            "BSM,EMH -> BSEH", inputs, w0_kernel, precision=matmul_precision
        )
        if self.config.mlp_bias:
          layer_w0 = layer_w0 + w0_bias[None, None, :, :]
        if self.config.activations_in_float32:
          layer_w0 = layer_w0.astype(jnp.float32)
        layer_w0 = adc.checkpoint_name(adc.checkpoint_name(layer_w0, "mlpwi_0"), "moe_mlpwi_0")
      with jax.named_scope("wi_1"):
        layer_w1 = self.get_einsum(rhs_mesh_axes=self.wi_kernel_axes)(
            "BSM,EMH -> BSEH", inputs, w1_kernel, precision=matmul_precision
        )
        if self.config.mlp_bias:
          layer_w1 = layer_w1 + w1_bias[None, None, :, :]
        if self.config.activations_in_float32:
          layer_w1 = layer_w1.astype(jnp.float32)
        layer_w1 = adc.checkpoint_name(adc.checkpoint_name(layer_w1, "mlpwi_1"), "moe_mlpwi_1")
      layer_multiply = self.apply_ffn_activation(layer_w0, layer_w1)

      with jax.named_scope("wo"):
        intermediate_layer = self.get_einsum(rhs_mesh_axes=self.wo_kernel_axes)(
            "BSEH,EHM -> BSEM",
            layer_multiply,
            wo_kernel,
            precision=matmul_precision,
        )
        if self.config.mlp_bias:
          intermediate_layer = intermediate_layer + wo_bias[None, None, :, :]
        if self.config.activations_in_float32:
          intermediate_layer = intermediate_layer.astype(jnp.float32)
        intermediate_layer = adc.checkpoint_name(adc.checkpoint_name(intermediate_layer, "mlpwo"), "moe_mlpwo")
      with jax.named_scope("weight_sum"):
        if is_llama4_decoder_layer:
          weights = self.reshape_and_update_weights(jnp.ones_like(top_k_weights), top_k_indices)
        if self.config.float32_weight_sum:
          intermediate_layer = intermediate_layer.astype(jnp.float32)
          weights = weights.astype(jnp.float32)
        # cast to f32 for sum up in einsum op
        output = jnp.einsum(
            "BSEM,BSE -> BSM",
            intermediate_layer,
            weights,
            precision=matmul_precision,
        ).astype(self.dtype)
      return output, lb_loss, bias_updates

  # adapted: fused_moe_matmul (tpu-inference) and retrieve_quantized_weight (aqt serving) not copied

  def __call__(
      self,
      inputs: jax.Array,
      input_ids: jax.Array | None = None,
      gate_inputs: jax.Array | None = None,
      out_sharding: NamedSharding | None = None,
  ) -> tuple[jax.Array, Optional[jax.Array], Optional[jax.Array]]:
    """Executes the routed MoE block.

    Args:
      inputs: The input activations.
      input_ids: Optional token IDs corresponding to the inputs, used strictly for Hash Routing
        in DeepSeek V4's early MoE layers. If None, routing relies purely on `gate_inputs` or `inputs`.
      gate_inputs: Optional alternate inputs to feed into the routing gate.
      out_sharding: Optional sharding specification for the output.

    Returns:
      A tuple containing the MoE output, the load balance loss (if applicable),
      and any routed bias updates.
    """
    cfg = self.config
    inputs = inputs.astype(cfg.dtype)
    gate_dtype = jnp.float32 if cfg.float32_gate_logits else cfg.dtype
    routing_inputs = inputs if gate_inputs is None else gate_inputs.astype(gate_dtype)
    gate_logits, pre_bias_logits = self.gate(routing_inputs)

    wo_kernel = jnp.asarray(self.wo[...], self.dtype)

    fused_kernel = None
    w0_kernel = None
    w1_kernel = None
    if cfg.prefuse_moe_weights and cfg.attention in ("vllm_rpa", "vllm_batched_rpa") and not self.is_hash_routing:
      fused_kernel = jnp.asarray(self.wi[...], self.dtype)
    elif cfg.prefuse_moe_weights:
      wi = jnp.asarray(self.wi[...], self.dtype)
      n = wi.shape[-1] // 2
      w0_kernel = wi[..., :n]
      w1_kernel = wi[..., n:]
    else:
      w0_kernel = jnp.asarray(self.wi_0[...], self.dtype)
      w1_kernel = jnp.asarray(self.wi_1[...], self.dtype)

    # For fused MoE path (inference only), if we have not fused expert
    # scales at init, we must apply them to wo_kernel here because
    # fused_moe_func doesn't support them. Other paths (dense/sparse
    # matmul) apply them to top_k_weights in get_topk.
    is_fused_moe_path = cfg.attention in ("vllm_rpa", "vllm_batched_rpa") and not self.is_hash_routing
    if is_fused_moe_path:
      if self.per_expert_scale is not None and not (cfg.model_call_mode == "inference" and cfg.fuse_expert_scales):
        wo_kernel = wo_kernel * jnp.asarray(self.per_expert_scale[...], self.dtype)[:, None, None]

    if self.wi_0_sparsity_module is not None:
      _, w0_kernel = self.wi_0_sparsity_module(jnp.zeros_like(w0_kernel), w0_kernel)
      _, w1_kernel = self.wi_1_sparsity_module(jnp.zeros_like(w1_kernel), w1_kernel)
      _, wo_kernel = self.wo_sparsity_module(jnp.zeros_like(wo_kernel), wo_kernel)
    if cfg.mlp_bias:
      w0_bias = jnp.asarray(self.wi_0_bias[...], self.dtype)
      w1_bias = jnp.asarray(self.wi_1_bias[...], self.dtype)
      wo_bias = jnp.asarray(self.wo_bias[...], self.dtype)
    else:
      w0_bias, w1_bias, wo_bias = None, None, None

    # vllm_rpa codepath uses fused_moe_func from tpu_inference for optimized inference.
    # The fused MoE kernel currently only supports standard Top-K routing with associated
    # weights. Hash routed layers bypass this kernel and fall back
    # to the sparse matmul implementation.
    if cfg.attention in ("vllm_rpa", "vllm_batched_rpa") and not self.is_hash_routing:
      output, lb_loss, bias_updates = self.fused_moe_matmul(
          inputs,
          gate_logits,
          wo_kernel,
          w0_kernel=w0_kernel,
          w1_kernel=w1_kernel,
          fused_kernel=fused_kernel,
      )
    elif cfg.sparse_matmul:
      if quantizations.in_serve_mode(self.quant):
        w0_kernel, w1_kernel, wo_kernel = self.retrieve_quantized_weight(
            inputs,
            gate_logits,
            pre_bias_logits,
            w0_kernel,
            w1_kernel,
            wo_kernel,
            w0_bias,
            w1_bias,
            wo_bias,
        )
      output, lb_loss, bias_updates = self.sparse_matmul(
          inputs,
          gate_logits,
          pre_bias_logits,
          w0_kernel,
          w1_kernel,
          wo_kernel,
          w0_bias,
          w1_bias,
          wo_bias,
          input_ids,
      )
    else:
      output, lb_loss, bias_updates = self.dense_matmul(
          inputs,
          gate_logits,
          pre_bias_logits,
          w0_kernel,
          w1_kernel,
          wo_kernel,
          w0_bias,
          w1_bias,
          wo_bias,
          input_ids,
      )
    return output, lb_loss, bias_updates


class RoutedAndSharedMoE(nnx.Module):
  """Implements a block which combines shared and routed experts."""

  def __init__(
      self,
      config: ctypes.Config,
      mesh: jax.sharding.Mesh,
      kernel_init: NdInitializer,
      kernel_axes: Tuple[Optional[str], ...],
      rngs: nnx.Rngs,
      weight_dtype: ctypes.DType = jnp.float32,
      dtype: ctypes.DType = jnp.float32,
      quant: Optional[quantizations.AqtQuantization] = None,
      is_hash_routing: bool = False,
  ):
    """Initializes the RoutedAndSharedMoE module.

    Attributes:
      config: The main config setting.
      mesh: Mesh, device mesh.
      kernel_init: The initializer function for the kernel weight matrix.
      kernel_axes: A tuple of logical axis names for partitioning the kernel.
      rngs: An `nnx.Rngs` object used for initializing parameters.
      weight_dtype: The data type of the kernel weights.
      dtype: The data type for the computation.
      quant: The quantization configuration. If None, no quantization is applied.
      is_hash_routing: Passed down to the internal `RoutedMoE` to determine routing behavior (e.g. hash vs top-K).
    """
    self.config = config
    self.mesh = mesh
    self.kernel_init = kernel_init
    self.kernel_axes = kernel_axes
    self.weight_dtype = weight_dtype
    self.dtype = dtype
    self.quant = quant
    self.rngs = rngs
    self.is_hash_routing = is_hash_routing
    self.moe_expert_input_dim = (
        self.config.emb_dim if self.config.moe_expert_input_dim <= 0 else self.config.moe_expert_input_dim
    )

    # NOTE: the name MoeBlock_0 is to ensure reverse compatibility with
    # existing checkpoints for routed experts.
    self.MoeBlock_0 = RoutedMoE(
        config=self.config,
        num_experts=self.config.num_experts,
        num_experts_per_tok=self.config.num_experts_per_tok,
        mesh=self.mesh,
        kernel_init=self.kernel_init,
        kernel_axes=("embed_moe", None),
        intermediate_dim=self.config.moe_mlp_dim,
        dtype=self.config.dtype,
        weight_dtype=self.config.weight_dtype,
        quant=self.quant,
        rngs=self.rngs,
        is_hash_routing=self.is_hash_routing,
    )

    shared_expert_mlp_dim = maxtext_utils.get_shared_expert_mlp_dim(self.config)
    self.shared_experts = linears.MlpBlock(
        mesh=self.mesh,
        in_features=self.moe_expert_input_dim,
        intermediate_dim=self.config.shared_experts * shared_expert_mlp_dim,
        activations=self.config.mlp_activations,
        kernel_init=self.kernel_init,
        intermediate_dropout_rate=self.config.dropout_rate,
        dtype=self.config.dtype,
        weight_dtype=self.config.weight_dtype,
        config=self.config,
        quant=self.quant,
        rngs=self.rngs,
    )

  @property
  def routed_moe(self):
    return self.MoeBlock_0

  def __call__(
      self,
      inputs: jax.Array,
      original_inputs: jax.Array | None = None,
      gate_inputs: jax.Array | None = None,
      intermediate_sharding: NamedSharding | None = None,
      out_sharding: NamedSharding | None = None,
      input_ids: jax.Array | None = None,
  ) -> tuple[jax.Array, Optional[jax.Array], Optional[jax.Array]]:
    """Executes both the routed experts and the shared expert block.

    Args:
      inputs: The input activations.
      original_inputs: The original pre-normalization inputs (unused by default).
      gate_inputs: Optional alternate inputs to feed into the routing gate.
      intermediate_sharding: Optional sharding spec for the shared experts intermediate output.
      out_sharding: Optional sharding spec for the final combined output.
      input_ids: Optional token IDs corresponding to the inputs, used strictly for Hash Routing
        in DeepSeek V4's early MoE layers.

    Returns:
      A tuple containing the combined MoE output (routed + shared),
      the load balance loss, and any routed bias updates.
    """
    routed_experts, load_balance_loss, moe_bias_updates = self.routed_moe(
        inputs,
        gate_inputs=gate_inputs,
        out_sharding=out_sharding,
        input_ids=input_ids,
    )
    shared_experts = self.shared_experts(
        inputs,
        intermediate_sharding=intermediate_sharding,
        out_sharding=out_sharding,
    )
    return routed_experts + shared_experts, load_balance_loss, moe_bias_updates


def get_gate_logit(
    inputs_shape: tuple[int, ...],
    out_features_shape: Union[Iterable[int], int],
    model_name: str,
    axis: Union[Iterable[int], int] = -1,
    weight_dtype: ctypes.DType = jnp.float32,
    dtype: ctypes.DType = jnp.float32,
    kernel_init: NdInitializer = nd_dense_init(1.0, "fan_in", "truncated_normal"),
    kernel_axes: Tuple[Optional[str], ...] = (),
    use_bias: bool = False,
    score_func: str = "",
    quant: Optional[quantizations.AqtQuantization] = None,
    matmul_precision: str = "default",
    name: Optional[str] = None,
):
  """Creates a GateLogit Linen module."""

  axis = linears.canonicalize_tuple(axis)
  in_features_shape = tuple(inputs_shape[ax] for ax in linears.normalize_axes(axis, len(inputs_shape)))

  module = nnx_wrappers.to_linen(
      GateLogit,
      in_features_shape=in_features_shape,
      out_features_shape=out_features_shape,
      model_name=model_name,
      axis=axis,
      weight_dtype=weight_dtype,
      dtype=dtype,
      kernel_init=kernel_init,
      kernel_axes=kernel_axes,
      use_bias=use_bias,
      score_func=score_func,
      quant=quant,
      matmul_precision=matmul_precision,
      name=name,
      metadata_fn=variable_to_logically_partitioned,
      abstract_init=False,
  )
  return module


def get_routed_moe(
    config: ctypes.Config,
    num_experts: int,
    num_experts_per_tok: int,
    mesh: jax.sharding.Mesh,
    kernel_init: NdInitializer,
    kernel_axes: Tuple[Optional[str], ...],
    intermediate_dim: int = 2048,
    weight_dtype: ctypes.DType = jnp.float32,
    dtype: ctypes.DType = jnp.float32,
    quant: Optional[quantizations.AqtQuantization] = None,
    name: Optional[str] = None,
):
  """Creates a RoutedMoE Linen module."""

  module = nnx_wrappers.to_linen(
      RoutedMoE,
      config=config,
      num_experts=num_experts,
      num_experts_per_tok=num_experts_per_tok,
      mesh=mesh,
      kernel_init=kernel_init,
      kernel_axes=kernel_axes,
      intermediate_dim=intermediate_dim,
      weight_dtype=weight_dtype,
      dtype=dtype,
      quant=quant,
      name=name,
      metadata_fn=variable_to_logically_partitioned,
      abstract_init=False,
  )
  return module


def get_routed_and_shared_moe(
    config: ctypes.Config,
    mesh: jax.sharding.Mesh,
    kernel_init: NdInitializer,
    kernel_axes: Tuple[Optional[str], ...],
    weight_dtype: ctypes.DType = jnp.float32,
    dtype: ctypes.DType = jnp.float32,
    quant: Optional[quantizations.AqtQuantization] = None,
    name: Optional[str] = None,
    is_hash_routing: bool = False,
):
  """Creates a RoutedAndSharedMoE Linen module."""

  module = nnx_wrappers.to_linen(
      RoutedAndSharedMoE,
      config=config,
      mesh=mesh,
      kernel_init=kernel_init,
      kernel_axes=kernel_axes,
      weight_dtype=weight_dtype,
      dtype=dtype,
      quant=quant,
      name=name,
      is_hash_routing=is_hash_routing,
      metadata_fn=variable_to_logically_partitioned,
      abstract_init=False,
  )
  return module
