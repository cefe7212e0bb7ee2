"""A tiny MaxText config the tests share (2 decoder blocks of width 256: seconds to build, trace and compile), and the
mark that skips a test where MaxText, an optional extra, is not installed (saying the install line)."""

import importlib.util

import pytest

from explorer.models.maxtext import INSTALL_LINE

HAS_MAXTEXT = importlib.util.find_spec("maxtext") is not None
needs_maxtext = pytest.mark.skipif(not HAS_MAXTEXT, reason=f"MaxText is an optional extra, not installed: {INSTALL_LINE}")

TINY = [
    "base_emb_dim=256",
    "base_num_query_heads=4",
    "base_num_kv_heads=4",
    "base_mlp_dim=512",
    "base_num_decoder_layers=2",
    "head_dim=64",
    "vocab_size=1024",
    "max_target_length=128",
    "per_device_batch_size=1",
]
