"""Times as they arrive: the Timing page's step times, the Compare race's rounds, the Arrays page's op calls."""

from __future__ import annotations

import statistics
from typing import Sequence

import plotly.graph_objects as go

from explorer.formats import human_seconds, seconds_unit
from explorer.plots.scales import framed, whole_number_ticks


def step_times_figure(samples: Sequence[float], planned_steps: int | None = None) -> go.Figure:
    """Step times as they arrive, with the running median, in the unit of the slowest (ms; s for a model whose steps
    take seconds, not "31,921 ms")."""
    unit, scale = seconds_unit(max(samples, default=1e-3))
    values = [s / scale for s in samples]
    steps = list(range(1, len(values) + 1))
    hover = f"step %{{x}}: %{{y:.2f}} {unit}<extra></extra>"
    figure = go.Figure(go.Scatter(x=steps, y=values, mode="lines+markers", name="step", hovertemplate=hover))
    if samples:
        figure.add_hline(
            y=statistics.median(values),
            line_dash="dot",
            line_color="#888",
            annotation_text=f"median {human_seconds(statistics.median(samples))}",
        )
    framed(figure, height=280, margin=(50, 10, 20, 40), x_title="timed step", y_title=unit, showlegend=False)
    count = max(planned_steps or 0, len(values))
    figure.update_xaxes(range=[0.5, count + 0.5], gridcolor="#eee", **whole_number_ticks(count))
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
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
    """Per-call times of the sharded op and of the same op on one device, in the unit of the slowest, each with its median.

    A median is a dotted line in its series' colour and is named in the legend: two medians close
    together would print their labels on top of each other.
    """
    figure = go.Figure()
    count = planned_steps or 0
    unit, scale = seconds_unit(max((t for series in samples.values() for t in series), default=1e-3))
    for which, series in samples.items():
        values = [t / scale for t in series]
        count = max(count, len(values))
        name = labels[which] + (f" · median {human_seconds(statistics.median(series))} (dotted)" if series else "")
        figure.add_scatter(
            x=list(range(1, len(values) + 1)),
            y=values,
            mode="lines+markers",
            name=name,
            line_color=OP_COLORS[which],
            hovertemplate=labels[which] + f", call %{{x}}: %{{y:.2f}} {unit}<extra></extra>",
        )
        if series:
            figure.add_hline(y=statistics.median(values), line_dash="dot", line_color=OP_COLORS[which])
    framed(figure, height=300, margin=(50, 10, 30, 40), x_title="timed call", y_title=unit, legend=dict(orientation="h", y=1.12))
    figure.update_xaxes(range=[0.5, max(count, 1) + 0.5], gridcolor="#eee", **whole_number_ticks(max(count, 1)))
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure
