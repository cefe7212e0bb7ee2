"""Compiling the train step for TPU slices of every generation (libtpu's topologies, no TPU needed)."""

from __future__ import annotations

import pytest

from explorer.compile.target_compile import compile_target
from tests.explorer import mlp_layout

pytestmark = pytest.mark.usefixtures("own_compile_cache")


@pytest.mark.parametrize("target, mesh", [("v5e:1x1", (1,)), ("v6e:1x1", (1,)), ("v5p:1x1x1", (1,))])
def test_a_single_chip_slice_compiles(seed_dict, target, mesh):
    result, _ = compile_target(mlp_layout(seed_dict, mesh=mesh, axes=("data",), rules=[["batch", "data"]]), target)
    assert result.target.chips == 1 and result.fits is True and result.collectives == ()
    assert result.memory.peak_bytes > 0
