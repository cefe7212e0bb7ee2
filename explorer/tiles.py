"""Which block of an array each device holds, computed from plain data.

Works for any number of dimensions and for planned meshes with no devices behind
them (device ids 0..N-1 in mesh order). Tests check every result against
``NamedSharding.devices_indices_map`` on real meshes.

The rule JAX follows: a dimension sharded over mesh axes ``(a, b)`` is cut into
``size(a) * size(b)`` blocks, and the device at mesh coordinates ``(i_a, i_b, ...)``
holds block ``i_a * size(b) + i_b`` (the first axis is the major one).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import numpy as np

from explorer.errors import ExplorerError
from explorer.specs import SpecEntry, spec_axes


@dataclasses.dataclass(frozen=True)
class MeshInfo:
    """A mesh as plain data: axis names and sizes, and the device id at every coordinate."""

    shape: tuple[int, ...]
    axes: tuple[str, ...]
    device_ids: tuple  # nested tuples in mesh order, shape == self.shape
    abstract: bool

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis_size(self, axis: str) -> int:
        return self.shape[self.axes.index(axis)]

    def ids_array(self) -> np.ndarray:
        return np.asarray(self.device_ids, dtype=np.int64).reshape(self.shape)

    def coordinates(self) -> dict[int, tuple[int, ...]]:
        """Device id -> its coordinates in the mesh."""
        ids = self.ids_array()
        return {int(ids[c]): tuple(int(i) for i in c) for c in np.ndindex(*self.shape)}


@dataclasses.dataclass(frozen=True)
class Tile:
    """One block of an array: its index range per dimension and the devices that hold it."""

    index: tuple[tuple[int, int], ...]
    devices: tuple[int, ...]
    block: tuple[int, ...] = ()  # the block's position along each dimension

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in self.index)


def devices_label(devices: Sequence[int], limit: int = 4) -> str:
    """``0,4`` or ``0,1,2…15 (16)`` for long lists: how figures and text grids name a block's holders."""
    if len(devices) <= limit:
        return ",".join(str(d) for d in devices)
    return ",".join(str(d) for d in devices[: limit - 1]) + f"…{devices[-1]} ({len(devices)})"


def shard_counts(spec: Sequence[SpecEntry], mesh: MeshInfo) -> tuple[int, ...]:
    """How many blocks each dimension is cut into."""
    return tuple(math.prod(mesh.axis_size(a) for a in spec_axes(entry)) for entry in spec)


