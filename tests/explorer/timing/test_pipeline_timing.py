"""A pipelined layout times live (explorer/timing/timing.py), on Auto and on Explicit axes, and the work XLA counts is
the pipeline as the program runs it: each device runs its stage's blocks on one microbatch shard in every one of the
loop's ``microbatches * repeats + stages - 1`` iterations, the bubble's included, so against the same model
unpipelined (every device every block, on its data shard of the whole batch) the step's FLOPs are
``iterations / (stages * microbatches * repeats)`` of it."""

import pytest

from explorer.layout import parse_layout
from explorer.timing.timing import time_layout

# a vocabulary of 8: the blocks' FLOPs are nearly all of the step's (the embedding and the head are negligible)
SMALL = dict(batch=16, seq_len=32, layers=4, d_model=64, heads=2, kv_heads=2, head_dim=32, mlp_dim=256, vocab=8)


def _layout(options: dict, types=("auto", "auto")):
    mesh = {"shape": [2, 4], "axes": ["stage", "data"], "axis_types": list(types)}
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
    # on a mesh of Explicit axes (jax.make_mesh's default) the same pipeline times live and runs the same work and sends
    explicit = time_layout(_layout({"pipeline_stages": 2, "pipeline_microbatches": 4}, ("explicit", "explicit")), steps=1, warmup=0)
    assert explicit.step_s.median > 0 and explicit.loops_without_trip_count == 0
    assert explicit.flops / plain.flops == pytest.approx(ratio, rel=0.03)
    assert explicit.collectives["collective-permute"] == piped.collectives["collective-permute"]
