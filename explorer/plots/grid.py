"""The Layout page's device figures: which block of an array each device holds (``sharding_grid``) and the mesh
(``mesh_figure``), with one colour per device (``device_color``) so a device can be followed from one to the other.

Both are slow to build on big meshes, so they are cached by their plain-data inputs and every call hands out a copy:
a notebook's ``update_layout`` on one changes no later one.
"""

from __future__ import annotations

import functools
import math
from typing import Iterable, Sequence

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from explorer import caches
from explorer.formats import human_bytes
from explorer.tiles import GridView, MeshInfo, Tile, devices_label


GOLDEN = 0.6180339887498949


MAX_STRIPES = 16  # more replicas than this draw as one grey block with a count


MAX_LABELLED_TILES = 256  # device ids written on blocks (and on mesh cells) up to this many


# Beyond these sizes a figure keeps a bounded number of shapes and bytes: one heatmap with
# compact numeric arrays (Plotly sends numpy arrays as typed arrays), labels on hover only.
PALETTE_DEVICES = 256  # up to this, one exact colour per device in a discrete colorscale


MAX_DETAILED_CELLS = 4096  # heatmap cells with a full hover text each (and replica stripes)


MAX_EDGE_LINES = 130  # block edges as line shapes; above, gaps between heatmap cells


COLOR_BINS = 256  # large meshes: device colours quantised to this many Turbo shades


FIGURE_CACHE = 32  # figures kept per process, keyed by their plain-data inputs; callers get copies


GREY = "#d0d4da"


DIM = "#eef0f3"


def _color_bin(device):
    """The Turbo shade (0..COLOR_BINS-1) of a device on a large mesh; works on numpy arrays too."""
    return (np.asarray(device) * GOLDEN % 1.0 * COLOR_BINS).astype(np.int32)


def device_color(device: int, device_count: int) -> str:
    """A stable colour per device: a qualitative palette for small meshes, spread Turbo for big ones."""
    if device_count <= 10:
        return plotly.colors.qualitative.Plotly[device]
    if device_count <= 24:
        return plotly.colors.qualitative.Light24[device]
    return _turbo(int(_color_bin(device)) / (COLOR_BINS - 1))


@functools.lru_cache(maxsize=COLOR_BINS + 16)  # the bins' shades and the binned scale's 16 stops
def _turbo(position: float) -> str:
    """Turbo at ``position`` (0..1), kept off its darkest and lightest ends; cached, since Plotly rebuilds its table of
    every named colorscale on each call (0.6 ms here: 0.15 s for a 256-device grid)."""
    return plotly.colors.sample_colorscale("Turbo", [0.08 + 0.84 * position])[0]


def _discrete_colorscale(colors: Sequence[str]) -> list[list]:
    """A colorscale mapping integer z = 0..len-1 to exactly colors[z]."""
    scale = []
    count = len(colors)
    for i, color in enumerate(colors):
        scale.append([i / count, color])
        scale.append([(i + 1) / count, color])
    return scale


@caches.register
@functools.lru_cache(maxsize=4)
def _binned_colorscale(other: str) -> tuple:
    """Large meshes: z = 0..COLOR_BINS-1 is a device's Turbo shade, z = COLOR_BINS is ``other`` (grey or dim)."""
    top = (COLOR_BINS - 1) / COLOR_BINS
    stops = [[top * i / 15, _turbo(i / 15)] for i in range(16)]
    return tuple(map(tuple, stops + [[(COLOR_BINS - 0.5) / COLOR_BINS, other], [1.0, other]]))


def _colouring(device_ids: np.ndarray, mesh_size: int, other: str, shown: np.ndarray) -> dict:
    """Heatmap colour settings: z per cell and a colorscale; cells not ``shown`` get ``other``.

    Up to PALETTE_DEVICES devices, z is the device id over an exact per-device scale;
    above, z is the device's shade over a 17-stop scale, so the figure's size does not
    grow with the mesh.
    """
    if mesh_size <= PALETTE_DEVICES:
        colors = [device_color(d, mesh_size) for d in range(mesh_size)] + [other]
        z = np.where(shown, device_ids, mesh_size)
        return dict(z=z.tolist(), colorscale=_discrete_colorscale(colors), zmin=-0.5, zmax=mesh_size + 0.5)
    z = np.where(shown, _color_bin(device_ids), COLOR_BINS).astype(np.uint16)
    return dict(z=z, colorscale=[list(s) for s in _binned_colorscale(other)], zmin=0, zmax=COLOR_BINS)


