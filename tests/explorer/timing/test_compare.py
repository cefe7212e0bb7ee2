"""The comparison core: spec differences, and a race that alternates layouts."""

import copy
import types

import pytest

from explorer.timing import compare
from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout


def test_spec_differences_list_only_changed_arrays_with_absent_ones(seed_dict):
    other = copy.deepcopy(seed_dict)
    other["model"]["options"]["layers"] = 5
    differences = compare.spec_differences([analyze(parse_layout(seed_dict)), analyze(parse_layout(other))])
    paths = {d.path for d in differences}
    assert "params/LogicalDotReluDot_4/W2" in paths
    assert "params/LogicalDotReluDot_0/W2" not in paths
    added = next(d for d in differences if d.path == "params/LogicalDotReluDot_4/W2")
    assert added.specs == ("absent", "P('model', None)")


def test_race_alternates_layouts_and_reports_per_round_ratios(seed_dict, monkeypatch):
    calls = []
    fake_medians = {"a": [0.10, 0.20, 0.10], "b": [0.20, 0.30, 0.25]}

    def fake_time_layout(layout, steps, warmup, on_phase=None):
        calls.append(layout.name)
        if on_phase:
            on_phase("compiling")
            on_phase("timing")
        median = fake_medians[layout.name][sum(1 for c in calls if c == layout.name) - 1]
        return types.SimpleNamespace(step_s=types.SimpleNamespace(median=median))

    monkeypatch.setattr(compare, "time_layout", fake_time_layout)
    a = parse_layout({**seed_dict, "name": "a"})
    b = parse_layout({**seed_dict, "name": "b"})
    rounds_seen, stages = [], []
    result = compare.race(
        [a, b], rounds=3, steps=4, on_round=lambda i, r: rounds_seen.append(i), on_phase=lambda *stage: stages.append(stage)
    )
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert rounds_seen == [0, 1, 2]
    assert stages[:4] == [(0, 0, "compiling"), (0, 0, "timing"), (0, 1, "compiling"), (0, 1, "timing")]
    assert stages[-1] == (2, 1, "timing")
    assert result.ratios(1) == pytest.approx([2.0, 1.5, 2.5])
    assert result.summary(1) == pytest.approx({"median": 2.0, "min": 1.5, "max": 2.5})
