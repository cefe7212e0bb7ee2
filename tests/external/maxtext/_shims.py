"""Stand-ins for the MaxText modules the vendored layers import but these tests do not need.

Written for Partition Explorer's tests (not MaxText code): ``max_logging`` (logging only), ``max_utils.device_space``
(used only when parameters are offloaded to host memory, off here), and ``quantizations`` (only its type name and
``in_serve_mode``; quantization is off: ``quant=None``), whose real module needs aqt and qwix. For the MoE layer and the
Mixtral block: ``max_utils.get_batch_seq_len_for_mode`` and ``maxtext_utils.get_shared_expert_mlp_dim`` /
``should_prevent_cse_in_remat`` (each copied verbatim from ``src/maxtext/utils/{max_utils,maxtext_utils}.py``),
``quantizations.configure_kv_quant`` (``None``: ``quantize_kvcache`` is off) and qwix's ``qwix.pallas.get_current_rule``
(``None``: no quantization rule is in effect).
"""

import logging
import types

from .common_types import DecoderBlockType, MODEL_MODE_AUTOREGRESSIVE, MODEL_MODE_PREFILL, MODEL_MODE_TRAIN

max_logging = types.SimpleNamespace(
    log=lambda *a, **k: logging.getLogger("maxtext").info(*a),
    info=lambda *a, **k: logging.getLogger("maxtext").info(*a),
)


def _device_space():
  raise NotImplementedError("parameter offloading is not part of these tests")


# verbatim from src/maxtext/utils/max_utils.py
def get_batch_seq_len_for_mode(config, model_mode):
  """
  Resolves the batch size and sequence length based on the model's operational mode.

  Args:
    config: A configuration object with model parameters.
    model_mode: The current operational mode
                (e.g., PREFILL, AUTOREGRESSIVE, TRAIN).

  Returns:
    A tuple of (batch_size, seq_len).
  """
  if model_mode == MODEL_MODE_PREFILL:
    # Prefill mode: Process one full-length prompt.
    batch_size = 1
    seq_len = config.max_prefill_predict_length

  elif model_mode == MODEL_MODE_AUTOREGRESSIVE:
    # Autoregressive/decode mode: Generate one token at a time for a batch.
    batch_size = config.micro_batch_size_to_train_on
    seq_len = 1

  elif model_mode == MODEL_MODE_TRAIN:
    # Training mode: Process a full batch of full-length sequences.
    batch_size = config.micro_batch_size_to_train_on
    seq_len = config.max_target_length

  else:
    # Explicitly handle unknown modes instead of falling back to a default.
    raise ValueError(f"Unknown model_mode: {model_mode}")

  return batch_size, seq_len


max_utils = types.SimpleNamespace(device_space=_device_space, get_batch_seq_len_for_mode=get_batch_seq_len_for_mode)


# verbatim from src/maxtext/utils/maxtext_utils.py
def should_prevent_cse_in_remat(config):
  """Determines whether to prevent common subexpression elimination (CSE) in remat.

  CSE should not be prevented when:
  1. Layers are being scanned (scan_layers=True), OR
  2. Gradient accumulation is enabled (gradient_accumulation_steps > 1) on GPU hardware

  Args:
    config: Configuration object with scan_layers, gradient_accumulation_steps, and hardware

  Returns:
    bool: True if CSE should be prevented, False otherwise
  """
  if config.scan_layers:
    return False

  if config.gradient_accumulation_steps > 1 and config.hardware in ("gpu", "gpu_multiprocess"):
    return False

  return True


# verbatim from src/maxtext/utils/maxtext_utils.py
def get_shared_expert_mlp_dim(config):
  """Returns the MLP dimension used by the shared expert.

  GEMMA4 shared experts use mlp_dim, while other MoE blocks use moe_mlp_dim. See moe.py.
  """
  return config.mlp_dim if config.decoder_block == DecoderBlockType.GEMMA4 else config.moe_mlp_dim


maxtext_utils = types.SimpleNamespace(
    should_prevent_cse_in_remat=should_prevent_cse_in_remat, get_shared_expert_mlp_dim=get_shared_expert_mlp_dim
)


class AqtQuantization:  # only a type name for annotations; quantization is off (quant=None)
  pass


def in_serve_mode(quant) -> bool:
  return False


def configure_kv_quant(config):  # quantizations.py: None unless config.quantize_kvcache (off here)
  if config.quantize_kvcache:
    raise NotImplementedError("kv-cache quantization is not part of these tests")
  return None


quantizations = types.SimpleNamespace(
    AqtQuantization=AqtQuantization, in_serve_mode=in_serve_mode, configure_kv_quant=configure_kv_quant
)

# qwix.pallas: no quantization rule is in effect (quantization is off), so get_current_rule finds none
qpl = types.SimpleNamespace(get_current_rule=lambda name: None)
