"""Plotly figures built from plain report data (GridView, MeshInfo, Totals), never from live JAX objects.

Every figure colours device ``d`` the same way (``device_color``), so a device can be
followed from the array grid to the mesh to the memory bars.

Every public function returns a fresh figure the caller may change: the few that cache
(the device grid and the mesh, slow to build on big meshes) keep their figure private and
hand out a copy, so a notebook's ``update_layout`` on one changes no later one.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from explorer import caches
from explorer.analysis import KIND_LABELS, Totals
from explorer.compile_result import Memory
from explorer.roofline import Estimate
from explorer.text import human_bytes, share
from explorer.tiles import GridView, MeshInfo, Tile, devices_label

GOLDEN = 0.6180339887498949
MAX_STRIPES = 16  # more replicas than this draw as one grey block with a count
MAX_LABELLED_TILES = 256  # device ids written on blocks (and on mesh cells) up to this many
# Beyond these sizes a figure keeps a bounded number of shapes and bytes: one heatmap with
# compact numeric arrays (Plotly sends numpy arrays as typed arrays), labels on hover only.
PALETTE_DEVICES = 256  # up to this, one exact colour per device in a discrete colorscale
MAX_DETAILED_CELLS = 4096  # heatmap cells with a full hover text each (and replica stripes)
MAX_EDGE_LINES = 130  # block edges as line shapes; above, gaps between heatmap cells
MAX_BARS = 64  # memory bars per device; above, one bar stands for every device
COLOR_BINS = 256  # large meshes: device colours quantised to this many Turbo shades
FIGURE_CACHE = 32  # figures kept per process, keyed by their plain-data inputs; callers get copies
GREY = "#d0d4da"
DIM = "#eef0f3"
# Anchored by its bottom just above the plot area: when it wraps on a narrow page, plotly grows
# the top margin instead of laying the second line over the bars.
LEGEND_ABOVE = dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom")
KIND_COLORS = {"param": "#4C78A8", "opt_state": "#F58518", "input": "#54A24B", "activation": "#B279A2"}


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


def _turbo(position: float) -> str:
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
    ids = mesh.ids_array()
    rows = mesh.shape[0] if len(mesh.shape) > 1 else 1
    grid = ids.reshape(rows, -1)
    columns = grid.shape[1]
    shown = np.isin(grid, list(highlight)) if highlight else np.ones(grid.shape, bool)
    column_axes = mesh.axes[1:] if len(mesh.shape) > 1 else mesh.axes
    column_labels = [_column_label(c, mesh) for c in range(columns)]
    heatmap = dict(x=list(range(columns)), y=list(range(rows)), showscale=False, **_colouring(grid, mesh.size, DIM, shown))
    if grid.size <= MAX_DETAILED_CELLS:
        hover = [
            [f"<b>device {int(d)}</b><br>{_coords_text(c, mesh)}" for d, c in zip(row, _row_coordinates(mesh, r))]
            for r, row in enumerate(grid)
        ]
        heatmap.update(customdata=hover, hovertemplate="%{customdata}<extra></extra>", xgap=2, ygap=2)
    else:  # the id as a number; the coordinates are the axes' positions
        row_axis = f"{mesh.axes[0]}=%{{y}} · " if len(mesh.shape) > 1 else ""
        heatmap.update(
            customdata=grid.astype(np.int32),
            x=column_labels,
            hovertemplate=f"<b>device %{{customdata}}</b><br>{row_axis}{' × '.join(column_axes)}=%{{x}}<extra></extra>",
        )
    if grid.size <= MAX_LABELLED_TILES:
        heatmap.update(text=grid.astype(str).tolist(), texttemplate="%{text}", textfont=dict(size=12 if grid.size <= 64 else 8))
    figure = go.Figure(go.Heatmap(**heatmap))
    figure.update_xaxes(
        title=" × ".join(column_axes),
        side="top",
        showgrid=False,
        zeroline=False,
        showticklabels=columns <= 32,
        **(dict(tickvals=list(range(columns)), ticktext=column_labels) if columns <= 32 else {}),
    )
    figure.update_yaxes(
        title=mesh.axes[0] if len(mesh.shape) > 1 else "",
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        showticklabels=rows <= 32 and len(mesh.shape) > 1,
        **(dict(tickvals=list(range(rows))) if rows <= 32 else {}),
    )
    figure.update_layout(
        height=min(520, max(160, 26 * rows + 120)),
        margin=dict(l=60, r=40, t=60, b=10),
        plot_bgcolor="white",
        modebar=dict(orientation="v"),
    )
    return figure


def _row_coordinates(mesh: MeshInfo, row: int) -> list[tuple[int, ...]]:
    """Mesh coordinates of the cells of one row of the mesh figure (first axis = row, the rest flattened)."""
    if len(mesh.shape) == 1:
        return [(c,) for c in range(mesh.shape[0])]
    return [(row, *c) for c in np.ndindex(*mesh.shape[1:])]


def _column_label(column: int, mesh: MeshInfo) -> str:
    """Mesh coordinates of a flattened column: ``3`` on a 2-D mesh, ``1,0`` on a 3-D one."""
    sizes = mesh.shape[1:] if len(mesh.shape) > 1 else mesh.shape
    coordinates = []
    for size in reversed(sizes):
        coordinates.append(column % size)
        column //= size
    return ",".join(str(c) for c in reversed(coordinates))


def byte_unit(largest: float) -> tuple[float, str]:
    """(divisor, name) of the binary unit that writes ``largest`` bytes with 1 to 4 digits before the point.

    >>> byte_unit(150_000 * 2**20)
    (1073741824, 'GiB')
    >>> byte_unit(300 * 2**20)[1]
    'MiB'
    """
    for power, name in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if largest >= 2 ** (10 * power) * 0.95 or (power == 1 and largest >= 1024):
            return 2 ** (10 * power), name
    return 1, "B"


def memory_bars(device_ids: Sequence[int], totals: Totals) -> go.Figure:
    """Bytes each device holds: the state stacked by kind, declared activations beside it (not a sum).

    Every device holds the same under NamedSharding, so beyond MAX_BARS devices one bar stands for all.
    """
    figure = go.Figure()
    x = [str(d) for d in device_ids] if len(device_ids) <= MAX_BARS else [f"each of {len(device_ids):,} devices"]
    by_kind = totals.by_kind()
    divisor, unit = byte_unit(max(totals.state_bytes, by_kind["activation"]))
    for kind, value in by_kind.items():
        figure.add_bar(
            x=x,
            y=[value / divisor] * len(x),
            name=KIND_LABELS[kind],
            marker_color=KIND_COLORS[kind],
            offsetgroup="activations" if kind == "activation" else "state",
            hovertemplate=f"device %{{x}}<br>{KIND_LABELS[kind]}: {human_bytes(value)}<extra></extra>",
        )
    figure.update_layout(
        barmode="stack",
        height=260,
        margin=dict(l=50, r=10, t=30, b=40),
        yaxis_title=f"{unit} per device",
        xaxis_title="device",
        xaxis_type="category",
        legend=LEGEND_ABOVE,
        plot_bgcolor="white",
    )
    return figure


def step_times_figure(samples: Sequence[float], planned_steps: int | None = None) -> go.Figure:
    """Step times in milliseconds as they arrive, with the running median."""
    ms = [s * 1e3 for s in samples]
    steps = list(range(1, len(ms) + 1))
    figure = go.Figure(go.Scatter(x=steps, y=ms, mode="lines+markers", name="step", hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    if ms:
        median = statistics.median(ms)
        figure.add_hline(y=median, line_dash="dot", line_color="#888", annotation_text=f"median {median:.2f} ms")
    figure.update_layout(
        height=280,
        margin=dict(l=50, r=10, t=20, b=40),
        xaxis_title="timed step",
        yaxis_title="ms",
        plot_bgcolor="white",
        showlegend=False,
    )
    count = max(planned_steps or 0, len(ms))
    figure.update_xaxes(range=[0.5, count + 0.5], gridcolor="#eee", **whole_number_ticks(count))
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure


def whole_number_ticks(count: int) -> dict:
    """Axis settings for 1..count: ticks on whole numbers (1, 2, 5, 10, 20, … apart), never on 0.5 or 1.5."""
    step = next(s for s in (m * 10**e for e in range(7) for m in (1, 2, 5)) if s * 10 >= count)
    return {"tickmode": "linear", "tick0": 0, "dtick": step}


def compare_memory(labels: Sequence[str], totals: Sequence[Totals]) -> go.Figure:
    """Per-device bytes of several layouts side by side, grouped by kind (same colours as memory_bars)."""
    figure = go.Figure()
    divisor, unit = byte_unit(max((v for t in totals for v in t.by_kind().values()), default=0))
    for kind, name in KIND_LABELS.items():
        values = [t.by_kind()[kind] for t in totals]
        figure.add_bar(
            x=list(labels),
            y=[v / divisor for v in values],
            name=name,
            marker_color=KIND_COLORS[kind],
            text=[human_bytes(v) for v in values],
            textposition="inside",
            hovertemplate="%{x}<br>" + name + ": %{text}<extra></extra>",
        )
    figure.update_layout(
        barmode="group",
        height=300,
        yaxis_title=f"{unit} per device",
        margin=dict(l=50, r=10, t=30, b=40),
        legend=LEGEND_ABOVE,
        plot_bgcolor="white",
        # a label that does not fit inside its bar is left to the hover: outside, small bars' labels ran together
        uniformtext=dict(minsize=9, mode="hide"),
    )
    return figure


def race_figure(labels: Sequence[str], round_medians: Sequence[Sequence[float]]) -> go.Figure:
    """Each layout's median step time per race round."""
    figure = go.Figure()
    for label, medians in zip(labels, round_medians):
        figure.add_scatter(x=list(range(1, len(medians) + 1)), y=[m * 1e3 for m in medians], mode="lines+markers", name=label)
    figure.update_layout(
        height=280,
        xaxis_title="round",
        yaxis_title="median step (ms)",
        margin=dict(l=50, r=10, t=20, b=40),
        plot_bgcolor="white",
    )
    figure.update_xaxes(**whole_number_ticks(max((len(m) for m in round_medians), default=1)))
    return figure


OP_COLORS = {"sharded": "#4C78A8", "single": "#F58518"}


def op_times_figure(samples: dict[str, Sequence[float]], labels: dict[str, str], planned_steps: int | None = None) -> go.Figure:
    """Per-call times of the sharded op and of the same op on one device, in ms, each with its median.

    A median is a dotted line in its series' colour and is named in the legend: two medians close
    together would print their labels on top of each other.
    """
    figure = go.Figure()
    count = planned_steps or 0
    for which, series in samples.items():
        ms = [s * 1e3 for s in series]
        count = max(count, len(ms))
        median = statistics.median(ms) if ms else None
        name = labels[which] + (f" · median {median:.2f} ms (dotted)" if ms else "")
        figure.add_scatter(
            x=list(range(1, len(ms) + 1)),
            y=ms,
            mode="lines+markers",
            name=name,
            line_color=OP_COLORS[which],
            hovertemplate=labels[which] + ", call %{x}: %{y:.2f} ms<extra></extra>",
        )
        if ms:
            figure.add_hline(y=median, line_dash="dot", line_color=OP_COLORS[which])
    figure.update_layout(
        height=300,
        margin=dict(l=50, r=10, t=30, b=40),
        xaxis_title="timed call",
        yaxis_title="ms",
        plot_bgcolor="white",
        legend=dict(orientation="h", y=1.12),
    )
    figure.update_xaxes(range=[0.5, max(count, 1) + 0.5], gridcolor="#eee", **whole_number_ticks(max(count, 1)))
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure


ROOFLINE_COLORS = {"compute": "#4C78A8", "memory": "#54A24B", "collective": "#E45756"}


def roofline_figure(estimate: Estimate, title: str = "") -> go.Figure:
    """The roofline's three terms side by side (ms per step, lower bounds), the one that bounds the step outlined."""
    terms = [("compute", estimate.compute_s), ("memory", estimate.memory_s), ("collective", estimate.collective_s)]
    bound = estimate.bound
    figure = go.Figure(
        go.Bar(
            x=[f"{name}{' (bound)' if name == bound else ''}" for name, _ in terms],
            y=[seconds * 1e3 for _, seconds in terms],
            marker_color=[ROOFLINE_COLORS[name] for name, _ in terms],
            marker_line=dict(color=["#222" if name == bound else "rgba(0,0,0,0)" for name, _ in terms], width=3),
            text=[_ms(seconds) for _, seconds in terms],
            textposition="outside",
            hovertemplate="%{x}: %{text} per step (lower bound)<extra></extra>",
        )
    )
    figure.update_layout(
        title=title or f"Step ≥ {_ms(estimate.step_s)}<br>{bound}-bound",
        height=300,
        margin=dict(l=50, r=40, t=50, b=40),
        yaxis_title="ms per step (lower bound)",
        plot_bgcolor="white",
        showlegend=False,
        modebar=dict(orientation="v"),  # not over the title
    )
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure


def compare_roofline_figure(labels: list[str], estimates: list[Estimate]) -> go.Figure:
    """Several layouts' rooflines on one axis: the three terms, one bar per layout in each, the bound one outlined.

    One chart with a shared scale (side by side, one chart per layout, each had its own scale and
    its labels were cut at 1024 px); the legend names each layout with its step's bound.
    """
    figure = go.Figure()
    terms = ("compute", "memory", "collective")
    top = max([e.step_s for e in estimates] + [0.0])
    for index, (label, estimate) in enumerate(zip(labels, estimates)):
        seconds = [getattr(estimate, f"{term}_s") for term in terms]
        figure.add_bar(
            name=f"{label}: ≥ {_ms(estimate.step_s)}, {estimate.bound}-bound",
            x=list(terms),
            y=[s * 1e3 for s in seconds],
            marker_color=plotly.colors.qualitative.Safe[index % len(plotly.colors.qualitative.Safe)],
            marker_line=dict(color=["#222" if term == estimate.bound else "rgba(0,0,0,0)" for term in terms], width=3),
            # Bars too short to see are not labelled (neighbours' labels ran together there); the hover has every value.
            text=[_ms(s) if s >= 0.03 * top else "" for s in seconds],
            customdata=[_ms(s) for s in seconds],
            textposition="outside",
            cliponaxis=False,
            hovertemplate=f"{label}<br>%{{x}}: %{{customdata}} per step (lower bound)<extra></extra>",
        )
    figure.update_layout(
        barmode="group",
        height=320 + 22 * len(labels),
        margin=dict(l=50, r=20, t=30, b=40),
        yaxis_title="ms per step (lower bound)",
        plot_bgcolor="white",
        modebar=dict(orientation="v"),
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.15, yanchor="top"),
    )
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


MEMORY_LINE_REACH = 20  # a memory line is drawn on the axis when within 20 times the largest bar


def target_memory_figure(memory: Memory, hbm_bytes: int, per: str = "chip", usable: tuple[int, str] | None = None) -> go.Figure:
    """XLA's per-device figures (``memory_analysis()``) as they are, one bar each, against the device's HBM.

    ``per`` names a device on the x axis (a chip, a GPU); ``usable`` is (bytes, label) of a second
    line where the verdict compares the peak with less than the whole memory (on a GPU, JAX's share).

    Not stacked: XLA's peak is the most bytes live at one moment, while arguments, outputs and
    temporaries are allocation sizes that are not all live at that moment, so a stack of them
    would run past the peak it is meant to explain.
    """
    parts = [
        (name, getattr(memory, key), color)
        for name, key, color in (
            ("peak", "peak_bytes", "#E45756"),
            ("arguments", "argument_bytes", "#4C78A8"),
            ("outputs", "output_bytes", "#F58518"),
            ("aliased", "alias_bytes", "#72B7B2"),
            ("temporaries", "temp_bytes", "#B279A2"),
        )
        if getattr(memory, key) is not None  # None: a figure XLA did not give (a program it refused as too large)
    ]
    largest = max([value for _, value, _ in parts] or [1])
    # In the unit of the data: a memory line far beyond the bars (a GPU's 79.1 GiB beside MiB-sized figures) would
    # squeeze them to nothing, so such a line is said in the title instead of drawn.
    lines = [(hbm_bytes, f"HBM {human_bytes(hbm_bytes)}", "#222", "dash")]
    if usable is not None:
        lines.append((usable[0], usable[1], "#E45756", "dot"))
    drawn = [line for line in lines if line[0] <= MEMORY_LINE_REACH * largest]
    off_scale = [line for line in lines if line not in drawn]
    divisor, unit = byte_unit(max([largest] + [line[0] for line in drawn]))
    figure = go.Figure()
    figure.add_bar(
        y=[name for name, _, _ in parts],
        x=[value / divisor for _, value, _ in parts],
        orientation="h",
        marker_color=[color for _, _, color in parts],
        text=[human_bytes(value) for _, value, _ in parts],
        textposition="outside",
        cliponaxis=False,
        hovertemplate="%{y}: %{text}<extra></extra>",
        showlegend=False,
    )
    # With a second line the two labels stand one above the other: side by side they ran together at 1024 px.
    lift = 16 if len(drawn) > 1 else 0
    for index, (value, label, color, dash) in enumerate(drawn):
        figure.add_vline(
            x=value / divisor,
            line_color=color,
            line_dash=dash,
            annotation_text=label,
            annotation_position="top left",
            annotation_yshift=lift if index == 0 and len(drawn) > 1 else 0,
            annotation_font_color=color,
        )
    if off_scale:
        figure.update_layout(
            title=dict(
                text="Off the scale: "
                + "; ".join(label for _, label, _, _ in off_scale)
                + f": the largest bar is {share(largest / off_scale[0][0])} of it",
                font=dict(size=12),
            )
        )
        lift = max(lift, 16)
    figure.update_layout(
        height=260 + lift,
        margin=dict(l=10, r=70, t=30 + lift, b=40),
        xaxis_title=f"{unit} per {per}",
        plot_bgcolor="white",
        modebar=dict(orientation="v"),
    )
    figure.update_yaxes(autorange="reversed", automargin=True)
    return figure


