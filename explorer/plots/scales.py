"""What the figures share: byte units for an axis, whole-number step ticks, the legend above the plot, the kinds' colours,
and their frame (``framed``)."""

from __future__ import annotations


# Anchored by its bottom just above the plot area: when it wraps on a narrow page, plotly grows
# the top margin instead of laying the second line over the bars.
LEGEND_ABOVE = dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom")


# Plotly's toolbar down the right edge, not across the top where a legend above the plot is (at 1024 px it covered it).
MODEBAR_BESIDE = dict(orientation="v")


KIND_COLORS = {"param": "#4C78A8", "opt_state": "#F58518", "input": "#54A24B", "activation": "#B279A2"}
# The memory breakdown's kinds (``compile.memory_breakdown.KINDS``): the analysis' colour where the kind is the same thing.
PEAK_COLORS = {
    "parameter": KIND_COLORS["param"],
    "optimizer state": KIND_COLORS["opt_state"],
    "gradient": "#E45756",
    "input": KIND_COLORS["input"],
    "saved activation": KIND_COLORS["activation"],
    "temporary": "#9D755D",
    "collective buffer": "#72B7B2",
    "output": "#EECA3B",
    "constant": "#BAB0AC",
    "argument": "#FF9DA6",
    "host-offloaded": "#79706E",
    "fragmentation": "#DDDDDD",
}


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


def whole_number_ticks(count: int) -> dict:
    """Axis settings for 1..count: ticks on whole numbers (1, 2, 5, 10, 20, … apart), never on 0.5 or 1.5."""
    step = next(s for s in (m * 10**e for e in range(7) for m in (1, 2, 5)) if s * 10 >= count)
    return {"tickmode": "linear", "tick0": 0, "dtick": step}


def framed(figure, *, height: int, margin: tuple[int, int, int, int], x_title: str, y_title: str, **layout):
    """The plots' common frame on ``figure``: its height, margins (left, right, top, bottom), axis titles, a white
    plot area, and any other layout settings (a legend, ``showlegend``). Returns the figure."""
    left, right, top, bottom = margin
    figure.update_layout(
        height=height,
        margin=dict(l=left, r=right, t=top, b=bottom),
        xaxis_title=x_title,
        yaxis_title=y_title,
        plot_bgcolor="white",
        modebar=MODEBAR_BESIDE,
        **layout,
    )
    return figure
