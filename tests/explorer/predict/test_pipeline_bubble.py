"""A pipeline's bubble in the predicted step (issue 43): found in the compiled program's loops by their trip count and
stated as a share of the predicted step, within 10% of the formula ``(stages - 1) / (microbatches + stages - 1)`` on
layouts whose step is nearly all the pipeline's loops (the embedding, head and optimizer small: the rest is known).

The expected figures are written out from the options (MaxText's count), not taken from the explorer's helpers."""

from __future__ import annotations

import pytest

from explorer.compile.compile_result import TargetCompile
from explorer.compile.target_compile import compile_target
from explorer.layout import parse_layout

BLOCKS = dict(batch=64, seq_len=1024, layers=4, d_model=1024, heads=8, kv_heads=8, head_dim=128, mlp_dim=4096, vocab=64)
CASES = {(2, 4): 4}  # (stages, microbatches) -> the data axis beside the stage axis on 8 chips (one compile: ~50 s)
BUFFER_BYTES = BLOCKS["batch"] * BLOCKS["seq_len"] * BLOCKS["d_model"] * 4  # the loop's outputs buffer, whole: [batch, length, embed] f32


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        results = {}
        for (stages, microbatches), data in CASES.items():
            options = {**BLOCKS, "learned_positions": False, "pipeline_stages": stages, "pipeline_microbatches": microbatches}
            mesh = {"shape": [stages, data], "axes": ["stage", "data"]}
            layout = parse_layout(
                {
                    "name": "p",
                    "mesh": mesh,
                    "rules": [["stage", "stage"], ["batch", "data"]],
                    "model": {"name": "transformer", "options": options},
                }
            )
            results[stages, microbatches] = compile_target(layout, "v5litepod-8")[0]
        return results


@pytest.mark.parametrize(("stages", "microbatches"), CASES)
def test_the_bubbles_share_of_the_predicted_step_is_the_formulas(compiled, stages, microbatches):
    result = compiled[stages, microbatches]
    bubble = result.bubble
    assert bubble is not None and bubble.loops == 2  # the pipeline's loop forward and its transpose backward
    assert bubble.iterations == microbatches + stages - 1
    assert bubble.step_s == result.estimate.predicted_s  # a share of the prediction shown
    assert bubble.loop_s / bubble.step_s > 0.9  # the rest of the step is small here
    formula = (stages - 1) / (microbatches + stages - 1)
    assert bubble.share == pytest.approx(formula, rel=0.1)
    assert TargetCompile.from_json(result.to_json()).bubble == bubble  # kept in the cache and the JSON form


@pytest.mark.parametrize(("stages", "microbatches"), CASES)
def test_the_loop_does_not_gather_its_outputs_buffer(compiled, stages, microbatches):
    """The loop keeps each microbatch's output in a buffer and reads one back per iteration; with contiguous
    microbatches written at one dynamic index, XLA's TPU partitioner gathered the whole buffer over ``data`` every
    iteration (197 all-gathers, 51.6 GB per device per step on this layout). At most a handful, as on Explicit axes."""
    gathers = [c for c in compiled[stages, microbatches].collectives if c.op == "all-gather"]
    assert sum(c.count for c in gathers) <= 4, gathers
    assert sum(c.bytes for c in gathers) <= 2 * BUFFER_BYTES, gathers


def test_a_layout_that_does_not_pipeline_has_no_bubble(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    layout = parse_layout(
        {
            "name": "plain",
            "mesh": {"shape": [8], "axes": ["data"]},
            "rules": [["batch", "data"]],
            "model": {"name": "transformer", "options": {}},
        }
    )
    assert compile_target(layout, "v5litepod-8")[0].bubble is None