def _coords_text(coordinates: Sequence[int], mesh: MeshInfo) -> str:
    return ", ".join(f"{axis}={c}" for axis, c in zip(mesh.axes, coordinates))


def _tile_hover(tile: Tile, device: int | None, coordinates, mesh: MeshInfo, itemsize: int) -> str:
    ranges = " × ".join(f"{a}:{b}" for a, b in tile.index) or "scalar"
    shape = tile.shape
    lines = []
    if device is not None:
        lines.append(f"<b>device {device}</b> ({_coords_text(coordinates, mesh)})")
    lines += [
        f"held by {len(tile.devices)} device(s): {devices_label(tile.devices, 12)}",
        f"index [{ranges}]",
        f"shard shape {tuple(shape)} · {human_bytes(math.prod(shape) * itemsize)}",
    ]
    return "<br>".join(lines)


def sharding_grid(view: GridView, mesh: MeshInfo, itemsize: int, dim_labels: Sequence[str], title: str = "") -> go.Figure:
    """The array as a rectangle cut into blocks; each block shows the devices holding it.

    Replicas of a block are drawn as side-by-side stripes, one colour per device, so
    the figure reads like ``jax.debug.visualize_array_sharding`` but for any rank
    and any mesh size. Figures are cached by their inputs (plain, hashable data); each
    call returns a fresh copy of the cached one.
    """
    return go.Figure(_sharding_grid(view, mesh, itemsize, tuple(dim_labels), title))


@caches.register
@functools.lru_cache(maxsize=FIGURE_CACHE)  # never handed out as it is: sharding_grid returns a copy
def _sharding_grid(view: GridView, mesh: MeshInfo, itemsize: int, dim_labels: tuple[str, ...], title: str) -> go.Figure:
    rows, cols = len(view.rows), len(view.cols)
    replicas = len(view.cells[0][0].devices)
    stripes = replicas if replicas <= MAX_STRIPES and rows * cols * replicas <= MAX_DETAILED_CELLS else 1
    detailed = rows * cols * stripes <= MAX_DETAILED_CELLS
    holders = np.array([[tile.devices[s] for tile in row for s in range(stripes)] for row in view.cells], dtype=np.int64)
    shown = np.full(holders.shape, stripes > 1 or replicas == 1)
    xs = [c + (s + 0.5) / stripes for c in range(cols) for s in range(stripes)]
    heatmap = dict(x=xs, y=[r + 0.5 for r in range(rows)], showscale=False, **_colouring(holders, mesh.size, GREY, shown))
    if detailed:
        position = {int(d): c for d, c in zip(mesh.ids_array().reshape(-1), np.ndindex(*mesh.shape))} if replicas <= MAX_STRIPES else {}
        text = [
            [
                _tile_hover(tile, tile.devices[s] if shown[r][0] else None, position.get(tile.devices[s]), mesh, itemsize)
                for tile in row
                for s in range(stripes)
            ]
            for r, row in enumerate(view.cells)
        ]
        heatmap.update(text=text, hovertemplate="%{text}<extra></extra>")
    else:  # numbers only: the first holder and how many hold the block
        counts = np.array([[len(tile.devices) for tile in row] for row in view.cells], dtype=np.int32)
        shape = view.cells[0][0].shape
        heatmap.update(
            customdata=np.stack([holders.astype(np.int32), counts], axis=-1),
            hovertemplate=(
                "held by %{customdata[1]} device(s), first %{customdata[0]}"
                f"<br>shard shape {tuple(shape)} · {human_bytes(math.prod(shape) * itemsize)}<extra></extra>"
            ),
        )
    edges_as_gaps = rows + cols > MAX_EDGE_LINES and stripes == 1
    if edges_as_gaps and max(rows, cols) <= 100:  # beyond, a 1 px gap would wash out cells only a few px wide
        heatmap.update(xgap=1, ygap=1)
    figure = go.Figure(go.Heatmap(**heatmap))
    if rows * cols <= MAX_DETAILED_CELLS:
        figure.add_trace(_tile_centres(view))
    # Set in one go: plotly's add_shape/add_annotation re-validate the whole list on every call,
    # which made a 16 x 16 grid take seconds.
    labels = []
    if rows * cols <= MAX_LABELLED_TILES:
        font = dict(size=_label_size(rows * cols), color="black")
        labels = [
            dict(
                x=c + 0.5,
                y=r + 0.5,
                text=devices_label(view.cells[r][c].devices),
                showarrow=False,
                font=font,
                bgcolor="rgba(255,255,255,0.75)",
            )
            for r in range(rows)
            for c in range(cols)
        ]
    figure.update_layout(shapes=[] if edges_as_gaps else _block_edges(rows, cols), annotations=labels)
    _grid_axes(figure, view, dim_labels, title)
    return figure


