"""What the figures share: whole-number step ticks (byte units: ``byte_unit``'s doctest)."""

import pytest

from explorer.plots.scales import whole_number_ticks


@pytest.mark.parametrize(("count", "step"), [(1, 1), (10, 1), (11, 2), (30, 5), (101, 20), (1000, 100)])
def test_step_ticks_are_whole_numbers_about_ten_apart_at_most(count, step):
    assert whole_number_ticks(count) == {"tickmode": "linear", "tick0": 0, "dtick": step}
