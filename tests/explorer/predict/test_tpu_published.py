"""The step model on v5p and v4 against real runs: MaxText's published v5p and v4 tables (``tests/data/maxtext_published/``).

Each recorded program is MaxText's own (``explorer compile --maxtext KEYS --target T``'s path, MaxText 0.2.5) at a
published row's keys as the table's commit ran them, compiled for the row's slices (``record.py``; minutes each here,
so recorded); its published step comes from the table alone (``published_steps``, no explorer code). One row per
generation set its matmul efficiency (``step_rates.TPU_EVIDENCE``): v5p, 32B on one v5p-128; v4, 22B on one v4-128.
Every other row is out of sample.
"""

from __future__ import annotations

import gzip
import json
import math
import pathlib
from types import SimpleNamespace

import pytest

from explorer.hardware.accelerators import CHIPS
from explorer.predict import step_model
from explorer.predict import step_rates
from tests.data.maxtext_published import published_steps

DATA = pathlib.Path(__file__).parents[2] / "data" / "maxtext_published"
CALIBRATION = {"v5p": "v5p-32b-1", "v4": "v4-22b-1"}  # the one row per generation that sets its matmul efficiency
ROWS = {row["name"]: row for row in published_steps.rows()}
RECORDED = sorted(path.name.split(".")[0] for path in DATA.glob("*.hlo.txt.gz"))
# Pairs where the published step grows with the slice count and the predicted one falls (docs/step-time.md): v5p's
# one-slice programs carry 19% more matmul flops than their two-slice ones (XLA's own cost analysis: 3.84 against 3.22
# PFLOP per device at 32B, one more weight-gradient-shaped MLP matmul and three attention-shaped ones per layer, in
# the one-slice program's windowed loops), so the one-slice step is predicted 1.05-1.08x and the two-slice 0.86-0.87x
# (128B: 1.62x and 1.42x MaxText's flops, predicted 1.43x and 1.27x).
# Listed so the miss stays visible and checked, not hidden.
MISSES = {("v5p-32b-1", "v5p-32b-2"), ("v5p-64b-1", "v5p-64b-2"), ("v5p-128b-1", "v5p-128b-2")}
# Rows predicted beyond 1.25x whatever the matmul efficiency (at most the peak): the program's matmuls alone, at the
# spec's peak, take longer than the published step. v5p 128B: XLA's program counts 1.62x MaxText's count of the run's
# flops on one v5p-256 (5.22 PFLOP per device, 12.3 s at the peak against a published 10.25 s) and 1.42x on two
# (10.8 s against 10.58 s). Kept out of the 1.25x check and checked to stay so (docs/step-time.md), not hidden.
BEYOND_THE_PEAK = {"v5p-128b-1", "v5p-128b-2"}


def program(name: str) -> tuple[str, list]:
    with gzip.open(DATA / f"{name}.hlo.txt.gz", "rt") as handle:
        text = handle.read()
    return text, [SimpleNamespace(**c) for c in json.loads((DATA / f"{name}.collectives.json").read_text())]


def chip(name: str):
    return CHIPS[ROWS[name]["generation"]]


@pytest.fixture(scope="module")
def programs() -> dict:
    return {name: program(name) for name in RECORDED}


@pytest.fixture(scope="module")
def predictions(programs) -> dict:
    return {name: step_model.predict(text, chip(name), collectives) for name, (text, collectives) in programs.items()}


@pytest.fixture(scope="module")
def predicted(predictions) -> dict:
    return {name: prediction.step_s for name, prediction in predictions.items()}


def test_each_calibration_row_and_out_of_sample_rows_are_recorded():
    assert set(CALIBRATION.values()) <= set(RECORDED) and all(name in ROWS for name in RECORDED)
    for generation in CALIBRATION:
        assert sum(ROWS[name]["generation"] == generation for name in RECORDED) >= 2, generation