def _label_size(tiles: int) -> int:
    return 13 if tiles <= 16 else 10 if tiles <= 64 else 8


def _tile_centres(view: GridView) -> go.Scatter:
    """Invisible markers at block centres: the points a click or box selection picks up."""
    xs, ys, ids = [], [], []
    for r, row in enumerate(view.cells):
        for c in range(len(row)):
            xs.append(c + 0.5)
            ys.append(r + 0.5)
            ids.append([r, c])
    return go.Scatter(
        x=xs,
        y=ys,
        customdata=ids,
        mode="markers",
        hoverinfo="skip",
        showlegend=False,
        marker=dict(size=18, color="rgba(0,0,0,0)"),
    )


def _block_edges(rows: int, cols: int) -> list[dict]:
    line = dict(color="black", width=1.5 if rows * cols <= 256 else 0.5)
    across = [dict(type="line", x0=0, x1=cols, y0=r, y1=r, line=line) for r in range(rows + 1)]
    down = [dict(type="line", x0=c, x1=c, y0=0, y1=rows, line=line) for c in range(cols + 1)]
    return across + down


def _ticks(ranges: Sequence[tuple[int, int]], limit: int = 16) -> dict:
    longest = max(len(f"{a}:{b}") for a, b in ranges)
    # long labels: fewer of them, kept horizontal (16 labels like "14:16" overlap on a 1024 px page)
    limit = min(limit, 4) if longest > 9 else min(limit, 8) if longest > 3 else limit
    step = max(1, math.ceil(len(ranges) / limit))
    chosen = range(0, len(ranges), step)
    return dict(tickvals=[i + 0.5 for i in chosen], ticktext=[f"{ranges[i][0]}:{ranges[i][1]}" for i in chosen])


def _grid_axes(figure: go.Figure, view: GridView, dim_labels: Sequence[str], title: str) -> None:
    row_title = dim_labels[view.row_dim] if view.row_dim is not None else ""
    col_title = dim_labels[view.col_dim] if view.col_dim is not None else ""
    figure.update_xaxes(
        range=[0, len(view.cols)], title=col_title, side="top", showgrid=False, zeroline=False, tickangle=0, **_ticks(view.cols)
    )
    figure.update_yaxes(range=[len(view.rows), 0], title=row_title, showgrid=False, zeroline=False, **_ticks(view.rows))
    height = 180 if view.row_dim is None else min(620, max(300, 34 * len(view.rows) + 140))
    figure.update_layout(
        title=dict(text=title, font=dict(size=14)),
        height=height,
        margin=dict(l=70, r=40, t=80 if title else 60, b=20),
        plot_bgcolor="white",
        clickmode="event+select",
        dragmode="select",
        modebar=dict(orientation="v"),  # on the right edge: across the top it covered the column title at 1024 px
    )


def mesh_figure(mesh: MeshInfo, highlight: Iterable[int] = ()) -> go.Figure:
    """The device mesh: rows are the first axis, columns the others flattened; ids on small meshes, on hover always.

    Devices in ``highlight`` keep their colour and the rest fade, so a selected
    block's holders stand out. Cached by (mesh, highlight); each call returns a fresh copy.
    """
    return go.Figure(_mesh_figure(mesh, frozenset(int(d) for d in highlight)))


