"""Compiling for several TPU slices: the explorer against the bare recipe (``tests/ground_truth_multislice.py``).

Each case is compiled twice: by the explorer as the app does it (``compile_target``: a child process,
the disk cache in a fresh folder) and by the ground truth in one child process of its own (libtpu's
devices for N slices, the mesh in libtpu's device order, the Flax guide's train step, no explorer
code). The explorer's compiles run in threads while the ground truth's child runs.

- argument bytes exactly, the other memory figures within 10%, flops within 5%;
- the collectives equal: per kind, runs and bytes per step, in-slice (ICI) and cross-slice (DCN) apart;
- each collective's DCN marking: exactly the cross-slice ones ride the DCN, over the axis that spans the slices;
- a layout too big for the slices: XLA's refusal, its figures as for one slice.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import pathlib

import pytest

from explorer.layout import parse_layout
from explorer.compile.target_compile import compile_target
from tests import ground_truth_multislice
from tests.explorer import compile_cli

GUIDE = {"batch": 64, "layers": 2, "depth": 512, "scan": False}
CASES = {
    # Two v5p slices of 4 chips: data (4) over both slices x 2 inside, tensor (2) inside; data parallelism over the DCN.
    "2xv5p:2x2x1": {"mesh": [4, 2], "axes": ["data", "model"], "rules": [["batch", "data"], ["hidden", "model"]], "options": GUIDE},
    # Four v5e slices of 4 chips: FSDP over data (4), across all four slices; tensor (4) inside each.
    "4xv5e:2x2": {
        "mesh": [4, 4],
        "axes": ["data", "model"],
        "rules": [["batch", "data"], ["embed", "data"], ["hidden", "model"]],
        "options": GUIDE,
    },
    # The same two slices with the slices' axis inner (mesh.dcn, MaxText's dcn_*_parallelism): tensor (2) outer, inside
    # each slice; data (4) over both slices x 2 inside. The ground truth lays it with create_hybrid_device_mesh.
    "2xv5p:2x2x1 inner": {
        "mesh": [2, 4],
        "axes": ["model", "data"],
        "dcn": [1, 2],
        "rules": [["batch", "data"], ["hidden", "model"]],
        "options": GUIDE,
    },
    # Too big: the guide's MLP 16384 wide, replicated (data parallelism only) on two v5e slices of one chip.
    "2xv5e:1x1": {
        "mesh": [2],
        "axes": ["data"],
        "rules": [["batch", "data"]],
        "options": {"batch": 8, "layers": 8, "depth": 16384, "scan": True},
    },
}
NAMES = list(CASES)


def target_of(name: str) -> str:
    return name.split()[0]


def layout_of(name: str):
    case = CASES[name]
    return parse_layout(
        {
            "name": f"multislice-{name.replace(' ', '-')}",
            "mesh": {"shape": case["mesh"], "axes": case["axes"]} | ({"dcn": case["dcn"]} if "dcn" in case else {}),
            "rules": case["rules"],
            "model": {"name": "mlp", "options": case["options"]},
        }
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """(explorer's result, the ground truth's) per case: the explorer's compiles in threads, the ground truth's in one child."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        with concurrent.futures.ThreadPoolExecutor(len(NAMES)) as pool:
            futures = {name: pool.submit(compile_target, layout_of(name), target_of(name)) for name in NAMES}
            cases = [
                {"slice": target_of(name).split("x", 1)[1], "slices": int(target_of(name).split("x", 1)[0])}
                | {k: CASES[name][k] for k in ("mesh", "axes", "rules", "options", "dcn") if k in CASES[name]}
                for name in NAMES
            ]
            truth = dict(zip(NAMES, ground_truth_multislice.compile_cases(cases)))
            explorer = {name: future.result() for name, future in futures.items()}
    return {name: (explorer[name][0], truth[name]) for name in NAMES}


FITTING = NAMES[:3]


@pytest.mark.parametrize("name", FITTING)
def test_memory_and_flops_are_the_bare_recipes(results, name):
    ours, truth = results[name]
    assert not ours.target.is_gpu and ours.target.num_slices == truth["slice_index"][-1] + 1 and ours.target.devices == truth["devices"]
    assert ours.compiled and ours.memory.argument_bytes == truth["memory"]["argument_bytes"]
    for key in ("output_bytes", "alias_bytes", "temp_bytes", "peak_bytes"):
        assert getattr(ours.memory, key) == pytest.approx(truth["memory"][key], rel=0.10), key
    assert ours.flops == pytest.approx(truth["flops"], rel=0.05)


