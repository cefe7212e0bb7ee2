"""A search's candidates and their order: the ranking does not depend on the order the candidates came in."""

from __future__ import annotations

import random

from explorer import advisor
from tests.explorer import COMPILE_TARGET as TARGET
from tests.explorer import small_mlp as small


def test_the_ranking_is_deterministic(seed_dict):
    search = advisor.stage1(small(seed_dict), TARGET)
    order = [c.layout.name for c in search.ranked()]
    shuffled = list(search.candidates)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        assert [c.layout.name for c in advisor.rank(shuffled)] == order
    assert [c.layout.name for c in advisor.stage1(small(seed_dict), TARGET).ranked()] == order
    # Equal estimates (the user's layout and data2xtensor4 are the same program) are ordered by state, then name.
    steps = [float(f"{c.predicted_s:.3g}") for c in search.ranked()]  # what ranks: the prediction, to three figures
    assert steps == sorted(steps)
