"""Memory (``explorer.advisor.fitting``): where nothing compiled fits, the memory search changes what holds the memory
until XLA compiles a layout that fits, or says that nothing fits on the slice, the closest layout with its peak, and
the smallest larger slice of the generation where the best one fits, compiled there (issue 56). The advice is never
a layout XLA did not compile in full.

Compiles for one v5e chip (``v5e:1x1``), of models a few seconds each to compile: a narrow transformer whose attention
at 4096 tokens keeps 24 GiB (no remat) of the 15.75 GiB XLA lets a program use, and the guide's MLP made 2 layers of
19456 wide (16.9 GiB of parameters and optimizer state on one chip, half of it on two).
"""

from __future__ import annotations

import dataclasses

import pytest

from explorer import advisor
from explorer.advisor import fitting
from explorer.compile.compile_result import Extrapolated, Memory
from explorer.formats import human_bytes
from explorer.hardware.targets import parse_target
from explorer.layout import parse_layout
from explorer.predict.roofline import Estimate
from tests.explorer import compile_result
from tests.explorer import small_mlp as small

ONE_CHIP = "v5e:1x1"


def long_sequences(**options):
    """A narrow transformer with 16 sequences of 4096 tokens, data parallel as written (one device: no split): XLA's
    peak without remat 24.1 GiB, nearly all of it the attention's scores and their gradients."""
    return parse_layout(
        {
            "name": "mine",
            "mesh": {"shape": [1], "axes": ["data"]},
            "rules": [["batch", "data"]],
            "model": {
                "name": "transformer",
                "options": {
                    "batch": 16,
                    "seq_len": 4096,
                    "layers": 2,
                    "d_model": 64,
                    "heads": 8,
                    "kv_heads": 8,
                    "head_dim": 8,
                    "mlp_dim": 128,
                    "vocab": 128,
                    "remat": "none",
                    "microbatches": 1,
                    **options,
                },
            },
        }
    )


def test_a_model_that_fits_no_candidate_at_first_gets_a_compiled_layout_that_fits():
    """Only the layout as written is searched (no remat, no microbatches): XLA says it does not fit. The memory search
    then changes what holds the memory (the peak is all beside the state: remat, microbatches), compiling each step,
    until XLA compiles one that fits; that is the advice, compiled in full, and every step is said."""
    search = advisor.stage1(long_sequences(), ONE_CHIP)
    search.candidates = [c for c in search.candidates if c.own]  # the layout as written alone: nothing fits at first
    search = advisor.stage2(search, compiles=1, fit_compiles=3)
    own = next(c for c in search.candidates if c.own)
    assert own.verified and not own.fits and own.peak_bytes > search.limit_bytes
    assert list(advisor.where_memory_goes(own)) == ["beside", "state"]  # nearly all of its peak is beside the state
    best = search.advice()
    assert best is not None and best.compiled_in_full and best.fits and best.peak_bytes <= search.limit_bytes
    options = best.layout.model.options
    assert (options["remat"], options["microbatches"]) != ("none", 1) and options["batch"] == 16  # the user's batch kept
    assert best.change == ""
    assert search.memory_steps[0].startswith(f"mine (XLA's peak {human_bytes(own.peak_bytes)}: beside ")
    assert any(step.endswith(", fits") for step in search.memory_steps)
    assert advisor.verdict_text(search).startswith(f"Advice for {ONE_CHIP}: {best.layout.name} — step ≥ ")
    assert advisor.search_to_dict(search)["advice"] == best.layout.name
    text = advisor.search_text(search)
    assert all(f"memory search: {step}" in text for step in search.memory_steps)


def test_nothing_fits_on_the_slice_says_the_closest_and_the_smallest_larger_slice_where_it_fits(seed_dict):
    """2 layers of 19456 (two 19456 x 19456 kernels each): parameters and Adam's two moments are 16.9 GiB on one chip,
    over what XLA lets a program use, so no compile is spent there (XLA's peak would be over too; it updates the
    parameters in place, so its peak for 18432 wide was the state's 15.2 GiB). The verdict says that nothing fits, the
    layout with the least state, and the smallest larger v5e slice where the best layout fits, compiled there (two
    chips: FSDP halves the state)."""
    search = advisor.stage1(small(seed_dict, layers=2, depth=19456, batch=8), ONE_CHIP)
    search = advisor.stage2(search, compiles=1)
    assert search.advice() is None and search.compiles == 1  # the one compile: on the larger slice
    closest = search.closest()
    assert not closest.verified and closest.state_bytes > search.limit_bytes
    [there] = search.elsewhere
    assert there.target.name == "v5litepod-2" and there.candidate.compiled_in_full and there.candidate.fits
    assert there.candidate.compiled.target.name == "v5litepod-2" and there.candidate.peak_bytes <= advisor.limit_bytes(there.target)
    verdict = advisor.verdict_text(search)
    assert verdict.startswith(
        f"No layout fits {ONE_CHIP}: the smallest state per device found is {human_bytes(closest.state_bytes)} ({closest.layout.name})"
    )
    assert (
        f"The smallest slice of TPU v5 lite where it fits: v5litepod-2, as {there.candidate.layout.name} (compiled there: XLA's peak"
        in verdict
    )
    found = advisor.search_to_dict(search)
    assert found["advice"] is None and found["elsewhere"][0]["target"] == "v5litepod-2" and found["elsewhere"][0]["fits"] is True


def _candidate(seed_dict, name, predicted_s, **fields):
    layout = parse_layout({**seed_dict, "name": name})
    estimate = Estimate(predicted_s / 2, predicted_s / 2, 0.0, predicted_s)
    return advisor.Candidate(layout, 1 << 20, estimate, "none", fits=True, **fields)


