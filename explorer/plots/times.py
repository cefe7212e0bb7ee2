"""Times as they arrive: the Timing page's step times, the Compare race's rounds, the Arrays page's op calls."""

from __future__ import annotations

import statistics
from typing import Sequence

import plotly.graph_objects as go

from explorer.plots.scales import framed, whole_number_ticks


def step_times_figure(samples: Sequence[float], planned_steps: int | None = None) -> go.Figure:
    """Step times in milliseconds as they arrive, with the running median."""
    ms = [s * 1e3 for s in samples]
    steps = list(range(1, len(ms) + 1))
    figure = go.Figure(go.Scatter(x=steps, y=ms, mode="lines+markers", name="step", hovertemplate="step %{x}: %{y:.2f} ms<extra></extra>"))
    if ms:
        median = statistics.median(ms)
        figure.add_hline(y=median, line_dash="dot", line_color="#888", annotation_text=f"median {median:.2f} ms")
    framed(figure, height=280, margin=(50, 10, 20, 40), x_title="timed step", y_title="ms", showlegend=False)
    count = max(planned_steps or 0, len(ms))
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
    framed(figure, height=300, margin=(50, 10, 30, 40), x_title="timed call", y_title="ms", legend=dict(orientation="h", y=1.12))
    figure.update_xaxes(range=[0.5, max(count, 1) + 0.5], gridcolor="#eee", **whole_number_ticks(max(count, 1)))
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure
