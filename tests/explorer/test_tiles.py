"""Blocks of dimensions the mesh does not divide, and which dimensions the grid draws first.

JAX refuses to place an array whose sharded dimension the mesh does not divide
(``devices_indices_map``, ``device_put`` and jit's out_shardings all raise), but XLA
accepts such a sharding inside a program and pads: every device holds a block of
``ceil(size / count)`` elements and the last blocks are short or empty. The explorer
reports that padded block as the shard shape and draws the blocks as XLA cuts them;
these tests read the per-device shape from XLA's compiled program.
"""

import math
import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from explorer.meshes import jax_mesh, mesh_info
from explorer.layout import MeshSpec
from explorer.tiles import default_dims, grid_view, shard_shape, tiles

MESH = MeshSpec(shape=(2, 4), axes=("data", "model"))
CASES = [
    ((8, 6), (None, "model")),  # 6 over 4: blocks of 2, the last one empty
    ((8, 5), (None, "model")),  # 5 over 4: blocks of 2, the last one 0 long, the third 1 long
    ((7, 12), ("data", None)),  # 7 over 2: blocks of 4 and 3
    ((10, 3), (("data", "model"), None)),  # 10 over 8: blocks of 2, the last three empty
]


def xla_block_shape(shape, spec) -> tuple[int, ...]:
    """The per-device shape XLA gives a value constrained to ``spec`` inside a compiled program."""
    mesh = jax_mesh(MESH.shape, MESH.axes)
    sharding = NamedSharding(mesh, PartitionSpec(*spec))

    def program(x):
        return jnp.cos(jax.lax.with_sharding_constraint(jnp.sin(x), sharding))

    with jax.set_mesh(mesh):
        text = jax.jit(program).lower(jax.ShapeDtypeStruct(shape, jnp.float32)).compile().as_text()
    # cos runs on each device's block, after the constraint has cut the array.
    shapes = {tuple(int(n) for n in found.split(",")) for found in re.findall(r"f32\[([\d,]+)\]\S* cosine\(", text)}
    assert len(shapes) == 1, text
    return shapes.pop()


@pytest.mark.parametrize("shape,spec", CASES)
def test_jax_refuses_to_place_these_arrays(shape, spec):
    sharding = NamedSharding(jax_mesh(MESH.shape, MESH.axes), PartitionSpec(*spec))
    with pytest.raises(ValueError, match="evenly divide"):
        sharding.devices_indices_map(shape)


@pytest.mark.parametrize("shape,spec", CASES)
def test_shard_shape_of_an_indivisible_dimension_is_xlas_padded_block(shape, spec):
    assert shard_shape(shape, spec, mesh_info(MESH)) == xla_block_shape(shape, spec)


@pytest.mark.parametrize("shape,spec", CASES)
def test_blocks_follow_xlas_padding_the_last_ones_short_or_empty(shape, spec):
    mesh = mesh_info(MESH)
    block = xla_block_shape(shape, spec)
    found = tiles(shape, spec, mesh)
    assert sorted(d for t in found for d in t.devices) == list(range(8))
    for tile in found:
        for dim, (start, stop) in enumerate(tile.index):
            position = tile.block[dim]
            assert (start, stop) == (min(position * block[dim], shape[dim]), min((position + 1) * block[dim], shape[dim]))
    # Together the blocks cover the array exactly once.
    covered = sum(math.prod(t.shape) for t in found)
    assert covered == math.prod(shape)


def test_the_grid_draws_every_block_even_an_empty_one():
    view = grid_view((8, 6), (None, "model"), mesh_info(MESH), 0, 1)
    assert view.cols == ((0, 2), (2, 4), (4, 6), (6, 6))
    assert [cell.devices for cell in view.cells[0]] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_default_dims_draw_the_most_cut_dimensions():
    mesh = mesh_info(MESH)
    assert default_dims((3, 64, 128), (None, "data", "model"), mesh) == (1, 2)
    assert default_dims((3, 64, 128), ("model", None, "data"), mesh) == (0, 2)
    assert default_dims((4, 3, 64, 128), (None, "model", None, None), mesh) == (1, 3)
    assert default_dims((64, 128), ("model", None), mesh) == (0, 1)
    assert default_dims((), (), mesh) == (None, None)
