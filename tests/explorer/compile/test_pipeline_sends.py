"""A pipelined transformer's sends between stages in the compiled program (issue 43): the collective-permutes over the
stage axis, with their bytes (one microbatch's activations per stage, per device), their count (the loop's trip
count), their link (ICI inside a slice, DCN when the stage axis spans slices) and the source line of the shift.

Each layout is compiled for a TPU target as the app compiles it (``compile_target``'s child process). The expected
figures come from the options alone: MaxText's trip count ``microbatches * repeats + stages - 1`` written out here,
not the explorer's helper."""

from __future__ import annotations

import pytest

from explorer.analysis.stage_plan import stage_mesh_axes
from explorer.compile.target_compile import compile_target
from explorer.layout import parse_layout

SMALL = dict(batch=16, seq_len=8, layers=4, d_model=16, heads=2, kv_heads=2, head_dim=8, mlp_dim=32, vocab=64)
STAGES, MICROBATCHES, DATA = 2, 4, 4
TRIPS = MICROBATCHES * 1 + STAGES - 1  # MaxText's loop: microbatches * repeats + stages - 1
SEND_BYTES = (SMALL["batch"] // MICROBATCHES // DATA) * SMALL["seq_len"] * SMALL["d_model"] * 4  # [1, mb / data, length, embed] f32


def _layout(dcn=None, types=("auto", "auto")):
    options = {**SMALL, "pipeline_stages": STAGES, "pipeline_microbatches": MICROBATCHES}
    mesh = {"shape": [STAGES, DATA], "axes": ["stage", "data"], "axis_types": list(types)} | ({"dcn": dcn} if dcn else {})
    rules = [["stage", "stage"], ["batch", "data"]]
    return parse_layout({"name": "pipelined", "mesh": mesh, "rules": rules, "model": {"name": "transformer", "options": options}})


# the stage axis inside one slice; across two; inside one slice on a mesh of Explicit axes (jax.make_mesh's default)
CASES = {"v5litepod-8": (None, "ici"), "2xv5e:2x2": ([2, 1], "dcn"), "v5litepod-8 explicit": (None, "ici")}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Each case compiled once (a few seconds each): {target: (layout, result)}."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return {
            case: (
                layout := _layout(dcn, ("explicit",) * 2 if case.endswith("explicit") else ("auto",) * 2),
                compile_target(layout, case.split()[0])[0],
            )
            for case, (dcn, _) in CASES.items()
        }


@pytest.mark.parametrize("target", CASES)
def test_the_sends_between_stages_are_listed_with_bytes_link_and_source(compiled, target):
    layout, result = compiled[target]
    sends = result.pipeline_sends(stage_mesh_axes(layout))
    assert sends, [(c.op, c.mesh_axes) for c in result.collectives]
    for send in sends:
        assert send.mesh_axes == ("stage",) and send.link == CASES[target][1] and send.group_size == STAGES
        assert send.count % TRIPS == 0  # each send runs once per iteration of the loop
        assert send.bytes == send.count * SEND_BYTES  # one microbatch's activations of one stage, per device
        assert any(s.file and s.file.endswith("explorer/models/pipeline.py") for s in send.sources)
    assert sum(s.count for s in sends) >= 2 * TRIPS  # the shift forward and its transpose backward, once per iteration each
    assert result.pipeline_sends(()) == ()  # no stage axis: nothing is a pipeline send


def test_the_sends_across_slices_are_the_same_sends_as_inside_one(compiled):
    """XLA compiles a send between stages on different slices to MegaScale transfers (``ONE_TO_ONE``, one per
    direction); read from them, the sends per device are the in-slice program's collective-permutes. On a mesh of
    Explicit axes the shift is written in an ``auto_axes`` region (explorer/models/pipeline.py) and compiles to the
    same sends."""
    totals = {
        target: sorted((s.count, s.bytes) for s in result.pipeline_sends(stage_mesh_axes(layout)))
        for target, (layout, result) in compiled.items()
    }
    ici, dcn = totals["v5litepod-8"], totals["2xv5e:2x2"]
    assert totals["v5litepod-8 explicit"] == ici  # Explicit axes: the same sends as on Auto axes
    assert sum(c for c, _ in ici) == sum(c for c, _ in dcn) and sum(b for _, b in ici) == sum(b for _, b in dcn)