@caches.register
@functools.lru_cache(maxsize=FIGURE_CACHE)  # never handed out as it is: mesh_figure returns a copy
def _mesh_figure(mesh: MeshInfo, highlight: frozenset[int]) -> go.Figure:
    # Axes of size 1 shard nothing and would only lengthen the title and every tick (MaxText's 12-axis mesh with
    # fsdp=8 read "0,0,3,0,0,0,0,0,0,0,0"): drawn are the axes larger than 1, the others counted in the title.
    kept = [i for i, size in enumerate(mesh.shape) if size > 1] or [0]
    axes, shape = tuple(mesh.axes[i] for i in kept), tuple(mesh.shape[i] for i in kept)
    ones = len(mesh.shape) - len(kept)
    ids = mesh.ids_array()
    rows = shape[0] if len(shape) > 1 else 1
    grid = ids.reshape(rows, -1)
    columns = grid.shape[1]
    shown = np.isin(grid, list(highlight)) if highlight else np.ones(grid.shape, bool)
    column_axes = axes[1:] if len(shape) > 1 else axes
    column_labels = [_column_label(c, shape) for c in range(columns)]
    heatmap = dict(x=list(range(columns)), y=list(range(rows)), showscale=False, **_colouring(grid, mesh.size, DIM, shown))
    if grid.size <= MAX_DETAILED_CELLS:
        hover = [
            [
                f"<b>device {int(d)}</b><br>" + ", ".join(f"{axis}={i}" for axis, i in zip(axes, c))
                for d, c in zip(row, _row_coordinates(shape, r))
            ]
            for r, row in enumerate(grid)
        ]
        heatmap.update(customdata=hover, hovertemplate="%{customdata}<extra></extra>", xgap=2, ygap=2)
    else:  # the id as a number; the coordinates are the axes' positions
        row_axis = f"{axes[0]}=%{{y}} · " if len(shape) > 1 else ""
        heatmap.update(
            customdata=grid.astype(np.int32),
            x=column_labels,
            hovertemplate=f"<b>device %{{customdata}}</b><br>{row_axis}{' × '.join(column_axes)}=%{{x}}<extra></extra>",
        )
    if grid.size <= MAX_LABELLED_TILES:
        heatmap.update(text=grid.astype(str).tolist(), texttemplate="%{text}", textfont=dict(size=12 if grid.size <= 64 else 8))
    figure = go.Figure(go.Heatmap(**heatmap))
    figure.update_xaxes(
        title=" × ".join(column_axes) + (f"  (and {ones} {'axis' if ones == 1 else 'axes'} of size 1)" if ones else ""),
        side="top",
        showgrid=False,
        zeroline=False,
        showticklabels=columns <= 32,
        **(dict(tickvals=list(range(columns)), ticktext=column_labels) if columns <= 32 else {}),
    )
    figure.update_yaxes(
        title=axes[0] if len(shape) > 1 else "",
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        showticklabels=rows <= 32 and len(shape) > 1,
        **(dict(tickvals=list(range(rows))) if rows <= 32 else {}),
    )
    figure.update_layout(
        height=min(520, max(160, 26 * rows + 120)),
        margin=dict(l=60, r=40, t=60, b=10),
        plot_bgcolor="white",
        modebar=dict(orientation="v"),
    )
    return figure


def _row_coordinates(shape: tuple[int, ...], row: int) -> list[tuple[int, ...]]:
    """Coordinates (over ``shape``, the drawn axes) of the cells of one row of the mesh figure (first axis = row, the
    rest flattened)."""
    if len(shape) == 1:
        return [(c,) for c in range(shape[0])]
    return [(row, *c) for c in np.ndindex(*shape[1:])]


def _column_label(column: int, shape: tuple[int, ...]) -> str:
    """Coordinates of a flattened column over the drawn axes ``shape``: ``3`` on a 2-D mesh, ``1,0`` on a 3-D one."""
    sizes = shape[1:] if len(shape) > 1 else shape
    coordinates = []
    for size in reversed(sizes):
        coordinates.append(column % size)
        column //= size
    return ",".join(str(c) for c in reversed(coordinates))
