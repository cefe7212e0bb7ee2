"""Stage 3 (``explorer/reading/state.py``): the state's arrays with their names, and on Explicit axes their types'
specs beside the metadata; paths as Flax names them; names longer than the rank refused."""

import jax
import jax.numpy as jnp
import pytest
from flax import linen as nn

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.reading.state import padded, path_to_str
from tests.explicit_models import ALLOWED, CLASSES, explicit_layout as layout


def test_metadata_and_type_disagreeing_shows_the_type_and_says_why(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ALLOWED)
    report = analyze(layout(f"{CLASSES}:make_type_over_metadata", (2, 4), ("data", "model")))
    kernel = report.array("kernel")
    assert kernel.spec == (None, "model")
    assert kernel.logical_axes is None  # no Flax metadata: nnx.get_partition_spec says P()
    assert "its type is sharded P(None, 'model')" in kernel.note and "out_sharding" in kernel.note
    assert kernel.shard_shape == (16, 8)


def test_paths_keep_a_module_named_value_and_drop_a_box_value():
    params = {"attention": {"value": {"kernel": nn.LogicallyPartitioned(jnp.zeros(2), ("embed",))}}}
    paths = [path_to_str(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    assert paths == ["attention/value/kernel"]


def test_names_pad_to_the_rank_and_more_names_than_dimensions_are_refused():
    assert padded(("batch",), 3) == ("batch", None, None) and padded(None, 2) is None
    assert padded([["data", "model"], "embed"], 2) == (("data", "model"), "embed")  # a file's lists as tuples
    with pytest.raises(ExplorerError, match=r"name 3 dimensions of an array of rank 2"):
        padded(("batch", "embed", "mlp"), 2)