def shard_shape(shape: Sequence[int], spec: Sequence[SpecEntry], mesh: MeshInfo) -> tuple[int, ...]:
    """The per-device block shape; a dimension that does not divide evenly is rounded up (XLA pads)."""
    return tuple(-(-size // count) for size, count in zip(shape, shard_counts(spec, mesh)))


def replication(spec: Sequence[SpecEntry], mesh: MeshInfo) -> int:
    """How many devices hold each block: the product of the mesh axes the spec leaves unused."""
    return mesh.size // math.prod(shard_counts(spec, mesh))


def _block_bounds(size: int, count: int, block: int) -> tuple[int, int]:
    step = -(-size // count)
    return (min(block * step, size), min((block + 1) * step, size))


def tiles(shape: Sequence[int], spec: Sequence[SpecEntry], mesh: MeshInfo) -> tuple[Tile, ...]:
    """Every distinct block of the array with the devices holding it, in block order."""
    spec = tuple(spec) + (None,) * (len(shape) - len(spec))
    ids = mesh.ids_array()
    counts = shard_counts(spec, mesh)
    block_of_device = np.zeros((len(shape),) + mesh.shape, dtype=np.int64)
    for dim, entry in enumerate(spec):
        for axis in spec_axes(entry):
            position = mesh.axes.index(axis)
            coordinate = np.arange(mesh.shape[position]).reshape([-1 if p == position else 1 for p in range(len(mesh.shape))])
            block_of_device[dim] = block_of_device[dim] * mesh.shape[position] + coordinate
    flat_blocks = np.ravel_multi_index(block_of_device.reshape(len(shape), -1), counts) if shape else np.zeros(ids.size, np.int64)
    # Vectorised (a 256 x 256 mesh has 65,536 blocks): group devices by block, in block order.
    order = np.lexsort((ids.reshape(-1), flat_blocks))
    blocks, starts = np.unique(flat_blocks[order], return_index=True)
    in_block_order = ids.reshape(-1)[order].tolist()
    edges = starts.tolist() + [len(in_block_order)]
    holders = [tuple(in_block_order[a:b]) for a, b in zip(edges, edges[1:])]
    if shape:
        coords = np.stack(np.unravel_index(blocks, counts), axis=1)
        steps = np.array([-(-size // count) for size, count in zip(shape, counts)])
        starts_at = np.minimum(coords * steps, shape)
        stops_at = np.minimum((coords + 1) * steps, shape)
        bounds = np.stack([starts_at, stops_at], axis=-1).tolist()
        coords = coords.tolist()
    else:
        bounds, coords = [[]] * len(blocks), [[]] * len(blocks)
    return tuple(Tile(tuple(map(tuple, index)), devices, tuple(block)) for index, devices, block in zip(bounds, holders, coords))


@dataclasses.dataclass(frozen=True)
class GridView:
    """A 2-D cut through an array's tiles, ready to draw.

    ``rows``/``cols`` are the index ranges of the blocks along the drawn dimensions
    (one range when a dimension is not drawn); ``cells[r][c]`` is the tile there.
    ``fixed`` says which block of every other dimension the cut goes through.
    """

    shape: tuple[int, ...]
    row_dim: int | None
    col_dim: int | None
    rows: tuple[tuple[int, int], ...]
    cols: tuple[tuple[int, int], ...]
    cells: tuple[tuple[Tile, ...], ...]
    fixed: tuple[tuple[int, int], ...]


def default_dims(shape: Sequence[int], spec: Sequence[SpecEntry], mesh: MeshInfo) -> tuple[int | None, int | None]:
    """The (row, column) dimensions to draw first: the two cut into the most blocks, in array order.

    Ties go to the later dimensions, so an unsharded array shows its last two. A 1-D
    array has no row dimension and a scalar neither.

    >>> mesh = MeshInfo((2, 4), ("data", "model"), ((0, 1, 2, 3), (4, 5, 6, 7)), abstract=False)
    >>> default_dims((3, 64, 128), ("model", None, None), mesh)
    (0, 2)
    >>> default_dims((3, 64, 128), (None, None, None), mesh), default_dims((5,), (None,), mesh)
    ((1, 2), (None, 0))
    """
    ndim = len(shape)
    if ndim <= 2:
        return (0 if ndim == 2 else None), (ndim - 1 if ndim >= 1 else None)
    counts = shard_counts(tuple(spec) + (None,) * (ndim - len(spec)), mesh)
    first, second = sorted(sorted(range(ndim), key=lambda d: (counts[d], d))[-2:])
    return first, second


def block_ranges(size: int, count: int) -> tuple[tuple[int, int], ...]:
    return tuple(_block_bounds(size, count, b) for b in range(count))


def grid_view(
    shape: Sequence[int],
    spec: Sequence[SpecEntry],
    mesh: MeshInfo,
    row_dim: int | None,
    col_dim: int | None,
    fixed: dict[int, int] | None = None,
) -> GridView:
    """The tiles of ``shape`` laid out over two of its dimensions (cached by meaning; see ``_grid_view``)."""
    hashable_spec = tuple(tuple(e) if isinstance(e, list) else e for e in spec)
    return _grid_view(tuple(shape), hashable_spec, mesh, row_dim, col_dim, tuple(sorted((fixed or {}).items())))


@functools.lru_cache(maxsize=32)
def _grid_view(
    shape: Sequence[int],
    spec: Sequence[SpecEntry],
    mesh: MeshInfo,
    row_dim: int | None,
    col_dim: int | None,
    fixed_blocks: tuple[tuple[int, int], ...],
) -> GridView:
    """The tiles of ``shape`` laid out over two of its dimensions.

    Dimensions other than ``row_dim``/``col_dim`` are cut at block ``fixed[dim]``
    (default 0). A 1-D array has ``row_dim=None``; a scalar has both None.
    """
    shape = tuple(shape)
    spec = tuple(spec) + (None,) * (len(shape) - len(spec))
    counts = shard_counts(spec, mesh)
    fixed = {d: 0 for d in range(len(shape)) if d not in (row_dim, col_dim)} | dict(fixed_blocks)
    for dim, block in fixed.items():
        if not 0 <= block < counts[dim]:
            raise ExplorerError(f"block of dim {dim}", block, f"does not exist (dim {dim} has {counts[dim]} blocks)")
    rows = block_ranges(shape[row_dim], counts[row_dim]) if row_dim is not None else ((0, 1),)
    cols = block_ranges(shape[col_dim], counts[col_dim]) if col_dim is not None else ((0, 1),)
    grid: dict[tuple[int, int], Tile] = {}
    for tile in tiles(shape, spec, mesh):
        if any(tile.block[d] != b for d, b in fixed.items()):
            continue
        r = tile.block[row_dim] if row_dim is not None else 0
        c = tile.block[col_dim] if col_dim is not None else 0
        grid[(r, c)] = tile
    cells = tuple(tuple(grid[(r, c)] for c in range(len(cols))) for r in range(len(rows)))
    return GridView(shape, row_dim, col_dim, rows, cols, cells, tuple(sorted(fixed.items())))
