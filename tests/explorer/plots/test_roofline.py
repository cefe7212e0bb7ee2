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
    assert [bar.name for bar in figure.data] == ["a: ≥ 4.00 ms, collective-bound", "b: ≥ 3.00 ms, compute-bound"]
    outlined = [[term for term, color in zip(bar.x, bar.marker.line.color) if color == "#222"] for bar in figure.data]
    assert outlined == [["collective"], ["compute"]]
    assert [list(bar.text) for bar in figure.data] == [
        ["1.00 ms", "2.00 ms", "4.00 ms"],
        ["3.00 ms", "1.00 ms", ""],
    ]  # no label on a bar of 0


def test_roofline_labels_and_axis_use_human_units_not_tiny_milliseconds():
    """A 47 ns memory term was labelled '4.67e-05 ms', unreadable: labels and the axis now use µs/ns as the tables do."""
    from explorer.plots.roofline import roofline_figure
    from explorer.predict.roofline import Estimate

    figure = roofline_figure(Estimate(2e-6, 4.67e-8, 1.5e-6))
    (bar,) = figure.data
    assert list(bar.text) == ["2.00 µs", "46.7 ns", "1.50 µs"]
    assert list(bar.y) == pytest.approx([2, 0.0467, 1.5])
    assert figure.layout.yaxis.title.text == "µs per step (lower bound)"
    assert "Step ≥ 2.00 µs" in figure.layout.title.text
    compared = compare_roofline_figure(["a"], [Estimate(2e-6, 4.67e-8, 1.5e-6)])
    assert compared.layout.yaxis.title.text == "µs per step (lower bound)" and list(compared.data[0].y) == pytest.approx([2, 0.0467, 1.5])
