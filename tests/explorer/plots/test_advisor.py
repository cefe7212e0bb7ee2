"""The Advisor's chart: one trace per kind, in a fixed order, from plain points."""

import pytest

from explorer.plots import advisor
from explorer.plots.advisor import AdvisorPoint, advisor_figure


def test_advisor_figure_draws_one_trace_per_kind_in_a_fixed_order_from_plain_points():
    """The Advisor's chart from plain points (ui.advisor_view only turns candidates into them)."""
    points = [
        AdvisorPoint("est", "estimate", 0.002, 2**30),
        AdvisorPoint("a", "xla", 0.01, 2**31),
        AdvisorPoint("x", "extrapolated", 0.1, 2**29),
        AdvisorPoint("b", "xla", 0.02, 2**32),
    ]
    figure = advisor_figure(points, 16 * 2**30)
    assert [t.name for t in figure.data] == [name for name, _ in advisor.ADVISOR_KINDS.values()]
    assert list(figure.data[0].text) == ["a", "b"] and list(figure.data[0].y) == [2, 4] and list(figure.data[0].x) == [10, 20]
    assert figure.layout.annotations[0].text == "HBM 16.0 GiB per device"
    # the hover in units a person reads (issue 55: Plotly's ".3g" wrote a 3.22 s step "3.22e+3 ms")
    slow = advisor_figure([AdvisorPoint("slow", "xla", 3.22, 12 * 2**30)], 16 * 2**30).data[0]
    assert (
        list(slow.customdata[0]) == ["3.22 s", "12.0 GiB"] and "%{customdata[0]}" in slow.hovertemplate and ":.3g" not in slow.hovertemplate
    )
    with pytest.raises(ValueError, match="verified"):
        advisor_figure([AdvisorPoint("a", "verified", 0.01, 1)], 2**30)
