"""Stage 1's estimate (``explorer.advisor.estimate``) of MaxText configs against the compiled predictions of MaxText's
own programs: MaxText feeds its token ids as ``(batch, length)`` arrays sharded by mesh axes, not logical names, and
stage 1 counted one token a step (issue 56: its estimates 24-32x below the compiled predictions, so the order stage 2
compiled in was close to arbitrary). Now within 1.5x, on programs recorded from ``explorer compile --maxtext`` for
published runs (``tests/data/maxtext_published``, predicted again from their optimized HLO by today's step model): no
compile here. Skips without MaxText (an optional extra)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import pathlib
from types import SimpleNamespace

import pytest

from explorer.advisor import estimate
from explorer.analysis.analyzer import analyze
from explorer.hardware.targets import parse_target
from explorer.layout import parse_layout
from explorer.models import maxtext
from explorer.predict import step_model
from tests.data.maxtext_published.record import keys_of

HAS_MAXTEXT = importlib.util.find_spec("maxtext") is not None
needs_maxtext = pytest.mark.skipif(not HAS_MAXTEXT, reason=f"MaxText is an optional extra, not installed: {maxtext.INSTALL_LINE}")
DATA = pathlib.Path(__file__).parents[2] / "data" / "maxtext_published"
ROWS = {row["name"]: row for row in json.loads((DATA / "published.json").read_text())["rows"]}


def compiled_prediction(name: str) -> float:
    """The recorded program's step as the step model predicts it today (as ``tests/explorer/predict/test_tpu_published.py``)."""
    with gzip.open(DATA / f"{name}.hlo.txt.gz", "rt") as handle:
        text = handle.read()
    collectives = [SimpleNamespace(**c) for c in json.loads((DATA / f"{name}.collectives.json").read_text())]
    return step_model.predict(text, parse_target(ROWS[name]["target"]).chip, collectives).step_s


@needs_maxtext
@pytest.mark.parametrize("name", ["v5p-32b-1", "v6e-llama3_1-8b-8chips"])
def test_stage_1_of_a_maxtext_config_is_within_1_5x_of_its_compiled_prediction(name):
    """MaxText's 32B on a v5p-128 (FSDP 16 x tensor 4, minimal remat) and Llama 3.1 8B on a v6e-8 (FSDP 8, its layers'
    inputs and projections offloaded): stage 1's predicted step within 1.5x of the compiled program's. Measured: 0.86x
    and 1.24x (compiled over stage 1); before the token ids counted, 42x and 7.8x. Compute, the term the tokens set, is
    within 20% of XLA's matmuls."""
    row = ROWS[name]
    layout = parse_layout(maxtext.layout_data(keys_of(row), row["target"]))
    report = analyze(layout)
    roles = estimate.report_roles(report)
    devices = parse_target(row["target"]).devices
    assert estimate.tokens_per_step(report, roles) == float(row["maxtext"]["per_device_batch_size"]) * devices * int(
        row["maxtext"]["max_target_length"]
    )  # a recipe's keys are strings, as its command line writes them
    stage1 = estimate.stage1_estimate(report, parse_target(row["target"])).estimate
    compiled = compiled_prediction(name)
    assert 1 / 1.5 <= compiled / stage1.predicted_s <= 1.5, (compiled, stage1)
    xla = json.loads((DATA / f"{name}.result.json").read_text())["estimate"]
    assert math.isclose(stage1.compute_s, xla["compute_s"], rel_tol=0.2), (stage1.compute_s, xla["compute_s"])
