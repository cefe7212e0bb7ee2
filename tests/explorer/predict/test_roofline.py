"""The roofline's lower bounds: collective costs as How to Scale Your Model gives them, and the compute/memory bound."""

from __future__ import annotations

import pytest

from explorer.predict.roofline import Collective, collective_seconds, estimate
from explorer.hardware.accelerators import CHIPS


def test_collective_costs_follow_the_scaling_book():
    chip = CHIPS["v5p"]
    w = 2 * chip.ici_link_bandwidth
    gather = Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 1)
    assert collective_seconds(gather, chip) == pytest.approx(8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("all-reduce", 1, 8 * 2**20, ("data",), 4, 1), chip) == pytest.approx(2 * 8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("reduce-scatter", 1, 2 * 2**20, ("fsdp",), 4, 1), chip) == pytest.approx(8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 2), chip) == pytest.approx(8 * 2**20 / (2 * w) * 3 / 4)
    assert collective_seconds(Collective("all-reduce", 1, 8 * 2**20, ("data",), 1, 0), chip) == 0
    assert collective_seconds(Collective("collective-permute", 3, 8 * 2**20, ("fsdp",), 2, 1), chip) == pytest.approx(8 * 2**20 / w)
    assert collective_seconds(Collective("all-to-all", 1, 2 * 2**20, ("expert",), 4, 1), chip) == pytest.approx(8 * 2**20 / w * 3 / 4 / 4)
    # Torus axes' worth of bandwidth (the advisor's stage 1): a line (no wraparound) is half an axis, twice as long;
    # a ring and a line 1.5 axes. A group on no torus axis (XLA's count 0) is costed as one.
    line = Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 0.5)
    assert collective_seconds(line, chip) == pytest.approx(2 * collective_seconds(gather, chip))
    assert collective_seconds(Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 1.5), chip) == pytest.approx(
        8 * 2**20 / (1.5 * w) * 3 / 4
    )
    assert collective_seconds(Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 0), chip) == collective_seconds(gather, chip)
    terms = estimate(chip.peak_flops * 2, chip.hbm_bandwidth, [gather], chip)
    assert (terms.compute_s, terms.memory_s, terms.bound, terms.mfu_ceiling) == (2.0, 1.0, "compute", 1.0)
