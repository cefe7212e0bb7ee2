"""Published step times of MaxText's v5p and v4 tables and tpu-recipes' v6e runs (``published.json``), imports no explorer code.

A v6e row publishes its step in seconds (``published_step_s``, the log line of its recipe): that is its step.

A row publishes TFLOP/s per chip; its step is MaxText's per-device training TFLOPs as its ``train.py`` counted them at
the commit that published the table, over that figure:

- v5p (``76bd53b0f``, 2023-12-15, ``calculate_training_tflops``): 6 x the parameter count x the device's tokens, plus
  attention's 12 x heads x layers x head_dim x sequence^2 x batch **halved for causality**.
- v4 (``281e04bf3``, 2023-04-27): 6 x the parameter count x the device's tokens, **no attention term**.

The parameter count is ``calculate_num_params_from_pytree`` of the model then: the shared token embedding (vocab x
width; ``logits_via_embedding``), per layer an RMS norm scale (width), query, key, value and output projections
(width x heads x head_dim each), a relu MLP (width x mlp, mlp x width), on v4 a relative position bias (32 buckets x
heads, T5 style, per layer), and the final norm (width). Widths from the row's keys: ``global_parameter_scale`` as
that commit's ``get_individual_scales`` doubled them (heads and MLP, then width, then layers, in turn).
"""

from __future__ import annotations

import json
import math
import pathlib

HERE = pathlib.Path(__file__).parent
RELATIVE_POSITION_BUCKETS = 32  # v4's T5-style relative position bias (MaxText's layers.py at 281e04bf3)


def dimensions(keys: dict) -> dict:
    """Width, heads, MLP width and layers of a row's keys (2023's ``get_individual_scales``)."""
    log2 = int(math.log2(keys.get("global_parameter_scale", 1)))
    base, rest = divmod(log2, 3)
    heads_scale, width_scale = base + int(rest > 0), base + int(rest > 1)
    return {
        "width": keys["base_emb_dim"] * 2**width_scale,
        "heads": keys["base_num_query_heads"] * 2**heads_scale,
        "mlp": keys["base_mlp_dim"] * 2**heads_scale,
        "layers": keys["base_num_decoder_layers"] * 2**base,
    }


def parameters(row: dict) -> int:
    """The model's parameter count as MaxText counted it then."""
    keys, d = row["maxtext"], dimensions(row["maxtext"])
    attention = 4 * d["width"] * d["heads"] * keys["head_dim"]
    relative = RELATIVE_POSITION_BUCKETS * d["heads"] if row["generation"] == "v4" else 0
    layer = d["width"] + attention + 2 * d["width"] * d["mlp"] + relative
    return keys["vocab_size"] * d["width"] + d["layers"] * layer + d["width"]


def training_flops(row: dict) -> float:
    """MaxText's per-device training FLOPs of one step as the table's commit counted them (see the module docstring)."""
    keys, d = row["maxtext"], dimensions(row["maxtext"])
    seq, batch = keys["max_target_length"], keys["per_device_batch_size"]
    flops = 6 * parameters(row) * seq * batch
    if row["generation"] == "v5p":
        flops += 12 * d["heads"] * d["layers"] * keys["head_dim"] * seq**2 * batch / 2
    return flops


def rows() -> list[dict]:
    """Every published row with its ``step_s``."""
    found = json.loads((HERE / "published.json").read_text())["rows"]
    return [row | {"step_s": row.get("published_step_s") or training_flops(row) / (row["tflops_per_chip"] * 1e12)} for row in found]