class AdvisorPoint(NamedTuple):
    """One Advisor candidate as its chart draws it."""

    name: str
    kind: str  # a key of ADVISOR_KINDS
    step_s: float  # the step's lower bound
    bytes_per_device: int  # XLA's peak where verified ("xla", "extrapolated"), else the exact state ("estimate")


ADVISOR_KINDS = {  # kind: (legend name, marker symbol), drawn in this order
    "xla": ("XLA-verified: peak and roofline", "circle"),
    "extrapolated": ("XLA, extrapolated in depth: peak and roofline", "diamond-open"),
    "estimate": ("estimate: state and stage 1 step", "circle-open"),
}


def advisor_figure(points: Iterable[AdvisorPoint], hbm_bytes: int, limit_label: str | None = None) -> go.Figure:
    """Bytes per device against the step's lower bound, both on log axes, one trace per kind, with the HBM line
    (``limit_label`` names it where it is not a device's HBM: a GPU's share JAX may use).

    Points keep their order within a kind (the Advisor passes them ranked).
    """
    points = list(points)
    unknown = {p.kind for p in points} - ADVISOR_KINDS.keys()
    if unknown:
        raise ValueError(f"advisor point kinds {sorted(unknown)} are none of {list(ADVISOR_KINDS)}")
    figure = go.Figure()
    for kind, (name, symbol) in ADVISOR_KINDS.items():
        chosen = [p for p in points if p.kind == kind]
        if not chosen:
            continue
        figure.add_scatter(
            x=[p.step_s * 1e3 for p in chosen],
            y=[p.bytes_per_device / 2**30 for p in chosen],
            mode="markers",
            name=name,
            marker=dict(symbol=symbol, size=11),
            text=[p.name for p in chosen],
            hovertemplate="%{text}<br>step ≥ %{x:.3g} ms<br>%{y:.2f} GiB<extra></extra>",
        )
    hbm_gib = hbm_bytes / 2**30
    figure.add_hline(y=hbm_gib, line_dash="dash", line_color="#222")
    # Plotly places an annotation on a log axis at log10 coordinates (add_hline's own annotation lands at 10**y
    # and stretched the axis to 1e17): write it, and the axis range, in log10 units.
    shown = [hbm_gib] + [y for trace in figure.data for y in trace.y if y and y > 0]
    low, high = math.log10(min(shown)) - 0.5, math.log10(max(shown)) + 0.5
    figure.add_annotation(
        x=1,
        xref="paper",
        y=math.log10(hbm_gib),
        yref="y",
        text=limit_label or f"HBM {human_bytes(hbm_bytes)} per device",
        showarrow=False,
        xanchor="right",
        yanchor="bottom",
    )
    figure.update_layout(
        height=360,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_title="step lower bound (ms, log)",
        yaxis_title="GiB per device (log)",
        plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.25),
    )
    figure.update_xaxes(type="log", gridcolor="#eee", dtick=1)  # a tick per decade: both axes span orders of magnitude
    figure.update_yaxes(type="log", gridcolor="#eee", dtick=1, range=[low, high])
    return figure
