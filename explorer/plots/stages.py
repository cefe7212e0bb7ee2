"""The Layout page's stage picture: one bar per pipeline stage, the decoder blocks it runs and the devices holding it,
with its stacked block weights per device; drawn from ``explorer.analysis.stage_plan.StagePlan`` (plain data)."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.plots.scales import byte_unit
from explorer.formats import human_bytes


def _devices_text(devices: tuple[int, ...]) -> str:
    if len(devices) > 2 and devices == tuple(range(devices[0], devices[-1] + 1)):
        return f"devices {devices[0]}-{devices[-1]}"
    return "devices " + ", ".join(map(str, devices[:16])) + (f" (+{len(devices) - 16})" if len(devices) > 16 else "")


def stage_bars(plan) -> go.Figure:
    """A horizontal bar per stage (stage 0 on top): its weights per device, labelled with its blocks and devices."""
    divisor, unit = byte_unit(max((row.weight_bytes_per_device for row in plan.rows), default=0))
    labels = [f"stage {row.index}" for row in plan.rows]
    figure = go.Figure()
    figure.add_bar(
        y=labels,
        x=[row.weight_bytes_per_device / divisor for row in plan.rows],
        orientation="h",
        text=[f"blocks {', '.join(map(str, row.blocks))} · {_devices_text(row.devices)}" for row in plan.rows],
        textposition="inside",
        insidetextanchor="start",
        customdata=[human_bytes(row.weight_bytes_per_device) for row in plan.rows],
        hovertemplate="%{y}<br>%{text}<br>stacked block weights: %{customdata} per device<extra></extra>",
        marker_color="#4c78a8",
    )
    figure.update_layout(
        height=80 + 36 * len(plan.rows),
        margin=dict(l=70, r=10, t=30, b=40),
        xaxis_title=f"stacked block weights, {unit} per device",
        yaxis=dict(autorange="reversed", type="category"),
        title=dict(
            text=f"bubble {plan.bubble:.0%} of {plan.iterations} iterations (formula: (stages-1)/(microbatches×repeats+stages-1))",
            font=dict(size=12),
        ),
        plot_bgcolor="white",
    )
    return figure
