"""The layout advisor: its search space, stage 1 against the analysis, stage 2 against `explorer compile`, Stop.

Compiles run in child processes, as the app runs them, for small MLPs on an 8-chip v5e slice.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from explorer import advisor
from explorer.hardware.accelerators import DCN
from explorer.analysis.analyzer import analyze, model_for_layouts
from explorer.compile.compile_pool import POOL
from explorer.compile.compile_result import CollectiveCost, Extrapolated, Memory
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.predict.roofline import Estimate, collective_seconds
from explorer.compile.xla_compile import gpu_plugin
from explorer.hardware.targets import parse_target
from tests import ground_truth_torus
from tests.explorer import compile_result
from tests.explorer import small_mlp as small
from tests.small_models import SMALL_TRANSFORMER_OPTIONS

TARGET = "v5litepod-8"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


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
        (
            "data2xfsdp2xtensor2",
            [2, 2, 2],
            ["data", "fsdp", "tensor"],
            [["batch", ("data", "fsdp")], ["embed", "fsdp"], ["hidden", "tensor"]],
        ),
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
    return parse_layout(
        {
            "name": "mine",
            "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
            "rules": [["batch", "data"], ["heads", "model"], ["mlp", "model"], ["vocab", "model"]],
            "model": {
                "name": "transformer",
                "options": {
                    **SMALL_TRANSFORMER_OPTIONS,
                    "gated_mlp": True,
                    "scan": scan,
                    **options,
                },
            },
        }
    )


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
        assert (
            candidate.estimate,
            candidate.largest_collective,
            candidate.collective_by_axis,
            candidate.collectives,
        ) == advisor.stage1_estimate(full, parse_target(TARGET)), name


def test_a_model_that_fits_no_layout_says_so_with_the_smallest_state(seed_dict):
    """32768-wide layers: 64 GiB of parameters and twice that of Adam state, at best 24 GiB per 16 GiB chip."""
    search = advisor.stage1(small(seed_dict, layers=8, depth=32768), TARGET)
    result = advisor.search_to_dict(search)
    assert result["fits_none"] is True and not advisor.shortlist(search)
    smallest = min(c.state_bytes for c in search.candidates)
    assert result["smallest_state"]["bytes"] == smallest > result["target"]["hbm_bytes"]
    assert advisor.verdict_text(search).startswith(f"No layout fits {TARGET}: the smallest state per device found is 24.0 GiB")


def test_the_text_report_is_the_verdict_the_counts_and_the_ranked_table(seed_dict):
    """What ``python -m explorer advise`` prints (``search_text``), its table drawn by ``formats.plain_table``."""
    search = advisor.stage1(small(seed_dict), TARGET)
    lines = advisor.search_text(search).splitlines()
    assert lines[0] == advisor.verdict_text(search)
    assert lines[1] == advisor.target_text(search.target) and "2x4 grid of chips without wraparound links" in lines[1]
    assert lines[2].startswith(f"searched {search.searched} candidate(s), 0 refused by the analysis, 0 compiled (0 from the disk cache)")
    header, rule, rows = lines[3], lines[4], lines[5:-2]
    assert header.startswith("rank  layout") and "extrapolated figures" not in header and set(rule) == {"-", " "}
    assert [row.split()[1] for row in rows] == [c.layout.name for c in search.ranked()]
    assert lines[-2] == (
        f"predicted step: {advisor.PREDICTION_NOTE}; step ≥: XLA's roofline lower bound where verified; else an estimate ({advisor.STAGE1_NOTE})."
    )
    assert lines[-1] == f"rules: {advisor.RULES_NOTE}; --rules writes them whole."
    assert lines[0].startswith(
        f"No advice for {TARGET} yet: no layout was compiled (stage 1 only). Stage 1 ranks {rows[0].split()[1]} first"
    )


def test_the_ranking_is_by_the_predicted_step_not_the_bound(seed_dict):
    """Two fitting candidates with one bound: the one predicted faster ranks first, estimated or verified."""
    search = advisor.stage1(small(seed_dict), TARGET)
    first, second = sorted((c for c in search.candidates if c.fits), key=lambda c: c.layout.name)[:2]
    tied = Estimate(1e-3, 1e-3, 0.0)
    slow = dataclasses.replace(first, estimate=dataclasses.replace(tied, predicted_s=3e-3))
    fast = dataclasses.replace(second, estimate=dataclasses.replace(tied, predicted_s=2e-3))
    assert [c.layout.name for c in advisor.rank([slow, fast])] == [second.layout.name, first.layout.name]
    assert fast.predicted_s == 2e-3 and fast.step_s == 1e-3


def test_stage_2_figures_are_explorer_compiles_for_the_same_layout(seed_dict, tmp_path):
    search = advisor.advise(small(seed_dict), TARGET, compiles=1)
    [top] = [c for c in search.candidates if c.verified and not c.own]
    assert search.compiles == 2  # the best estimate and the user's own layout
    path = tmp_path / "top.json"
    path.write_text(json.dumps(top.layout.to_dict()))
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "fresh"))  # a compile of its own, not a cache hit
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", str(path), "--target", TARGET, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr
    compiled = json.loads(completed.stdout)
    assert compiled["cached"] is False
    row = advisor.candidate_to_dict(1, top)
    assert row["peak_bytes"] == compiled["judged_peak_bytes"] and row["fits"] == compiled["fits"]
    assert row["step_s"] == compiled["estimate"]["step_s"] and row["bound"] == compiled["estimate"]["bound"]
    assert row["predicted_s"] == pytest.approx(compiled["estimate"]["predicted_s"]) and row["predicted_s"] >= row["step_s"]
    assert row["mfu_ceiling"] == compiled["estimate"]["mfu_ceiling"] and row["verified"] is True
    assert row["mesh"]["placement"] == compiled["mesh"]["placement"]


@pytest.fixture
def one_worker():
    """The server's compile pool one compile at a time (stage 2 then compiles one candidate after another)."""
    POOL.configure(1)
    yield
    POOL.configure(None)


def test_stop_ends_a_running_search_and_keeps_what_was_compiled(seed_dict, tmp_path, monkeypatch, one_worker):
    # an empty cache of its own: a compile another test left on disk would come back without a child to stop
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    search = advisor.stage1(small(seed_dict), TARGET)
    stages: list[str] = []
    # Stop at the second compile's first report, which comes before its child can have finished; waiting for a
    # named stage ("trace") raced the 0.2 s poll on a fast machine, and the search then ran to its end.
    search = advisor.stage2(
        search,
        compiles=3,
        on_progress=lambda stage, _: stages.append(stage),
        should_stop=lambda: any(s.startswith("stage 2: compiling 2 of") for s in stages),
    )
    assert any(s.startswith("stage 2: compiling 2 of") for s in stages)
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
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert set(result) >= {"target", "searched", "refused", "compiles", "elapsed_s", "candidates"}
    assert result["compiles"] == 0 and result["searched"] == 11
    assert [c["rank"] for c in result["candidates"]] == list(range(1, 12))
    for c in result["candidates"]:
        assert set(c) >= {
            "rank",
            "layout",
            "state_bytes",
            "verified",
            "extrapolated",
            "fits",
            "peak_bytes",
            "step_s",
            "predicted_s",
            "bound",
            "mfu_ceiling",
        }
        assert c["predicted_s"] > c["step_s"]  # stage 1's prediction beside its bound
        assert c["verified"] is False and c["peak_bytes"] is None and c["step_source"] == "stage1_estimate"
        parse_layout(c["layout"])  # a layout file, as analyze/compile read it
    bad = subprocess.run(
        [sys.executable, "-m", "explorer", "advise", str(path), "--target", TARGET, "--role", "hidden=gpu"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: roles['hidden']: 'gpu' is not a role") and "Traceback" not in bad.stderr
    depth = subprocess.run(
        [sys.executable, "-m", "explorer", "advise", str(path), "--target", TARGET, "--depth-option", "blocks"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert depth.returncode == 2 and depth.stderr.startswith("error: --depth-option: 'blocks' is not an option of this layout's model")
    assert "Traceback" not in depth.stderr


# --- the depth shortcut ----------------------------------------------------------------------------


def _result(peak, flops, accessed, collectives, compiled=True):
    return compile_result(
        TARGET,
        memory=Memory(peak // 2, peak // 2, peak // 2, peak // 2, peak),
        flops=flops,
        bytes_accessed=accessed,
        compiled=compiled,
        collectives=tuple(CollectiveCost(op, n, b, axes, g, 1, 1, "ici", 0.0) for op, n, b, axes, g in collectives),
    )


def test_extrapolation_is_linear_in_depth_per_figure_and_per_collective():
    from explorer.predict import roofline

    target = parse_target(TARGET)
    low = _result(1_000, 2e9, 4e8, [("all-gather", 2, 100, ("fsdp",), 8), ("all-reduce", 1, 50, ("fsdp",), 8)])
    high = _result(
        1_600,
        3e9,
        6e8,
        [("all-gather", 4, 300, ("fsdp",), 8), ("all-reduce", 1, 50, ("fsdp",), 8), ("reduce-scatter", 2, 40, ("fsdp",), 8)],
    )
    out = advisor.extrapolate(low, high, (2, 4), 32, target)
    # f(32) = f(2) + (f(4) - f(2)) * (32 - 2) / (4 - 2) = f(2) + 15 (f(4) - f(2))
    assert out.memory.peak_bytes == 1_000 + 15 * 600 and out.memory.temp_bytes == 500 + 15 * 300
    assert out.flops == 2e9 + 15 * 1e9 and out.bytes_accessed == 4e8 + 15 * 2e8
    got = {(c.op, c.count, c.bytes) for c in out.collectives}
    assert got == {("all-gather", 2 + 15 * 2, 100 + 15 * 200), ("all-reduce", 1, 50), ("reduce-scatter", 30, 600)}
    collectives = [roofline.Collective(c.op, c.count, c.bytes, c.mesh_axes, c.group_size, 1) for c in out.collectives]
    assert out.estimate == roofline.estimate(out.flops, out.bytes_accessed, collectives, target.chip)
    assert out.fits is True and out.extrapolated == Extrapolated((2, 4), 32)
    too_big = advisor.extrapolate(low, _result(10 * 2**30, 3e9, 6e8, []), (2, 4), 32, target)
    assert too_big.fits is False and too_big.headroom_bytes < 0
    error = advisor.extrapolation_error(out, dataclasses.replace(out, memory=Memory(peak_bytes=out.memory.peak_bytes * 2)))
    assert error["peak_bytes"] == 0.5 and error["flops"] == 1.0 and error["step_s"] == 1.0


def test_the_depth_option_is_found_by_name_or_named_and_bad_names_are_refused(seed_dict, monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "pkg.mod:make")  # depth_of reads only the options: nothing is imported
    seed = parse_layout(seed_dict)
    assert advisor.depth_of(small(seed_dict, layers=8)) == advisor.Depth(("layers",), 8, "")
    assert advisor.depth_of(seed).why == "layers=4 is no deeper than the small depths 2, 4: compiled in full"
    factory = lambda **options: parse_layout({**seed_dict, "model": {"name": "pkg.mod:make", "options": options}})
    t5 = factory(num_encoder_layers=12, num_decoder_layers=12, emb_dim=64)
    assert advisor.depth_of(t5) == advisor.Depth(("num_decoder_layers", "num_encoder_layers"), 12, "")
    assert advisor.at_depth(t5, advisor.depth_of(t5), 2).model.options == {"num_encoder_layers": 2, "num_decoder_layers": 2, "emb_dim": 64}
    assert "differ" in advisor.depth_of(factory(num_encoder_layers=12, num_decoder_layers=6)).why
    assert advisor.depth_of(factory(emb_dim=64)).why.startswith("no depth option found")
    assert advisor.depth_of(factory(emb_dim=64, blocks=24), "blocks") == advisor.Depth(("blocks",), 24, "")
    with pytest.raises(ExplorerError, match=r"--depth-option: 'blocks' is not an option of this layout's model"):
        advisor.depth_of(seed, "blocks")


def test_the_depth_shortcut_extrapolates_a_tiny_transformer_close_to_its_full_compile():
    """Compiled at depths 2 and 4 and extrapolated to 8, then compiled at 8: XLA's flops within 1 %, its peak within 5 %."""
    layout = small_transformer(scan=True, layers=8)
    search = advisor.stage1(layout, TARGET)
    search.candidates = [c for c in search.candidates if c.layout.name == "data4xtensor2"]  # the one measured (below)
    search = advisor.stage2(search, compiles=1, shortcut=True, full_compiles=1)
    assert search.compiles == 3 and search.full_compiles == 1 and not search.failures
    row = advisor.search_to_dict(search)["candidates"][0]
    assert row["verified"] is True and row["extrapolated"] is False and row["step_source"] == "xla_roofline"
    assert row["extrapolation"]["depths"] == [2, 4] and row["extrapolation"]["depth"] == 8
    error = row["extrapolation_error"]
    # Measured: peak 1.026x (XLA's buffer reuse is not quite linear at these tiny sizes; 1.0000002x for Llama-2-7B
    # shapes on v5p-128 from depths 2 and 4 to 32), flops 0.9997x, bytes accessed 1.005x, collective bytes 1.0x.
    assert 0.95 < error["peak_bytes"] < 1.05 and 0.99 < error["flops"] < 1.01 and 0.98 < error["bytes_accessed"] < 1.02, error
    assert error["collective_bytes"] == pytest.approx(1.0, rel=0.02), error
    assert advisor.search_to_dict(search)["depth_shortcut"] == {
        "used": True,
        "options": ["layers"],
        "depth": 8,
        "depths": [2, 4],
        "why_not": None,
    }
    assert "extrapolated: peak" in advisor.table_rows(search)[0]["extrapolated figures"]


def test_stage_2_compiles_next_the_best_estimate_calibrated_on_what_xla_said_so_far(seed_dict):
    """Stage 1 ranks x, y, z; XLA then says x's memory term is 4x the estimate's and its collectives half of it:
    scaled so, z (little memory traffic) goes before y, which stage 1 ranked second."""

    def candidate(name, memory, collective):
        layout = parse_layout({**seed_dict, "name": name})
        return advisor.Candidate(layout, 1, Estimate(1e-3, memory * 1e-3, collective * 1e-3), "none", fits=True)

    search = advisor.Search(parse_target(TARGET), candidates=[candidate("x", 1, 2), candidate("y", 1.5, 2.2), candidate("z", 0.8, 2.4)])
    assert [c.layout.name for c in advisor.shortlist(search)] == ["x", "y", "z"]
    assert advisor.next_to_compile(search).layout.name == "x"
    xla = compile_result(TARGET, estimate=Estimate(1e-3, 4e-3, 1e-3))
    search.candidates[0] = advisor.verified(search.candidates[0], xla)
    assert advisor.calibration(search) == pytest.approx({"compute_s": 1.0, "memory_s": 4.0, "collective_s": 0.5, "predicted_s": 1.0})
    assert advisor.next_to_compile(search).layout.name == "z"
    assert advisor.next_to_compile(search, tried={"z"}).layout.name == "y"
    # Optimistic: one layout XLA handles far worse than estimated (y: memory 20x) does not move the factor.
    search.candidates[1] = advisor.verified(search.candidates[1], dataclasses.replace(xla, estimate=Estimate(1e-3, 30e-3, 1e-3)))
    assert advisor.calibration(search)["memory_s"] == pytest.approx(4.0)
    # Per mesh axis: XLA's sequence collectives were 5x the estimate's, so a candidate whose estimate is all sequence
    # collectives is pushed behind one whose estimate is all tensor collectives (measured 1x).
    collective = lambda op, axes, seconds: CollectiveCost(op, 1, 1, axes, 2, 1, 1, "ici", seconds)
    per_axis = advisor.Search(
        parse_target(TARGET),
        candidates=[
            dataclasses.replace(candidate("s1", 0.1, 2), collective_by_axis={"sequence": 1e-3, "tensor": 1e-3}),
            dataclasses.replace(candidate("s2", 0.1, 2.1), collective_by_axis={"sequence": 2.1e-3}),
            dataclasses.replace(candidate("t", 0.1, 3), collective_by_axis={"tensor": 3e-3}),
        ],
    )
    per_axis.candidates[0] = advisor.verified(
        per_axis.candidates[0],
        dataclasses.replace(
            xla,
            estimate=Estimate(1e-3, 1e-4, 6e-3),
            collectives=(collective("all-gather", ("sequence",), 5e-3), collective("all-reduce", ("tensor",), 1e-3)),
        ),
    )
    assert advisor.calibration(per_axis)["collective_s:sequence"] == pytest.approx(5.0)
    assert advisor.calibration(per_axis)["collective_s:tensor"] == pytest.approx(1.0)
    assert advisor.next_to_compile(per_axis).layout.name == "t"  # stage 1 alone would say s2


def test_a_collective_xla_runs_over_two_axes_at_once_calibrates_the_two_together_never_either_alone(seed_dict):
    """T5 on a v5litepod-8 (docs/benchmarks.md): XLA gathered over fsdp x sequence in one op, 9.6x stage 1's estimate for the two.
    Shared between the axes, that put every FSDP collective at 9x and kept FSDP 4 x tensor 2, the best layout, from
    being compiled. Now the two axes are calibrated together: a candidate with both takes the factor; one with fsdp
    alone does not (it takes the overall factor), and is compiled next."""

    def candidate(name, collective_by_axis):
        layout = parse_layout({**seed_dict, "name": name})
        total = sum(collective_by_axis.values())
        return advisor.Candidate(layout, 1, Estimate(1e-4, 1e-4, total), "none", fits=True, collective_by_axis=collective_by_axis)

    collective = lambda axes, seconds: CollectiveCost("all-gather", 1, 1, axes, 2, 1, 1, "ici", seconds)
    search = advisor.Search(
        parse_target(TARGET),
        candidates=[
            candidate("fsdp-sequence", {"fsdp": 1e-3, "sequence": 1e-3}),
            candidate("fsdp-sequence-other", {"fsdp": 1e-3, "sequence": 0.5e-3}),
            candidate("fsdp", {"fsdp": 2e-3}),
            candidate("tensor", {"tensor": 1e-3}),
        ],
    )
    xla = compile_result(TARGET, estimate=Estimate(1e-4, 1e-4, 19e-3))
    joint = (collective(("fsdp", "sequence"), 18e-3), collective(("sequence",), 1e-3))
    search.candidates[0] = advisor.verified(search.candidates[0], dataclasses.replace(xla, collectives=joint))
    tensor = dataclasses.replace(xla, estimate=Estimate(1e-4, 1e-4, 0.5e-3), collectives=(collective(("tensor",), 0.5e-3),))
    search.candidates[3] = advisor.verified(search.candidates[3], tensor)
    factors = advisor.calibration(search)
    assert factors["collective_s:fsdp+sequence"] == pytest.approx(9.5)  # (18 + 1) / (1 + 1)
    assert "collective_s:fsdp" not in factors and "collective_s:sequence" not in factors
    assert factors["collective_s"] == pytest.approx(0.5)  # the lower median of 9.5 and 0.5
    assert advisor.calibrated(search.candidates[1], factors).collective_s == pytest.approx(1.5e-3 * 9.5)
    assert advisor.calibrated(search.candidates[2], factors).collective_s == pytest.approx(2e-3 * 0.5)
    assert advisor.next_to_compile(search).layout.name == "fsdp"  # stage 1 alone would say fsdp-sequence-other


def test_a_layout_with_explicit_axes_searches_the_sizes_of_its_own_axes(monkeypatch):
    """An Explicit-axis model names mesh axes in its own code: candidates keep the layout's axes, types and rules."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.external.factories:make_flax_gemma")
    layout = parse_layout(
        {
            "name": "gemma",
            "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
            "rules": [],
            "model": {"name": "tests.external.factories:make_flax_gemma", "options": {}},
        }
    )
    search = advisor.stage1(layout, "v5e:2x4")
    shapes = sorted(tuple(c.layout.mesh.shape) for c in search.candidates)
    assert shapes == [(2, 4), (4, 2), (8, 1)]
    assert all(c.layout.mesh.types == ("explicit", "explicit") and c.layout.mesh.axes == ("data", "model") for c in search.candidates)
    # model=8 does not divide Gemma's 4 heads: JAX refuses the type, the search says where
    assert search.refused == 1 and "modules.py:" in search.refused_examples[0]
    assert "does not divide evenly" in search.refused_examples[0]
    with pytest.raises(ExplorerError, match="Explicit axes keeps its own mesh axes"):
        advisor.candidate_layouts(layout, parse_target("v5e:2x4"), {"embed": "tensor"})


# --- where the mesh lies: a GPU cluster's hosts, a TPU slice's torus ----------------------------------


def _host_spans(target, shape, axis: int) -> int:
    """The hosts one group of mesh axis ``axis`` spans: JAX numbers a cluster's GPUs host by host (the CUDA plugin's
    order, which ``tests/explorer/hardware/test_gpu_targets.py`` checks against a compile)."""
    hosts = (np.arange(target.devices) // target.gpus_per_host).reshape(shape)
    return max(len(set(g.tolist())) for g in np.moveaxis(hosts, axis, -1).reshape(-1, shape[axis]))


def test_on_a_gpu_cluster_every_candidate_keeps_its_tensor_axis_inside_a_host(seed_dict):
    """Tensor is the innermost axis, so it lies on consecutive GPUs: inside one host wherever it fits in one. On hosts of
    6 GPUs a tensor axis of 4 would straddle two (GPUs 4-7), so those meshes are no candidates; the others all are."""
    for cluster in ("h100:2x4", "h100:2x6"):
        target = parse_target(cluster)
        layouts = advisor.candidate_layouts(parse_layout(seed_dict), target)[1:]
        for layout in layouts:
            axes, shape = list(layout.mesh.axes), tuple(layout.mesh.shape)
            if "tensor" in axes and shape[axes.index("tensor")] <= target.gpus_per_host:
                assert axes[-1] == "tensor" and _host_spans(target, shape, axes.index("tensor")) == 1, (cluster, layout.name)
        # Every ordered factorization over (data, fsdp, tensor), less those whose tensor axis straddles hosts.
        n, g = target.devices, target.gpus_per_host
        expected = {(d, f, n // (d * f)) for d in range(1, n + 1) for f in range(1, n + 1) if n % (d * f) == 0}
        expected = {s for s in expected if not (s[2] <= g and g % s[2])}
        assert sorted(tuple(dict(zip(l.mesh.axes, l.mesh.shape)).get(a, 1) for a in ("data", "fsdp", "tensor")) for l in layouts) == sorted(
            expected
        )
    assert len(layouts) == 16 and "fsdp3xtensor4" not in {l.name for l in layouts} and "fsdp2xtensor6" in {l.name for l in layouts}


def _book_seconds(op: str, bytes_: float, n: int, hosts: int, nvlink: float, network: float) -> float:
    """The GPU chapter's two-level time (https://jax-ml.github.io/scaling-book/gpus/), from the target's own figures:
    g = n / hosts GPUs of the group per host; NVLink inside a host, one NIC per GPU between hosts, the slower counts."""
    g = n / hosts
    per_byte = max((n - 1) / n / nvlink if g > 1 else 0.0, (hosts - 1) / hosts / (g * network))
    return {
        "all-gather": bytes_ * per_byte,
        "reduce-scatter": bytes_ * n * per_byte,
        "all-reduce": 2 * bytes_ * per_byte,
        "all-to-all": bytes_ * max((g - 1) / n / nvlink, (n - g) / n / network),
    }[op]


def test_stage_1_costs_an_axis_that_spans_hosts_at_the_network_bandwidth_per_gpu():
    """Every stage-1 collective on h100:2x4 (two hosts of 4) and h100:1x8 against the book's two-level time computed here
    from the H100's NVLink and network figures and the hosts each axis spans. The same mesh moves the same bytes on
    both: an FSDP axis of 2 that spans the two hosts (one GPU in each) takes NVLink / network = 9x as long as inside one."""
    searches = {cluster: advisor.stage1(small_transformer(), cluster) for cluster in ("h100:2x4", "h100:1x8")}
    spanning = 0
    for cluster, search in searches.items():
        target = search.target
        for c in search.candidates:
            shape, axes = tuple(c.layout.mesh.shape), list(c.layout.mesh.axes)
            by_axis: dict[str, float] = {}
            for _, k in c.collectives:
                [axis] = k.mesh_axes
                hosts = _host_spans(target, shape, axes.index(axis))
                spanning += hosts > 1
                expected = _book_seconds(k.op, k.bytes, k.group_size, hosts, target.chip.nvlink_bandwidth, target.chip.network_bandwidth)
                by_axis[axis] = by_axis.get(axis, 0.0) + expected
            assert c.collective_by_axis == pytest.approx(by_axis, rel=1e-9), (cluster, c.layout.name)
            assert c.estimate.collective_s == pytest.approx(sum(by_axis.values()), rel=1e-9)
    assert spanning > 0
    two, one = ({c.layout.name: c for c in searches[cluster].candidates} for cluster in ("h100:2x4", "h100:1x8"))
    h100 = parse_target("h100:1x8").chip
    assert two["fsdp2xtensor4"].collective_by_axis["fsdp"] / one["fsdp2xtensor4"].collective_by_axis["fsdp"] == pytest.approx(
        h100.nvlink_bandwidth / h100.network_bandwidth
    )
    assert two["fsdp2xtensor4"].collective_by_axis["tensor"] == pytest.approx(one["fsdp2xtensor4"].collective_by_axis["tensor"])


@pytest.mark.skipif(gpu_plugin() is None, reason='needs JAX\'s CUDA plugin: pip install "partition-explorer[gpu]"')
def test_an_advise_run_on_a_gpu_cluster_ranks_by_the_gpu_compile(seed_dict, tmp_path):
    """Stage 2 on h100:2x4 compiles through the CUDA plugin: the advice's figures are `explorer compile --target h100:2x4`'s,
    judged against JAX's 75% of the GPU's memory, and stage 1's placement (hosts per axis) is the compiled mesh's.
    (The guide's MLP: a small transformer's GPU compile takes about three times as long.)"""
    search = advisor.stage1(small(seed_dict), "h100:2x4")
    search.candidates = [c for c in search.candidates if not c.own]  # one compile in the search (the own layout has its own turn)
    search = advisor.stage2(search, compiles=1)
    assert search.compiles == 1 and not search.failures
    [top] = [c for c in search.candidates if c.verified and not c.own]
    assert search.ranked()[0].verified and search.ranked()[0].fits
    path = tmp_path / "top.json"
    path.write_text(json.dumps(top.layout.to_dict()))
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", str(path), "--target", "h100:2x4", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "fresh")),
    )
    assert completed.returncode == 0, completed.stderr
    compiled = json.loads(completed.stdout)
    assert compiled["cached"] is False and compiled["target"]["platform"] == "cuda"
    result = advisor.search_to_dict(search)
    row = next(r for r in result["candidates"] if r["layout"]["name"] == top.layout.name)
    assert (row["peak_bytes"], row["fits"], row["step_s"], row["bound"]) == (
        compiled["memory"]["peak_bytes"],
        compiled["fits"],
        compiled["estimate"]["step_s"],
        compiled["estimate"]["bound"],
    )
    assert [link["hosts"] for link in row["mesh"]["links"]] == [p["hosts"] for p in compiled["mesh"]["placement"]]
    assert [link["text"] for link in row["mesh"]["links"]] == [p["text"] for p in compiled["mesh"]["placement"]]
    limit = compiled["memory_limit"]["bytes"]  # what the compile's verdict judges: JAX's share of the GPU
    assert (
        search.limit_bytes
        == result["memory_limit"]["bytes"]
        == result["smallest_state"]["hbm_bytes"]
        == limit
        < compiled["target"]["hbm_bytes"]
    )
    assert "JAX lets one process use per GPU (75% of its 79.1 GiB)" in advisor.verdict_text(search)
    assert advisor.search_text(search).splitlines()[1].startswith("h100:2x4: a GPU cluster of 2 hosts x 4 NVIDIA H100")


def test_stage_1_costs_a_tpu_collective_on_the_rings_and_lines_its_axis_lies_on():
    """v5p:4x4x4 is a whole cube (wraparound on every axis): a mesh axis that runs around a whole torus axis moves data
    both ways (the book's bidirectional W_ici), one along part of an axis only one way. Every stage-1 collective of a
    tiny transformer's candidates against the book's time, with the rings and lines of JAX's own placement
    (``tests/ground_truth_torus.py``) and v5p's link bandwidth. So where candidates tie on the step (compute-bound), the
    tie-break's collective term knows the torus."""
    target = parse_target("v5p:4x4x4")
    search = advisor.stage1(small_transformer(batch=64), target)
    chosen = [c for c in search.candidates if not c.own and c.collectives][::6]
    truth = ground_truth_torus.placements({"v5p:4x4x4": sorted({tuple(c.layout.mesh.shape) for c in chosen})})["v5p:4x4x4"]
    bidirectional = 2 * target.chip.ici_link_bandwidth
    ring_factors = set()
    for c in chosen:
        axes = list(c.layout.mesh.axes)
        for label, k in c.collectives:
            rings = ground_truth_torus.ring_axes("v5p:4x4x4", truth[tuple(c.layout.mesh.shape)][axes.index(k.mesh_axes[0])])
            ring_factors.add(rings)
            n, per = k.group_size, k.bytes / (bidirectional * rings) * (k.group_size - 1) / k.group_size  # the book's AllGather
            expected = {"all-gather": per, "reduce-scatter": per * n, "all-reduce": 2 * per}[k.op]
            assert collective_seconds(k, target.chip) == pytest.approx(expected, rel=1e-9), (c.layout.name, label)
        assert c.estimate.collective_s == pytest.approx(sum(collective_seconds(k, target.chip) for _, k in c.collectives), rel=1e-9)
    assert len(chosen) >= 8 and any(r % 1 for r in ring_factors) and any(r % 1 == 0 for r in ring_factors)  # lines and rings both


def test_on_several_slices_candidates_put_data_or_fsdp_across_them_never_tensor_and_cost_it_over_the_dcn(seed_dict):
    """2xv5litepod-4 (two v5e slices of 4 chips): every generated candidate spreads one data or FSDP axis over the two
    slices (mesh.dcn), never a tensor axis; that axis rides the DCN in stage 1, its collectives costed at the DCN
    bandwidth per chip (``roofline``), the others on one slice's torus as ``placement.mesh_links`` places them."""
    search = advisor.stage1(small(seed_dict), "2xv5litepod-4")
    target, generated = search.target, [c for c in search.candidates if not c.own]
    spread = {(c.layout.mesh.axes[c.layout.mesh.dcn.index(2)]) for c in generated}
    assert spread == {"data", "fsdp"} and all(sorted(c.layout.mesh.dcn)[-1] == 2 and math.prod(c.layout.mesh.dcn) == 2 for c in generated)
    assert "tensor8" not in {c.layout.name for c in search.candidates}  # no data or FSDP axis to put across the slices
    crossing = 0
    for c in generated:
        links = {link.axis: link for link in c.links}
        for axis, count in zip(c.layout.mesh.axes, c.layout.mesh.dcn):
            assert (links[axis].link == "dcn") == (count > 1) and links[axis].slices == count
        for _, k in c.collectives:
            [axis] = k.mesh_axes
            assert k.slices == links[axis].slices
            crossing += k.slices > 1
            if k.slices > 1 and k.op == "all-reduce":
                g = k.group_size / 2
                inside = (g - 1) / g / (target.chip.ici_bidirectional_bandwidth * links[axis].ring_axes) if g > 1 else 0.0
                expected = 2 * k.bytes * max(inside, 1 / 2 / (g * DCN["v5e"].bandwidth))
                assert collective_seconds(k, target.chip) == pytest.approx(expected)
    assert crossing > 0
