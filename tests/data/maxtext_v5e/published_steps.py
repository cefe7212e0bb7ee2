"""Published step times of MaxText's v5e table (``published.json``), imports no explorer code.

A row publishes TFLOP/s per chip; its step is MaxText's per-device training FLOPs (``calculate_tflops_training_per_device``
as it counted them when the table was written: every matmul's forward and backward, 3 x 2 x its multiply-adds, attention
without causal halving) over that figure. ``SHAPES`` are ``global_parameter_scale``'s (MaxText's ``get_individual_scales``).
"""

from __future__ import annotations

import json
import pathlib

HERE = pathlib.Path(__file__).parent
SEQ, VOCAB, HEAD_DIM = 2048, 32000, 128
# width, layers, per-device batch, heads (= kv heads), MLP width
SHAPES = {
    "16b": (4096, 32, 6, 64, 28672),
    "32b": (8192, 32, 4, 64, 28672),
    "64b": (8192, 64, 2, 64, 28672),
    "128b": (8192, 64, 1, 128, 57344),
}


def training_flops(model: str) -> float:
    """MaxText's per-device training FLOPs of one step (llama2 block: gated MLP of two input matrices)."""
    width, layers, batch, heads, mlp = SHAPES[model]
    tokens = batch * SEQ
    ffn = 2 * tokens * mlp * width * 3  # wi_0, wi_1, wo
    qkv = 2 * tokens * width * 3 * heads * HEAD_DIM
    projection = 2 * tokens * width * heads * HEAD_DIM
    attention = 4 * batch * SEQ * SEQ * heads * HEAD_DIM
    embedding = 2 * tokens * width * VOCAB
    return ((ffn + qkv + projection) * layers + embedding) * 3 + attention * layers * 3


def rows() -> list[dict]:
    """Every published row with its ``step_s``."""
    found = json.loads((HERE / "published.json").read_text())["rows"]
    return [row | {"step_s": training_flops(row["model"]) / (row["tflops_per_chip"] * 1e12)} for row in found]
