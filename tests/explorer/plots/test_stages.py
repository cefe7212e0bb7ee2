"""The stage picture (explorer/plots/stages.py) draws the plan it is given: a bar per stage, its blocks and devices."""

from explorer.plots.stages import stage_bars
from explorer.analysis.stage_plan import Stage, StagePlan
from explorer.models.schedule import bubble_fraction


def test_each_stage_is_a_bar_with_its_blocks_devices_and_bytes_and_the_bubble_in_the_title():
    rows = (Stage(0, (0, 1, 4, 5), (0, 1, 2, 3), 3 << 20), Stage(1, (2, 3, 6, 7), (4, 5, 6, 7), 3 << 20))
    plan = StagePlan(2, 4, 2, 9, bubble_fraction(2, 4, 2), True, rows)
    figure = stage_bars(plan)
    bar = figure.data[0]
    assert list(bar.y) == ["stage 0", "stage 1"] and list(bar.x) == [3.0, 3.0]
    assert list(bar.text) == ["blocks 0, 1, 4, 5 · devices 0-3", "blocks 2, 3, 6, 7 · devices 4-7"]
    assert "bubble 11% of 9 iterations" in figure.layout.title.text and "MiB" in figure.layout.xaxis.title.text
