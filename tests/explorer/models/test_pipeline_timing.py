"""A pipelined layout times live (explorer/timing/timing.py), and the work XLA counts is the pipeline as the program runs it:
each device runs its stage's blocks on one microbatch shard in every one of the loop's ``microbatches * repeats +
stages - 1`` iterations, the bubble's included, so against the same model unpipelined (every device every block, on
its data shard of the whole batch) the step's FLOPs are ``iterations / (stages * microbatches * repeats)`` of it."""

import pytest

from explorer.layout import parse_layout
from explorer.timing.timing import time_layout

# a vocabulary of 8: the blocks' FLOPs are nearly all of the step's (the embedding and the head are negligible)
SMALL = dict(batch=16, seq_len=32, layers=4, d_model=64, heads=2, kv_heads=2, head_dim=32, mlp_dim=256, vocab=8)


def _layout(options: dict):
    mesh = {"shape": [2, 4], "axes": ["stage", "data"]}
    rules = [["stage", "stage"], ["batch", "data"]]
    return parse_layout(
        {"name": "pipelined", "mesh": mesh, "rules": rules, "model": {"name": "transformer", "options": {**SMALL, **options}}}
    )


def test_a_pipelined_step_times_live_and_xla_counts_every_iteration_of_its_loop_bubble_included():
    plain = time_layout(_layout({"scan": True}), steps=1, warmup=0)
    piped = time_layout(_layout({"pipeline_stages": 2, "pipeline_microbatches": 4}), steps=1, warmup=0)
    assert piped.step_s.median > 0 and piped.loops_without_trip_count == 0
    ratio = (4 + 2 - 1) / (2 * 4)  # MaxText's 4 + 2 - 1 iterations of half the blocks on a quarter of the batch: 0.625
    assert piped.flops / plain.flops == pytest.approx(ratio, rel=0.03)
    assert piped.collectives["collective-permute"]["count"] > 0  # the shift between stages


def test_the_predicted_bubble_is_what_the_loop_costs_in_its_idle_iterations():
    """The prediction's bubble against one fitted from the predictions alone: with the batch fixed, the predicted step
    of 2 stages over M microbatches is ``rest + iterations * (f + a / M)`` (``f``: what an iteration costs whatever the
    microbatch, ``a / M``: its share of the activations' work; iterations = M + 1). Three M solve for rest, f and a;
    the bubble, one idle iteration per stage's loop, is then ``f + a / 4`` at M = 4 (MaxText's (2 - 1) / (4 + 2 - 1)
    of the loops' time)."""
    import numpy as np

    from explorer.hardware.accelerators import CHIPS
    from explorer.compile.compiled import compile_step
    from explorer.predict.step_model import pipeline_bubble, predict

    options = dict(batch=32, seq_len=128, d_model=256, heads=4, kv_heads=4, head_dim=64, mlp_dim=1024, pipeline_stages=2)
    chip = CHIPS["v5p"]
    texts = {m: compile_step(_layout({**options, "pipeline_microbatches": m}))[0].step.as_text() for m in (2, 4, 8)}
    steps = [predict(texts[m], chip).step_s for m in (2, 4, 8)]
    rest, f, a = np.linalg.solve([[1, m + 1, (m + 1) / m] for m in (2, 4, 8)], steps)
    bubble_s, share = pipeline_bubble(texts[4], chip, stages=2, trip_count=4 + 2 - 1)
    assert bubble_s == pytest.approx(f + a / 4, rel=0.15)
    # its share of the step is below MaxText's 20% by what the step spends outside the loops (``rest``, the optimizer);
    # pipeline_bubble reads up to ~15% low (kernels XLA puts outside the loop's body are not counted): docs/pipelines.md
    assert share == pytest.approx(bubble_s / steps[1]) and share < 0.2
