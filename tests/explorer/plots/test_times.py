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
