"""Plain data shared by the tests: the small built-in transformer most of them analyse, compile or check.

Imports nothing, so the ground truth (which imports no explorer code) can use it too.
"""

SMALL_TRANSFORMER_OPTIONS = {
    "batch": 8,
    "seq_len": 16,
    "layers": 2,
    "d_model": 32,
    "heads": 8,
    "kv_heads": 4,  # grouped-query attention: two query heads per key/value head
    "head_dim": 8,
    "mlp_dim": 64,
    "vocab": 128,
}