def _totals(collectives, link: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for c in collectives:
        if c.link == link:
            entry = found.setdefault(c.op, {"count": 0, "bytes": 0})
            entry["count"] += c.count
            entry["bytes"] += c.bytes
    return found


@pytest.mark.parametrize("name", FITTING)
def test_the_collectives_are_the_bare_programs_in_slice_and_across(results, name):
    ours, truth = results[name]
    assert truth["dcn"], "the layouts put an axis across the slices: the program must cross the DCN"
    assert _totals(ours.collectives, "ici") == truth["ici"]
    assert _totals(ours.collectives, "dcn") == truth["dcn"]


@pytest.mark.parametrize("name", FITTING)
def test_exactly_the_cross_slice_collectives_ride_the_dcn_over_the_axis_that_spans_the_slices(results, name):
    ours, _ = results[name]
    placed = {p.axis: p for p in ours.mesh.placement}
    assert placed["data"].slices == ours.target.num_slices and placed["data"].link == "dcn" and "DCN" in placed["data"].text
    assert placed["model"].slices == 1 and placed["model"].link == "ici"
    # The tensor axis stays inside each slice: its all-reduce (of the activations' gradients) rides the ICI, read as
    # over model from the slice's own program (whose device ids are places in the slice, not in the whole mesh).
    assert [c.link for c in ours.collectives if c.mesh_axes == ("model",)] == ["ici"]
    for c in ours.collectives:
        assert (c.link == "dcn") == (c.slices > 1)
        if c.link == "dcn":
            assert c.mesh_axes == ("data",) and c.seconds > 0
    assert ours.dcn_bytes == sum(stats["bytes"] for stats in _totals(ours.collectives, "dcn").values()) > 0
    # The DCN is far slower than the ICI: the same bytes over it take longer than the in-slice collectives' rate.
    assert ours.estimate.collective_s >= sum(c.seconds for c in ours.dcn_collectives)
    # XLA drops an in-slice collective's own metadata on several slices: its line is the value it moves' (the
    # operand's), the model's matmul lines, as on one slice.
    # (A collective whose moved value has no metadata either keeps no line: said so, never guessed.)
    names = {os.path.basename(s.file or "") for c in ours.collectives if c.link == "ici" for s in c.sources}
    assert "mlp.py" in names and names <= {"mlp.py", ""}
    # A cross-slice part is a MegaScale send of a bitcast of the fusion that computed the gradient: its line is that
    # fusion's, followed through the bitcast, for every part.
    assert {os.path.basename(s.file or "") for c in ours.dcn_collectives for s in c.sources} == {"mlp.py"}


def test_a_layout_too_big_for_the_slices_is_refused_with_xlas_figures(results):
    ours, truth = results["2xv5e:1x1"]
    assert "RESOURCE_EXHAUSTED" in truth["error"] and "exceeds available HBM" in truth["error"]
    assert not ours.compiled and not ours.fits and ours.oom is not None
    assert ours.oom.message.split("HLO module")[0] in truth["error"]
    assert ours.memory.peak_bytes > ours.target.chip.device_hbm_bytes
    # Read from XLA's dump: the gradients' all-reduce across the two slices, over the DCN, none inside (one chip each).
    assert {c.op for c in ours.dcn_collectives} == {"all-reduce"} and all(c.slices == 2 for c in ours.dcn_collectives)
    assert all(c.link == "dcn" for c in ours.collectives)


def test_the_ground_truth_imports_no_explorer_code():
    tree = ast.parse(pathlib.Path(ground_truth_multislice.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.startswith("explorer")]


def test_the_command_line_refuses_an_unknown_slice_type_in_one_line():
    completed = compile_cli("layouts/seed-2x4.json", "--target", "2xv9-16")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert completed.stderr.startswith("error: target: '2xv9-16' is N slices of a TPU slice (NxSLICE), but 'v9-16' is not")


def test_the_command_line_refuses_a_device_count_mismatch_naming_both_counts():
    completed = compile_cli("layouts/seed-2x4.json", "--target", "2xv5p-16")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert completed.stderr.startswith("error: target: '2xv5p-16' has 16 chips (2 slices of 8) but the mesh needs 8 devices;")


def test_a_split_the_slices_cannot_hold_is_refused_before_compiling(tmp_path):
    layout = layout_of("4xv5e:2x2").to_dict()
    layout["mesh"] = {"shape": [2, 8], "axes": ["data", "model"]}
    path = tmp_path / "layout.json"
    path.write_text(json.dumps(layout))
    completed = compile_cli(str(path), "--target", "4xv5e:2x2")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert "outermost axis data (2) to span the 4 slices of 4xv5e:2x2" in completed.stderr and "model (8)" in completed.stderr