def test_the_advice_is_never_an_uncompiled_or_an_extrapolated_layout(seed_dict):
    """An uncompiled layout estimated faster, and one extrapolated from small depths faster still, rank above the one
    compiled in full: the advice is the compiled one, said to be the best so far with the search unfinished. With no
    compile there is no advice, only stage 1's ranking, said so."""
    target = parse_target("v5litepod-8")
    xla = lambda predicted_s, **more: compile_result(  # noqa: E731
        "v5litepod-8", estimate=Estimate(predicted_s / 2, predicted_s / 2, 0.0, predicted_s), memory=Memory(peak_bytes=1 << 30), **more
    )
    compiled = advisor.verified(_candidate(seed_dict, "compiled", 3.0), xla(3.0))
    extrapolated = advisor.verified(
        _candidate(seed_dict, "extrapolated", 1.0), xla(1.0, extrapolated=Extrapolated((2, 4), 8)), extrapolated=True
    )
    uncompiled = _candidate(seed_dict, "uncompiled", 2.0)
    search = advisor.Search(target, candidates=[uncompiled, compiled, extrapolated])
    assert [c.layout.name for c in search.ranked()] == ["extrapolated", "uncompiled", "compiled"]
    assert search.advice().layout.name == "compiled"
    verdict = advisor.verdict_text(search)
    assert verdict.startswith("Advice for v5litepod-8: compiled — step ≥ 1.50 s (the lower bound), predicted 3.00 s")
    assert (
        "The best compiled so far: the search is unfinished, 2 layouts not compiled in full are estimated faster (extrapolated, uncompiled)"
        in verdict
    )
    assert advisor.search_to_dict(search)["advice"] == "compiled"
    stage1_only = advisor.Search(target, candidates=[uncompiled, dataclasses.replace(extrapolated, verified=False, compiled=None)])
    assert stage1_only.advice() is None
    assert advisor.verdict_text(stage1_only).startswith("No advice for v5litepod-8 yet: no layout was compiled (stage 1 only).")


def test_where_the_memory_goes_orders_the_levers(seed_dict):
    """A compiled layout's peak by what holds it, from XLA's figures (its arguments: the state; the rest beside it),
    largest first; before a compile, stage 1's. The levers for each, in the order tried."""
    c = _candidate(seed_dict, "c", 1.0, gradient_bytes=1 << 30, activation_bytes=3 << 30)
    assert advisor.where_memory_goes(c) == {"beside": 4 << 30, "state": 1 << 20}
    memory = Memory(argument_bytes=9 << 30, peak_bytes=12 << 30)
    done = advisor.verified(c, compile_result("v5litepod-8", memory=memory))
    assert advisor.where_memory_goes(done) == {"state": 9 << 30, "beside": 3 << 30}
    assert [lever.__name__ for lever in advisor.LEVERS["beside"]] == [
        "stronger_remat",
        "more_microbatches",
        "split_tensor",
        "split_sequence",
        "smaller_batch",
    ]
    assert [lever.__name__ for lever in advisor.LEVERS["state"]] == ["fsdp_everywhere"]


def test_each_lever_makes_the_layout_it_says(seed_dict):
    """Stronger remat, twice the microbatches, half the batch (said as a change to the training), the sequence split
    and FSDP over every device (meshes stage 1 built, with the layout's settings)."""
    search = advisor.stage1(long_sequences(batch=32, remat="dots_saveable", microbatches=2), "v5litepod-4")
    mine = search.layout  # as written (one device: no candidate on 4 chips, its settings kept where it is moved)
    remat = fitting.stronger_remat(mine, search)
    assert (
        remat.layout.model.options["remat"] == "dots_with_no_batch_dims_saveable"
        and remat.layout.name == "mine+remat_dots_with_no_batch_dims_saveable+mb2"
    )
    assert fitting.more_microbatches(mine, search).layout.name == "mine+remat_dots_saveable+mb4"
    smaller = fitting.smaller_batch(mine, search)
    assert smaller.layout.model.options["batch"] == 16 and smaller.layout.name == "mine+remat_dots_saveable+mb2+batch16"
    assert smaller.change == "batch 32 → 16 sequences per step: a change to your training, not only its layout"
    fsdp = fitting.fsdp_everywhere(mine, search)
    assert dict(zip(fsdp.layout.mesh.axes, fsdp.layout.mesh.shape)) == {"fsdp": 4}
    assert fsdp.layout.name == "fsdp4+remat_dots_saveable+mb2" and fsdp.layout.model.options["microbatches"] == 2
    split = fitting.split_sequence(fsdp.layout, search)
    assert dict(zip(split.layout.mesh.axes, split.layout.mesh.shape)) == {"fsdp": 2, "sequence": 2}
    tensor = fitting.split_tensor(fsdp.layout, search)
    assert dict(zip(tensor.layout.mesh.axes, tensor.layout.mesh.shape)) == {"fsdp": 2, "tensor": 2}
    assert tensor.layout.name == "fsdp2xtensor2+remat_dots_saveable+mb2"
    assert fitting.fsdp_everywhere(fsdp.layout, search) is None  # already FSDP over every device
    full = fitting.with_settings(mine, remat="full")
    assert fitting.stronger_remat(full, search) is None  # nothing keeps fewer activations than full remat


@pytest.mark.parametrize("target, larger", [("v5e:1x1", ["v5litepod-2", "v5litepod-4"]), ("v5p-8", ["v5p-16", "v5p-32"]), ("h100:1x8", [])])
def test_the_larger_slices_tried_are_the_next_of_the_generation(target, larger):
    assert [t.name for t in advisor.larger_targets(parse_target(target))] == larger
