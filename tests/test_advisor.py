"""The layout advisor: its search space, stage 1 against the analysis, stage 2 against `explorer compile`, Stop.

Compiles run in child processes, as the app runs them, for small MLPs on an 8-chip v5e slice.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys

import pytest

from explorer import advisor
from explorer.analysis import analyze, model_for_layouts
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.targets import parse_target

TARGET = "v5litepod-8"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def small(seed_dict, **options):
    data = copy.deepcopy(seed_dict)
    data["model"]["options"].update({"layers": 2, "depth": 512, **options})
    return parse_layout(data)


def test_the_search_space_for_the_guides_mlp_on_8_devices_is_every_factorization_with_rules_by_role(seed_dict):
    layouts = advisor.candidate_layouts(parse_layout(seed_dict), parse_target(TARGET))
    assert layouts[0].name == "seed-2x4"  # the user's own layout is a candidate, first
    got = [(l.name, list(l.mesh.shape), list(l.mesh.axes), [[r.logical, r.mesh] for r in l.rules]) for l in layouts[1:]]
    assert got == [
        ("tensor8", [8], ["tensor"], [["batch", None], ["embed", None], ["hidden", "tensor"]]),
        ("fsdp2xtensor4", [2, 4], ["fsdp", "tensor"], [["batch", "fsdp"], ["embed", "fsdp"], ["hidden", "tensor"]]),
        ("fsdp4xtensor2", [4, 2], ["fsdp", "tensor"], [["batch", "fsdp"], ["embed", "fsdp"], ["hidden", "tensor"]]),
        ("fsdp8", [8], ["fsdp"], [["batch", "fsdp"], ["embed", "fsdp"], ["hidden", None]]),
        ("data2xtensor4", [2, 4], ["data", "tensor"], [["batch", "data"], ["embed", None], ["hidden", "tensor"]]),
        ("data2xfsdp2xtensor2", [2, 2, 2], ["data", "fsdp", "tensor"],
         [["batch", ("data", "fsdp")], ["embed", "fsdp"], ["hidden", "tensor"]]),
        ("data2xfsdp4", [2, 4], ["data", "fsdp"], [["batch", ("data", "fsdp")], ["embed", "fsdp"], ["hidden", None]]),
        ("data4xtensor2", [4, 2], ["data", "tensor"], [["batch", "data"], ["embed", None], ["hidden", "tensor"]]),
        ("data4xfsdp2", [4, 2], ["data", "fsdp"], [["batch", ("data", "fsdp")], ["embed", "fsdp"], ["hidden", None]]),
        ("data8", [8], ["data"], [["batch", "data"], ["embed", None], ["hidden", None]]),
    ]


def test_roles_can_be_changed_and_a_bad_role_is_named(seed_dict):
    layouts = advisor.candidate_layouts(parse_layout(seed_dict), parse_target(TARGET), roles={"hidden": "none"})
    assert all(dict((r.logical, r.mesh) for r in l.rules)["hidden"] is None for l in layouts[1:])
    with pytest.raises(ExplorerError, match=r"roles\['hidden'\]: 'gpu' is not a role"):
        advisor.candidate_layouts(parse_layout(seed_dict), parse_target(TARGET), roles={"hidden": "gpu"})


def test_stage_1_state_is_the_analysis_state_for_every_candidate_and_refusals_are_counted(seed_dict):
    """Batch 4 on 8 devices: the meshes that split the batch 8 ways are refused (JAX would refuse them)."""
    search = advisor.stage1(small(seed_dict, batch=4), TARGET)
    assert search.searched == 11 and search.refused == 4 and len(search.candidates) == 7
    refused = sorted(e.split(":")[0] for e in search.refused_examples)
    assert refused == ["data2xfsdp4", "data4xfsdp2", "data8", "fsdp8"]
    for candidate in search.candidates:
        assert candidate.state_bytes == analyze(candidate.layout).totals.state_bytes, candidate.layout.name
        assert not candidate.verified and candidate.estimate.step_s > 0


def small_transformer(scan=True, **options):
    return parse_layout({"name": "mine", "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
                         "rules": [["batch", "data"], ["heads", "model"], ["mlp", "model"], ["vocab", "model"]],
                         "model": {"name": "transformer", "options": {
                             "batch": 8, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 8, "kv_heads": 4, "head_dim": 8,
                             "mlp_dim": 64, "vocab": 128, "gated_mlp": True, "scan": scan, **options}}})


@pytest.mark.parametrize("scan", [True, False])
def test_stage_1_read_from_one_trace_equals_the_full_analysis_of_each_candidate(scan):
    """Stage 1 traces the model once and reads every candidate from it without a forward trace of its own
    (``analyze(..., received=False)``): every array's spec and bytes per device (activations too), and so
    the estimate, are those of the full analysis (a trace under each candidate's mesh and rules)."""
    search = advisor.stage1(small_transformer(scan), TARGET)
    assert len(search.candidates) >= 15
    shared = model_for_layouts([c.layout for c in search.candidates if not c.own])
    names = [c.layout.name for c in search.candidates]
    for name in ("sequence2xtensor4", "fsdp2xtensor4", "data2xsequence2xtensor2", "fsdp2xsequence4", "data8"):
        candidate = search.candidates[names.index(name)]
        full, quick = analyze(candidate.layout), analyze(candidate.layout, model=shared, received=False)
        assert [(a.path, a.spec, a.bytes_per_device) for a in quick.arrays] == [(a.path, a.spec, a.bytes_per_device) for a in full.arrays]
        assert any(a.kind == "activation" for a in full.arrays)
        assert candidate.state_bytes == full.totals.state_bytes and quick.totals == full.totals, name
        assert (candidate.estimate, candidate.largest_collective) == advisor.stage1_estimate(full, parse_target(TARGET)), name


def test_a_model_that_fits_no_layout_says_so_with_the_smallest_state(seed_dict):
    """32768-wide layers: 64 GiB of parameters and twice that of Adam state, at best 24 GiB per 16 GiB chip."""
    search = advisor.stage1(small(seed_dict, layers=8, depth=32768), TARGET)
    result = advisor.search_to_dict(search)
    assert result["fits_none"] is True and not advisor.shortlist(search)
    smallest = min(c.state_bytes for c in search.candidates)
    assert result["smallest_state"]["bytes"] == smallest > result["target"]["hbm_bytes"]
    assert advisor.verdict_text(search).startswith(f"No layout fits {TARGET}: the smallest state per device found is 24.0 GiB")


def test_the_ranking_is_deterministic(seed_dict):
    search = advisor.stage1(small(seed_dict), TARGET)
    order = [c.layout.name for c in search.ranked()]
    shuffled = list(search.candidates)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        assert [c.layout.name for c in advisor.rank(shuffled)] == order
    assert [c.layout.name for c in advisor.stage1(small(seed_dict), TARGET).ranked()] == order
    # Equal estimates (the user's layout and data2xtensor4 are the same program) are ordered by state, then name.
    steps = [c.step_s for c in search.ranked()]
    assert steps == sorted(steps)


def test_stage_2_figures_are_explorer_compiles_for_the_same_layout(seed_dict, tmp_path):
    search = advisor.advise(small(seed_dict), TARGET, compiles=1)
    [top] = [c for c in search.candidates if c.verified and not c.own]
    assert search.compiles == 2  # the best estimate and the user's own layout
    path = tmp_path / "top.json"
    path.write_text(json.dumps(top.layout.to_dict()))
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "fresh"))  # a compile of its own, not a cache hit
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", str(path), "--target", TARGET, "--json"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert completed.returncode == 0, completed.stderr
    compiled = json.loads(completed.stdout)
    assert compiled["cached"] is False
    row = advisor.candidate_to_dict(1, top)
    assert row["peak_bytes"] == compiled["memory"]["peak_bytes"] and row["fits"] == compiled["fits"]
    assert row["step_s"] == compiled["estimate"]["step_s"] and row["bound"] == compiled["estimate"]["bound"]
    assert row["mfu_ceiling"] == compiled["estimate"]["mfu_ceiling"] and row["verified"] is True
    assert row["mesh"]["placement"] == compiled["mesh"]["placement"]


