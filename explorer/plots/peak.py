"""What fills the memory at the peak, drawn from plain data (``compile.memory_breakdown.MemoryBreakdown``): the bytes
held over the program's order with the peak marked (XProf's "Memory Allocation Size vs. Program Order"), and several
layouts' peaks side by side by kind (Compare)."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from explorer.compile.memory_breakdown import KINDS, MemoryBreakdown
from explorer.formats import human_bytes
from explorer.plots.scales import LEGEND_ABOVE, PEAK_COLORS, byte_unit, framed

LIMIT_REACH = 20  # the memory limit is drawn when within this many times the curve's top (else said in the title)


def heap_figure(breakdown: MemoryBreakdown, limit: tuple[int, str] | None = None, per: str = "device") -> go.Figure:
    """Bytes held at each point of the program (XLA's schedule, not time), the peak marked, the backward pass shaded,
    XLA's total (the peak plus the heap's gaps) and ``limit`` (bytes, label: what the verdict judges against) as lines."""
    positions = [p for p, _ in breakdown.curve]
    held = [b for _, b in breakdown.curve]
    top = max(held + [breakdown.allocated_bytes])
    lines = [(breakdown.allocated_bytes, f"XLA's total {human_bytes(breakdown.allocated_bytes)}", "#9D2A2A", "dot")]
    if limit is not None:
        lines.append((limit[0], limit[1], "#222", "dash"))
    drawn = [line for line in lines if line[0] <= LIMIT_REACH * top]
    divisor, unit = byte_unit(max([top] + [line[0] for line in drawn]))
    figure = go.Figure()
    if breakdown.backward is not None:
        start, end = breakdown.backward
        figure.add_vrect(
            x0=start,
            x1=end,
            fillcolor="#B279A2",
            opacity=0.08,
            line_width=0,
            annotation_text="backward pass",
            annotation_position="bottom left",  # at its foot: the peak's label is at the top
        )
    figure.add_scatter(
        x=positions,
        y=[b / divisor for b in held],
        mode="lines",
        line=dict(color="#4C78A8", width=1.5),
        fill="tozeroy",
        fillcolor="rgba(76,120,168,0.15)",
        name="bytes held",
        hovertemplate="program point %{x}<br>%{customdata}<extra></extra>",
        customdata=[human_bytes(b) for b in held],
    )
    figure.add_scatter(
        x=[breakdown.peak_position],
        y=[breakdown.peak_bytes / divisor],
        mode="markers+text",
        marker=dict(color="#E45756", size=10, symbol="diamond"),
        text=[f"peak {human_bytes(breakdown.peak_bytes)}"],
        textposition="top center",
        name="peak",
        hovertemplate=f"peak at program point {breakdown.peak_position:,} ({breakdown.peak_instruction}): "
        f"{human_bytes(breakdown.peak_bytes)}<extra></extra>",
    )
    for value, label, color, dash in drawn:
        figure.add_hline(
            y=value / divisor,
            line_color=color,
            line_dash=dash,
            annotation_text=label,
            annotation_position="bottom right",
            annotation_font_color=color,
        )
    off = [line for line in lines if line not in drawn]
    title = "Off the scale: " + "; ".join(label for _, label, _, _ in off) if off else None
    figure.update_yaxes(range=[0, 1.15 * max([top] + [line[0] for line in drawn]) / divisor])  # room for the peak's label
    return framed(
        figure,
        height=300,
        margin=(60, 20, 40 if title else 30, 40),
        x_title=f"program point (XLA's schedule, {breakdown.positions:,} points; not time)",
        y_title=f"{unit} per {per}",
        showlegend=False,
        title=dict(text=title, font=dict(size=12)) if title else None,
    )


def kind_bars(labels: Sequence[str], breakdowns: Sequence[MemoryBreakdown | None], per: str = "device") -> go.Figure:
    """Each layout's peak as one bar stacked by kind (the gaps in XLA's heap on top), side by side: what each peak is
    made of (Compare; a layout without a breakdown is an empty bar)."""
    kinds = [k for k in KINDS if any(b is not None and b.kind_bytes(k) for b in breakdowns)]
    totals = [b.allocated_bytes if b is not None else 0 for b in breakdowns]
    divisor, unit = byte_unit(max(totals + [1]))
    figure = go.Figure()
    for kind in kinds + ["fragmentation"]:
        values = [(b.fragmentation_bytes if kind == "fragmentation" else b.kind_bytes(kind)) if b is not None else 0 for b in breakdowns]
        if not any(values):
            continue
        name = "unused between buffers" if kind == "fragmentation" else kind
        figure.add_bar(
            x=list(labels),
            y=[v / divisor for v in values],
            name=name,
            marker_color=PEAK_COLORS[kind],
            customdata=[human_bytes(v) for v in values],
            hovertemplate="%{x}<br>" + name + ": %{customdata}<extra></extra>",
        )
    return framed(
        figure,
        height=320,
        margin=(60, 10, 30, 40),
        x_title="",
        y_title=f"{unit} per {per} at the peak",
        barmode="stack",
        legend=LEGEND_ABOVE,
    )
