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

"""MaxText's ``src/maxtext/configs/base.yml`` sharding settings, as Python literals (values unchanged).

adapted: the YAML keys ``mesh_axes``, ``logical_axis_rules`` and ``data_sharding`` read with ``yaml.safe_load`` and
written out here (YAML comments dropped), so the tests need neither omegaconf nor MaxText's pyconfig.
"""

MESH_AXES = ['diloco',
 'data',
 'stage',
 'fsdp',
 'fsdp_transpose',
 'context',
 'context_usp_ulysses',
 'context_autoregressive',
 'tensor',
 'tensor_sequence',
 'expert',
 'autoregressive']

LOGICAL_AXIS_RULES = [['circular_repeats', []],
 ['activation_embed_and_logits_batch', ['data', 'stage', 'fsdp', 'fsdp_transpose', 'expert']],
 ['activation_embed_and_logits_batch_sequence',
  ['data', 'stage', 'fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
 ['activation_vocab', ['tensor', 'tensor_sequence']],
 ['activation_vocab', ['tensor']],
 ['activation_vocab', 'tensor_sequence'],
 ['vocab', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['embed_vocab', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
 ['activation_batch_attn', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['activation_input_length_attn', ['tensor_sequence', 'context']],
 ['activation_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['activation_kv_heads', ['tensor', 'tensor_sequence']],
 ['activation_length_attn', ['context', 'context_usp_ulysses']],
 ['activation_q_length', ['context', 'context_usp_ulysses']],
 ['activation_kv_length', []],
 ['activation_embed_attn', ['tensor']],
 ['activation_kv', ['tensor', 'tensor_sequence']],
 ['activation_kv_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['activation_kv_head_dim', ['tensor', 'tensor_sequence']],
 ['heads', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['q_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['kv_heads', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['qkv', []],
 ['kv', []],
 ['kv_head_dim', []],
 ['q_lora', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
 ['q_lora', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
 ['q_lora_up_proj', []],
 ['kv_lora', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
 ['kv_lora', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
 ['kv_lora_up_proj', []],
 ['activation_batch_moe', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['activation_length_moe', ['context', 'context_usp_ulysses']],
 ['activation_norm_length_moe', ['tensor_sequence', 'context', 'context_usp_ulysses']],
 ['activation_embed_moe', ['tensor']],
 ['activation_mlp_moe', ['tensor', 'tensor_sequence']],
 ['activation_exp', ['expert']],
 ['exp', 'expert'],
 ['mlp_moe', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
 ['embed_moe', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses']],
 ['embed_moe', ['fsdp', 'context', 'context_usp_ulysses']],
 ['activation_mlp', ['tensor', 'tensor_sequence']],
 ['activation_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['activation_length', ['context', 'context_usp_ulysses']],
 ['activation_norm_length', ['tensor_sequence', 'context', 'context_usp_ulysses']],
 ['activation_embed', ['tensor']],
 ['activation_stage', 'stage'],
 ['mlp', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
 ['gdn_head', ['fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive']],
 ['embed', ['fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert']],
 ['embed', ['fsdp', 'context', 'context_usp_ulysses', 'expert']],
 ['norm', ['tensor']],
 ['layers', 'stage'],
 ['diloco', 'diloco'],
 ['engram_dim', ['tensor']],
 ['dense_layers', []],
 ['moe_layers', []],
 ['local_layers', []],
 ['mhc', []],
 ['prefill_activation_length', ['context', 'context_usp_ulysses']],
 ['prefill_activation_norm_length', ['tensor_sequence', 'context', 'context_usp_ulysses']],
 ['activation_prefill_kv_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['decode_batch', ['data', 'fsdp', 'fsdp_transpose', 'expert']],
 ['decode_length', []],
 ['cache_heads', ['autoregressive', 'tensor', 'tensor_sequence']],
 ['paged_kv_heads', ['tensor']],
 ['cache_batch_prefill', []],
 ['cache_batch', []],
 ['cache_heads_none', []],
 ['cache_kv', []],
 ['cache_sequence', []],
 ['num_pages', []],
 ['tokens_per_page', []],
 ['paged_kv_head_dim_size', []],
 ['mlp_no_fsdp', ['tensor', 'tensor_sequence', 'autoregressive']],
 ['exp_with_fsdp', 'fsdp']]

DATA_SHARDING = [['data',
  'stage',
  'fsdp',
  'fsdp_transpose',
  'context',
  'context_usp_ulysses',
  'context_autoregressive',
  'tensor',
  'tensor_sequence',
  'expert',
  'autoregressive']]
