"""The advisor's search space for a MaxText config (``space.maxtext_candidates``): every candidate is the config's own
keys with the ``ici_*_parallelism`` set to one split of the slice, built by MaxText's own machinery (its 12-axis mesh,
its rules), so none is refused for the inputs' sharding, and the winner's keys, fed back through ``--maxtext``, give
MaxText the winner's mesh. Stage 1 only (no compile). Skips without MaxText (an optional extra)."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

from explorer.advisor import Depth, candidate_layouts, depth_of, maxtext_keys, stage1
from explorer.errors import ExplorerError
from explorer.hardware.targets import parse_target
from explorer.layout import Layout, parse_layout
from explorer.models import maxtext

HAS_MAXTEXT = importlib.util.find_spec("maxtext") is not None
needs_maxtext = pytest.mark.skipif(not HAS_MAXTEXT, reason=f"MaxText is an optional extra, not installed: {maxtext.INSTALL_LINE}")

SMALL = [  # 8 KV heads: MaxText's attention holds a tensor axis of any size up to 8
    "base_emb_dim=256",
    "base_num_query_heads=8",
    "base_num_kv_heads=8",
    "base_mlp_dim=512",
    "base_num_decoder_layers=2",
    "head_dim=32",
    "vocab_size=1024",
    "max_target_length=128",
    "per_device_batch_size=1",
]


@pytest.fixture(scope="module")
def search():
    layout = parse_layout(maxtext.layout_data(SMALL, "v5e-8"))  # the config's own mesh: base.yml's fsdp over the 8 chips
    return stage1(layout, "v5e-8")


@needs_maxtext
def test_every_split_is_a_layout_maxtext_builds_and_none_is_refused(search):
    assert search.refused == 0, search.refused_examples
    layouts = {c.layout.name: c.layout for c in search.candidates}
    for layout in layouts.values():
        assert tuple(layout.mesh.axes) == maxtext.MESH_AXES  # MaxText's 12 axes, size-1 ones kept
        assert layout.model.name == "maxtext" and layout.model.options["compile_topology"] == "v5e-8"
    splits = {tuple(dict(zip(layout.mesh.axes, layout.mesh.shape))[a] for a in ("data", "fsdp", "tensor")) for layout in layouts.values()}
    assert splits == {s for s in itertools.product((1, 2, 4, 8), repeat=3) if s[0] * s[1] * s[2] == 8}  # all 10, the config's own once


@needs_maxtext
def test_the_winners_keys_fed_back_give_its_mesh(search):
    target = parse_target("v5e-8")
    for candidate in search.ranked():
        keys = maxtext_keys(candidate.layout, target)
        again = parse_layout(maxtext.layout_data(SMALL + keys, "v5e-8"))  # what --maxtext builds from the advice
        assert (again.mesh, again.rules) == (candidate.layout.mesh, candidate.layout.rules), candidate.layout.name


def maxtext_config(**keys) -> Layout:
    """A layout whose model is a MaxText config (no MaxText needed until it is built)."""
    return parse_layout(
        {
            "name": "maxtext",
            "mesh": {"shape": [8], "axes": ["fsdp"]},
            "rules": [["embed", "fsdp"]],
            "model": {"name": "maxtext", "options": {"model_name": "llama2-7b", **keys}},
        }
    )


def test_without_maxtext_the_advisor_says_how_to_install_it(monkeypatch):
    for name in ("maxtext", "maxtext.configs", "maxtext.configs.pyconfig"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it raises ImportError, installed or not
    with pytest.raises(
        ExplorerError, match=r"^--maxtext: .*needs MaxText, an optional extra: pip install --no-deps -r requirements-maxtext.txt"
    ):
        candidate_layouts(maxtext_config(steps="7"), parse_target("v5e-8"))


def test_a_maxtext_depth_key_is_text_and_counts():
    """MaxText's keys are its command line's text: base_num_decoder_layers="32" is a depth of 32 (stage 2 refused it)."""
    assert depth_of(maxtext_config(base_num_decoder_layers="32")) == Depth(("base_num_decoder_layers",), 32)
    assert "no deeper than the small depths" in depth_of(maxtext_config(base_num_decoder_layers="2")).why
    with pytest.raises(ExplorerError, match="is not a whole number of layers"):
        depth_of(maxtext_config(base_num_decoder_layers="two"))
