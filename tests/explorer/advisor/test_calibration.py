"""Stage 2's calibrated prediction: what it compiles next, the one scale the table ranks on, and how far each compile was
from stage 1 (issue 43: the Llama-2-7B case on v5p-128 whose best layout stage 2 never compiled; issue 45 item 9: an
uncompiled 0.126 ms estimate ranked below compiled 0.171-0.242 ms predictions). No compile: XLA's figures are given."""

from __future__ import annotations

import dataclasses
import json

import pytest

from explorer import advisor
from explorer.layout import parse_layout
from explorer.predict.roofline import Estimate
from explorer.predict.step_model import predict_totals
from explorer.hardware.targets import parse_target
from tests.explorer import compile_result

TARGET = parse_target("v5litepod-8")
COMPUTE_S = 10e-3  # every candidate compute-bound at the same bound, as Llama-2-7B's on v5p-128 (180 ms each)


def candidate(seed_dict, name, memory_s, collective_s):
    """A fitting candidate whose stage-1 prediction is ``predict_totals`` of its terms, as ``estimate_candidate`` makes it."""
    chip = TARGET.chip
    flops, traffic = COMPUTE_S * chip.device_peak_flops, memory_s * chip.device_hbm_bandwidth
    estimate = Estimate(COMPUTE_S, memory_s, collective_s, predict_totals(flops, traffic, collective_s, chip))
    return advisor.Candidate(parse_layout({**seed_dict, "name": name}), 1, estimate, "none", fits=True)


def compiled(c, memory, collective, predicted_s):
    """``c`` verified with XLA's terms ``memory``/``collective`` times stage 1's and the compiled prediction ``predicted_s``."""
    xla = Estimate(COMPUTE_S, c.estimate.memory_s * memory, c.estimate.collective_s * collective, predicted_s)
    return advisor.verified(c, compile_result(TARGET.name, estimate=xla))


def test_stage_2_compiles_next_by_the_calibrated_prediction_not_the_calibrated_bound(seed_dict):
    """Every candidate is compute-bound at one bound, so the calibrated bound ties and left stage 1's order: z (memory-heavy)
    before y. XLA says memory is 4x stage 1's and collectives half: the calibrated prediction, which adds the terms as the
    step model does, puts y first."""
    search = advisor.Search(
        TARGET,
        candidates=[
            candidate(seed_dict, "a", 0.5e-3, 0.5e-3),
            candidate(seed_dict, "z", 1.5e-3, 0.2e-3),
            candidate(seed_dict, "y", 0.1e-3, 3e-3),
        ],
    )
    assert [c.layout.name for c in advisor.shortlist(search)] == ["a", "z", "y"]
    first = search.candidates[0]
    search.candidates[0] = compiled(first, 4.0, 0.5, first.estimate.predicted_s * 2)
    factors = advisor.calibration(search)
    assert factors["memory_s"] == pytest.approx(4.0) and factors["collective_s"] == pytest.approx(0.5)
    assert {advisor.calibrated(c, factors).step_s for c in search.candidates[1:]} == {COMPUTE_S}  # the bound: a tie
    assert advisor.next_to_compile(search).layout.name == "y"
    # The calibrated prediction reproduces the compiled one on the candidate it was calibrated on (the schedule's factor).
    assert advisor.calibrated_prediction(search.candidates[0], factors, TARGET) == pytest.approx(first.estimate.predicted_s * 2)


def test_every_row_is_ranked_on_one_scale_and_each_compile_says_how_far_it_was_from_stage_1(seed_dict):
    """Issue 45 item 9: a compiled candidate predicted at 2x its stage-1 estimate, an uncompiled one whose raw estimate is
    below that prediction: calibrated, it reads above it and ranks below it. One whose calibrated estimate is below the
    compiled prediction ranks above it (one scale, not verified first). Each compile's agreement: compiled over stage 1,
    and over the calibrated estimate that chose it."""
    search = advisor.Search(
        TARGET,
        candidates=[
            candidate(seed_dict, "a", 1e-3, 1e-3),
            candidate(seed_dict, "b", 1.2e-3, 1e-3),
            candidate(seed_dict, "c", 1e-3, 0.1e-3),
        ],
    )
    a, b, c = search.candidates
    assert b.predicted_s < 2 * a.predicted_s
    search.candidates[0] = compiled(a, 1.0, 1.0, 2 * a.predicted_s)
    advisor.recalibrate(search)
    assert search.calibration["predicted_s"] == pytest.approx(2.0)
    by_name = {x.layout.name: x for x in search.candidates}
    assert by_name["b"].calibrated_s == pytest.approx(2 * b.predicted_s) and by_name["b"].ranked_s == by_name["b"].calibrated_s
    assert [x.layout.name for x in search.ranked()] == ["c", "a", "b"]
    rows = advisor.table_rows(search)
    shown = [float(row["predicted step"].split()[0]) for row in rows]
    assert shown == sorted(shown)
    assert [row["predicted step"].split(" ms", 1)[1] for row in rows] == [" (estimate)", "", " (estimate)"]
    assert by_name["a"].agreement == {
        "stage1_predicted_s": a.predicted_s,
        "calibrated_predicted_s": None,
        "compiled_predicted_s": 2 * a.predicted_s,
        "compiled_over_stage1": pytest.approx(2.0),
        "compiled_over_calibrated": None,
    }
    # The second compile: c, forecast at 2x its stage-1 estimate, compiled at 3x: 1.5x its forecast.
    forecast = by_name["c"].calibrated_s
    search.candidates[search.candidates.index(by_name["c"])] = compiled(by_name["c"], 1.0, 1.0, 3 * c.predicted_s)
    advisor.recalibrate(search)
    done = next(x for x in search.candidates if x.layout.name == "c")
    assert done.calibrated_s == forecast and done.agreement["compiled_over_calibrated"] == pytest.approx(1.5)
    summary = json.loads(json.dumps(advisor.search_to_dict(search)))["agreement"]
    assert summary == {
        "compiles": 2,
        "compiled_over_stage1": [pytest.approx(2.0), pytest.approx(3.0)],
        "calibrated_compiles": 1,
        "compiled_over_calibrated": [pytest.approx(1.5), pytest.approx(1.5)],
    }
    assert advisor.agreement_text(search) in advisor.search_text(search).splitlines()
    assert advisor.agreement_text(search).endswith(
        "the compiled one is 2.00-3.00x stage 1's, 1.50x stage 1's calibrated on the "
        "compiles before it (1 compile(s): the forecast that chose them)"
    )
    assert (
        advisor.agreement_line(done)
        == f"predicted {3 * c.predicted_s * 1e3:.3g} ms compiled, 3.00x stage 1's estimate, 1.50x its calibrated estimate"
    )
    assert dataclasses.replace(done, calibrated_s=None).agreement["compiled_over_calibrated"] is None
