"""Memory per device: the Layout page's bytes per device by kind, Compare's layouts side by side, and XLA's figures of a
compile for a target against the device's memory, each in the unit of its data."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from explorer.analysis.report import KIND_LABELS, Totals
from explorer.compile.compile_result import Memory
from explorer.formats import human_bytes, share
from explorer.plots.scales import KIND_COLORS, LEGEND_ABOVE, MODEBAR_BESIDE, byte_unit


MAX_BARS = 64  # memory bars per device; above, one bar stands for every device


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
        modebar=MODEBAR_BESIDE,
        plot_bgcolor="white",
    )
    return figure


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
        modebar=MODEBAR_BESIDE,
        plot_bgcolor="white",
        # a label that does not fit inside its bar is left to the hover: outside, small bars' labels ran together
        uniformtext=dict(minsize=9, mode="hide"),
    )
    return figure


MEMORY_LINE_REACH = 20  # a memory line is drawn on the axis when within 20 times the largest bar


def target_memory_figure(
    memory: Memory, hbm_bytes: int, per: str = "chip", usable: tuple[int, str] | None = None, judged_peak: int | None = None
) -> go.Figure:
    """XLA's per-device figures (``memory_analysis()``) as they are, one bar each, against the device's HBM.

    ``per`` names a device on the x axis (a chip, a GPU); ``usable`` is (bytes, label) of a second
    line where the verdict compares the peak with less than the whole memory (on a GPU, JAX's share; on a TPU what XLA
    lets a program use). ``judged_peak``, where it is not ``memory_analysis()``'s peak, is the peak the verdict judges
    (a TPU program's HBM total, ``compile_result.judged_peak``): drawn first, as "peak in HBM", and the other one is
    then "memory_analysis() peak".

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
    if judged_peak is not None and judged_peak != memory.peak_bytes:  # two peaks: each by its one name on the page
        parts[0] = ("memory_analysis() peak", *parts[0][1:])
        parts.insert(0, ("peak in HBM", judged_peak, "#9D2A2A"))
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
