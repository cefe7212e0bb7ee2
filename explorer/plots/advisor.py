"""The Advisor's chart: each candidate's peak memory per device against its step bound, with the memory line."""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

import plotly.graph_objects as go

from explorer.plots.scales import framed
from explorer.formats import human_bytes, human_seconds


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
    (``limit_label`` names it: what XLA lets a TPU program use of its HBM, a GPU's share JAX may use).

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
            customdata=[[human_seconds(p.step_s), human_bytes(p.bytes_per_device)] for p in chosen],  # no "3.22e+03 ms"
            hovertemplate="%{text}<br>step ≥ %{customdata[0]}<br>%{customdata[1]}<extra></extra>",
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
    framed(
        figure,
        height=360,
        margin=(10, 10, 30, 10),
        x_title="step lower bound (ms, log)",
        y_title="GiB per device (log)",
        legend=dict(orientation="h", y=-0.25),
    )
    figure.update_xaxes(type="log", gridcolor="#eee", dtick=1)  # a tick per decade: both axes span orders of magnitude
    figure.update_yaxes(type="log", gridcolor="#eee", dtick=1, range=[low, high])
    return figure
