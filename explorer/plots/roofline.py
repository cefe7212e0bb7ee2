"""Roofline lower bounds on a step (compute, memory, collectives): one layout's, and several layouts' on one axis."""

from __future__ import annotations


import plotly.colors
import plotly.graph_objects as go

from explorer.predict.roofline import Estimate
from explorer.formats import human_seconds, seconds_unit


ROOFLINE_COLORS = {"compute": "#4C78A8", "memory": "#54A24B", "collective": "#E45756"}


def roofline_figure(estimate: Estimate, title: str = "") -> go.Figure:
    """The roofline's three terms side by side (per step, in the largest term's unit; lower bounds), the one that bounds the step outlined."""
    terms = [("compute", estimate.compute_s), ("memory", estimate.memory_s), ("collective", estimate.collective_s)]
    unit, scale = seconds_unit(max(seconds for _, seconds in terms))
    bound = estimate.bound
    figure = go.Figure(
        go.Bar(
            x=[f"{name}{' (bound)' if name == bound else ''}" for name, _ in terms],
            y=[seconds / scale for _, seconds in terms],
            marker_color=[ROOFLINE_COLORS[name] for name, _ in terms],
            marker_line=dict(color=["#222" if name == bound else "rgba(0,0,0,0)" for name, _ in terms], width=3),
            text=[human_seconds(seconds) for _, seconds in terms],
            textposition="outside",
            hovertemplate="%{x}: %{text} per step (lower bound)<extra></extra>",
        )
    )
    figure.update_layout(
        title=title or f"Step ≥ {human_seconds(estimate.step_s)}<br>{bound}-bound",
        height=300,
        margin=dict(l=50, r=40, t=50, b=40),
        yaxis_title=f"{unit} per step (lower bound)",
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
    unit, scale = seconds_unit(top)
    for index, (label, estimate) in enumerate(zip(labels, estimates)):
        seconds = [getattr(estimate, f"{term}_s") for term in terms]
        figure.add_bar(
            name=f"{label}: ≥ {human_seconds(estimate.step_s)}, {estimate.bound}-bound",
            x=list(terms),
            y=[s / scale for s in seconds],
            marker_color=plotly.colors.qualitative.Safe[index % len(plotly.colors.qualitative.Safe)],
            marker_line=dict(color=["#222" if term == estimate.bound else "rgba(0,0,0,0)" for term in terms], width=3),
            # Bars too short to see are not labelled (neighbours' labels ran together there); the hover has every value.
            text=[human_seconds(s) if s >= 0.03 * top else "" for s in seconds],
            customdata=[human_seconds(s) for s in seconds],
            textposition="outside",
            cliponaxis=False,
            hovertemplate=f"{label}<br>%{{x}}: %{{customdata}} per step (lower bound)<extra></extra>",
        )
    figure.update_layout(
        barmode="group",
        height=320 + 22 * len(labels),
        margin=dict(l=50, r=20, t=30, b=40),
        yaxis_title=f"{unit} per step (lower bound)",
        plot_bgcolor="white",
        modebar=dict(orientation="v"),
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.15, yanchor="top"),
    )
    figure.update_yaxes(rangemode="tozero", gridcolor="#eee")
    return figure