def test_stop_ends_a_running_search_and_keeps_what_was_compiled(seed_dict):
    search = advisor.stage1(small(seed_dict), TARGET)
    stages: list[str] = []
    search = advisor.stage2(
        search, compiles=3, on_progress=lambda stage, _: stages.append(stage),
        should_stop=lambda: any(s.startswith("stage 2: compiling 2 of") and s.endswith(": trace") for s in stages),
    )
    assert search.stopped is True and search.stage == "stopped"
    assert search.compiles == 1
    verified = [c for c in search.candidates if c.verified]
    assert len(verified) == 1 and verified[0].layout.name == advisor.shortlist(advisor.stage1(small(seed_dict), TARGET))[0].layout.name
    assert advisor.search_to_dict(search)["candidates"][0]["verified"] is True


def test_the_command_line_prints_the_json_contract_and_refuses_bad_input(seed_dict, tmp_path):
    path = tmp_path / "layout.json"
    path.write_text(json.dumps(small(seed_dict).to_dict()))
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "advise", str(path), "--target", TARGET, "--json", "--compiles", "0"],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert set(result) >= {"target", "searched", "refused", "compiles", "elapsed_s", "candidates"}
    assert result["compiles"] == 0 and result["searched"] == 11
    assert [c["rank"] for c in result["candidates"]] == list(range(1, 12))
    for c in result["candidates"]:
        assert set(c) >= {"rank", "layout", "state_bytes", "verified", "extrapolated", "fits", "peak_bytes", "step_s", "bound", "mfu_ceiling"}
        assert c["verified"] is False and c["peak_bytes"] is None and c["step_source"] == "stage1_estimate"
        parse_layout(c["layout"])  # a layout file, as analyze/compile read it
    bad = subprocess.run(
        [sys.executable, "-m", "explorer", "advise", str(path), "--target", TARGET, "--role", "hidden=gpu"],
        capture_output=True, text=True, timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: roles['hidden']: 'gpu' is not a role") and "Traceback" not in bad.stderr
