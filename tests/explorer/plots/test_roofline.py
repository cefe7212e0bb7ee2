"""Roofline figures: several layouts on one axis, the bounding term outlined."""

import pytest

from explorer.plots.roofline import compare_roofline_figure


def test_compared_rooflines_share_one_axis_one_bar_per_layout_and_term_the_bound_outlined():
    """Compare drew one roofline per layout in columns, each on its own scale, cut at 1024 px: now one grouped chart."""
    from explorer.predict.roofline import Estimate

    figure = compare_roofline_figure(["a", "b"], [Estimate(1e-3, 2e-3, 4e-3), Estimate(3e-3, 1e-3, 0.0)])
    assert figure.layout.barmode == "group" and len(figure.data) == 2
    assert [list(bar.x) for bar in figure.data] == [["compute", "memory", "collective"]] * 2
    assert [list(bar.y) for bar in figure.data] == [pytest.approx([1, 2, 4]), pytest.approx([3, 1, 0])]
    assert [bar.name for bar in figure.data] == ["a: ≥ 4 ms, collective-bound", "b: ≥ 3 ms, compute-bound"]
    outlined = [[term for term, color in zip(bar.x, bar.marker.line.color) if color == "#222"] for bar in figure.data]
    assert outlined == [["collective"], ["compute"]]
    assert [list(bar.text) for bar in figure.data] == [["1 ms", "2 ms", "4 ms"], ["3 ms", "1 ms", ""]]  # no label on a bar of 0
