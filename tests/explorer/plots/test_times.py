"""Step times, race rounds and op calls: whole-number step ticks, medians named in the legend."""

import pytest

from explorer.plots.times import op_times_figure, race_figure, step_times_figure


@pytest.mark.parametrize(("count", "step"), [(1, 1), (3, 1), (10, 1), (11, 2), (30, 5), (1000, 100)])
def test_step_and_round_axes_tick_whole_numbers(count, step):
    figure = step_times_figure([0.01] * count)
    assert (figure.layout.xaxis.tickmode, figure.layout.xaxis.tick0, figure.layout.xaxis.dtick) == ("linear", 0, step)
    race = race_figure(["a", "b"], [[0.01] * count, [0.02] * count])
    assert race.layout.xaxis.dtick == step


def test_op_times_name_each_median_in_the_legend_not_on_the_chart():
    """Two medians close together printed their labels on top of each other (Arrays page, 2026-11-24)."""
    figure = op_times_figure(
        {"sharded": [0.0046, 0.0048, 0.0047], "single": [0.0043, 0.0044, 0.0042]},
        {"sharded": "sharded over 8 devices", "single": "one device"},
    )
    assert [trace.name for trace in figure.data] == [
        "sharded over 8 devices · median 4.70 ms (dotted)",
        "one device · median 4.30 ms (dotted)",
    ]
    assert not figure.layout.annotations and len(figure.layout.shapes) == 2


def test_times_of_seconds_are_drawn_in_seconds():
    """Issue 55: a step of 31.9 s was drawn and said as "31921.14 ms"; the chart takes the unit of the slowest sample."""
    figure = step_times_figure([31.9, 32.4, 30.1])
    assert figure.layout.yaxis.title.text == "s" and list(figure.data[0].y) == [31.9, 32.4, 30.1]
    assert figure.layout.annotations[0].text == "median 31.9 s"
    fast = step_times_figure([0.25, 0.26])
    assert fast.layout.yaxis.title.text == "ms" and list(fast.data[0].y) == [250.0, 260.0]
    calls = op_times_figure({"sharded": [31.9, 26.9], "single": [26.5, 19.6]}, {"sharded": "sharded", "single": "one"})
    assert calls.layout.yaxis.title.text == "s" and calls.data[0].name == "sharded · median 29.4 s (dotted)"
