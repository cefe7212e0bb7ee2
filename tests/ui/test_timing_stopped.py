"""A stopped timing keeps the figures of the steps it ran, and its chart spans those steps."""

import numpy as np

from ui.timing_view import stopped_text


def test_a_stopped_timing_gives_the_median_and_percentiles_of_the_steps_that_ran():
    """Stopping showed "Stopped after 3 of 1000 steps" and a chart of 1000 steps' width, no median."""
    samples = [2e-3, 1e-3, 4e-3]
    text = stopped_text(samples, 1000)
    assert text.startswith("Stopped after 3 of 1000 steps. Over those 3: median step 2.00 ms")
    assert f"p10 {np.percentile(samples, 10) * 1e3:.2f} ms, p90 {np.percentile(samples, 90) * 1e3:.2f} ms." in text
