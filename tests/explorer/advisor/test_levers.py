"""What to change to make a layout fit: each lever the peak's contributors call for, with the layout it makes, the most
freeing first; and, compiled, the first lever's new peak is the one XLA reports for its layout."""

from __future__ import annotations

import pytest

from explorer.advisor.levers import compile_levers, levers, needs_levers
from explorer.compile.memory_breakdown import Group, MemoryBreakdown, PeakBuffer
from explorer.compile.target_compile import compile_target
from explorer.layout import SEED_LAYOUT, load_layout_file, parse_layout
from tests.explorer import compile_result
from tests.paths import ROOT

GIB = 2**30


def _breakdown(**kinds: int) -> MemoryBreakdown:
    """A peak made of ``kinds`` (``saved_activation=...``), with one [batch, length, vocab] logits buffer."""
    groups = tuple(Group(kind.replace("_", " "), size, 1) for kind, size in kinds.items())
    logits = PeakBuffer(GIB, GIB, "bf16[8,2047,32000]", "saved activation", "fusion.227")
    total = sum(kinds.values())
    return MemoryBreakdown(10, 5, "fusion.1", total, total, (logits,), total - GIB, 1, ((5, total),), (4, 8), groups, (), ())


def _does_not_fit(breakdown: MemoryBreakdown):
    return compile_result("v5e-8", fits=False, headroom_bytes=-8 * GIB, memory_breakdown=breakdown)


def test_the_transformer_gets_remat_microbatches_a_smaller_batch_fsdp_and_no_vocabulary_tiling():
    layout = load_layout_file(str(ROOT / "layouts" / "transformer-data8.json"))
    found = levers(_does_not_fit(_breakdown(saved_activation=22 * GIB, parameter=GIB // 3, optimizer_state=2 * GIB // 3)), layout)
    assert [lever.name for lever in found] == [
        "remat full",
        "2 microbatches",
        "batch 32",
        "FSDP over data (embed -> data)",
        "vocabulary tiling",
    ]
    remat, micro, batch, fsdp, vocab = found
    assert remat.layout.model.options["remat"] == "full" and remat.saving_bytes == 22 * GIB
    assert micro.layout.model.options["microbatches"] == 2 and micro.saving_bytes == 11 * GIB
    assert batch.layout.model.options["batch"] == 32 and "different workload" in batch.cost
    assert ["embed", "data"] in [[r.logical, r.mesh] for r in fsdp.layout.rules] and fsdp.saving_bytes == GIB - GIB // 8
    assert vocab.layout is None and vocab.target_bytes == GIB and "no vocabulary tiling" in vocab.unavailable
    for lever in found[:4]:  # each changes one thing: the rest of the layout is the layout's
        assert lever.layout.mesh == layout.mesh and lever.layout.name.startswith(layout.name + "+")


def test_a_model_without_remat_says_so_and_a_layout_with_room_wants_no_levers():
    layout = parse_layout(SEED_LAYOUT)
    found = levers(_does_not_fit(_breakdown(saved_activation=GIB, parameter=GIB)), layout)
    remat = next(lever for lever in found if lever.name == "remat")
    assert remat.layout is None and "no remat option" in remat.unavailable
    assert found[-1] is remat  # a lever that makes no layout comes after those that do
    roomy = compile_result("v5e-8", fits=True, headroom_bytes=15 * GIB, memory_breakdown=_breakdown(parameter=GIB))
    assert not needs_levers(roomy)
    assert needs_levers(compile_result("v5e-8", fits=True, headroom_bytes=GIB // 2, memory_breakdown=_breakdown(parameter=GIB)))
    assert levers(compile_result("v5e-8", memory_breakdown=None), layout) == ()


WIDE = "tests.memory_models:make_wide"


@pytest.mark.usefixtures("own_compile_cache")
def test_the_first_lever_is_compiled_and_its_peak_is_the_one_xla_reports(monkeypatch):
    """The wide model with 2,097,152 rows on one v5e chip: its [rows, 4096] intermediate alone is 16 GiB, so XLA refuses
    it (E1000); half the batch, the first lever the breakdown leads to, compiled: its program holds half the rows, and
    it fits, at XLA's peak for it."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", WIDE)
    layout = parse_layout(
        {
            "name": "wide",
            "mesh": {"shape": [1], "axes": ["data"]},
            "rules": [["batch", "data"]],
            "model": {"name": WIDE, "options": {"batch": 2**21}},
        }
    )
    refused, _ = compile_target(layout, "v5e:1x1")
    assert not refused.compiled and refused.memory_breakdown.kind_bytes("saved activation") >= 16 * GIB
    found = levers(refused, layout)
    assert found[0].name == "batch 1048576"
    (first,) = compile_levers(found[:1], refused.target)
    assert first.result.compiled and first.result.fits and first.peak_bytes < refused.judged_peak_bytes
    assert any(b.kind == "input" and b.shape == "f32[1048576,64]" for b in first.result.memory_breakdown.buffers)  # the lever's batch