@pytest.mark.parametrize("generation", sorted(CALIBRATION))
def test_matmul_efficiency_is_what_the_calibration_row_gives(generation, programs, monkeypatch):
    """Refit: the efficiency at which the calibration row's predicted step equals its published step, at most the spec's
    peak (1.0), is the generation's constant. Where even the peak predicts the row slower than published, the fit is
    the peak."""
    name = CALIBRATION[generation]
    text, collectives = programs[name]

    def slower(efficiency: float) -> bool:
        monkeypatch.setitem(step_rates.TPU_EVIDENCE, generation, step_rates.TpuEvidence(efficiency, "fit", "fit"))
        return step_model.predict(text, chip(name), collectives).step_s > ROWS[name]["step_s"]

    low, high = (1.0, 1.0) if slower(1.0) else (0.2, 1.0)
    while high - low > 0.0005:
        middle = (low + high) / 2
        low, high = (middle, high) if slower(middle) else (low, middle)
    monkeypatch.undo()
    assert step_rates.TPU_EVIDENCE[generation].matmul_efficiency == pytest.approx(low, abs=0.0005)


def test_every_out_of_sample_published_run_is_predicted_within_1_25x_mean_error_under_10_percent(predicted):
    out_of_sample = set(predicted) - set(CALIBRATION.values()) - BEYOND_THE_PEAK
    ratios = {name: predicted[name] / ROWS[name]["step_s"] for name in out_of_sample}
    assert ratios and all(1 / 1.25 <= ratio <= 1.25 for ratio in ratios.values()), ratios
    assert sum(abs(ratio - 1) for ratio in ratios.values()) / len(ratios) < 0.10, ratios


def test_a_row_beyond_the_peak_is_one_whose_matmuls_alone_at_the_peak_exceed_its_published_step(predictions):
    """The rows left out of the 1.25x check: no efficiency (at most the peak, 1.0) could bring them within it."""
    assert BEYOND_THE_PEAK <= set(predictions)
    for name in BEYOND_THE_PEAK:
        assert step_rates.TPU_EVIDENCE[ROWS[name]["generation"]].matmul_efficiency == 1.0
        assert predictions[name].matmul_s > ROWS[name]["step_s"] and predictions[name].step_s > 1.25 * ROWS[name]["step_s"], name


def test_the_step_grows_with_the_slice_count_where_the_published_one_does(predicted):
    pairs = 0
    for generation, model in {(ROWS[name]["generation"], ROWS[name]["model"]) for name in predicted}:
        counts = sorted(ROWS[name]["slices"] for name in predicted if name.startswith(f"{generation}-{model}-"))
        for fewer, more in zip(counts, counts[1:]):
            few, many = f"{generation}-{model}-{fewer}", f"{generation}-{model}-{more}"
            if (few, many) in MISSES:  # still missed: once it grows, take it off the list
                assert ROWS[many]["step_s"] > ROWS[few]["step_s"] and predicted[many] <= predicted[few], (few, many)
            elif ROWS[many]["step_s"] > ROWS[few]["step_s"]:
                assert predicted[many] > predicted[few], (few, many, predicted[few], predicted[many])
            pairs += 1
    assert pairs >= 2


def test_every_recorded_run_fits_as_it_did_on_the_real_slice():
    for name in RECORDED:
        assert json.loads((DATA / f"{name}.result.json").read_text())["fits"] is True, name


def test_each_recorded_program_holds_the_published_models_parameters():
    """The keys build the model that ran: the compiled state's bytes per device (f32 weights and Adam's two f32 moments,
    12 bytes a parameter, replicated across slices), over the devices, are the parameter count MaxText's table counted
    (``published_steps.parameters``, from the era's shapes), within 0.2% (step counter, RNG keys, layout padding)."""
    for name in RECORDED:
        result = json.loads((DATA / f"{name}.result.json").read_text())
        devices = math.prod(result["mesh"]["shape"])
        held = result["memory"]["argument_bytes"] * devices / ROWS[name]["slices"] / 12
        assert held == pytest.approx(published_steps.parameters(ROWS[name]), rel=0.002), name
