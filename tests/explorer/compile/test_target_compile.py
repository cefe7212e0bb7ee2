"""Compiling for a target in a child process: the command line's JSON and messages, Stop, the mesh's device count.

Each compile runs in a child process as the app runs it (a few seconds for the guide's
MLP on an 8-chip slice); results are cached in a per-test folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.compile.target_compile import Stopped, compile_target
from tests.explorer import COMPILE_TARGET as TARGET
from tests.explorer import DOCUMENTED_KEYS

pytestmark = pytest.mark.usefixtures("own_compile_cache")


def test_a_device_count_mismatch_names_both_counts(seed_dict):
    with pytest.raises(ExplorerError, match=r"has 64 chips but the mesh needs 8 devices.*v5litepod-8"):
        compile_target(parse_layout(seed_dict), "v5p-128")


def test_stop_ends_the_compile_process(seed_dict):
    pids = []
    with pytest.raises(Stopped):
        compile_target(parse_layout(seed_dict), TARGET, should_stop=lambda: bool(pids), on_start=pids.append, poll_s=0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_a_flag_libtpu_refuses_is_left_out_in_one_line_naming_it(seed_dict, monkeypatch):
    """libtpu ends a process whose LIBTPU_INIT_ARGS hold a flag it does not know as it loads (recipes written for a newer
    libtpu carry some, tpu-recipes' v6e ones ``--2a886c8_chip_config_name``): the compile runs again without it, under
    the recipe's other flags, and the result names the flag left out in one line (before, the compile failed with the
    child's last stderr line)."""
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536 --2a886c8_chip_config_name=megachip_tccontrol")
    result, _ = compile_target(parse_layout(seed_dict), TARGET)
    assert dict(result.flags)["LIBTPU_INIT_ARGS"] == "--xla_tpu_scoped_vmem_limit_kib=65536"
    (line,) = result.refused_flags
    assert line.startswith("LIBTPU_INIT_ARGS --2a886c8_chip_config_name=megachip_tccontrol: a flag libtpu ")
    assert line.endswith("; left out of this compile") and "Unknown command line flag" in line and "\n" not in line


def test_the_command_line_prints_the_documented_json(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", "layouts/seed-2x4.json", "--target", "v5e:2x4", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert list(result) == [*DOCUMENTED_KEYS, "cross_check", "cached"]
    assert set(result["target"]) >= {
        "name",
        "topology",
        "chips",
        "device_kind",
        "hbm_bytes",
        "peak_flops",
        "hbm_bandwidth",
        "ici_bandwidth",
    }
    assert set(result["estimate"]) == {
        "compute_s", "memory_s", "collective_s", "step_s", "bound", "mfu_ceiling", "predicted_s", "prediction_parts"
    }  # fmt: skip
    parts = result["estimate"]["prediction_parts"]  # what the prediction is made of (text.prediction_gap says it)
    assert set(parts) == {"kernels_s", "dispatch_s", "matmul_s", "memory_s", "collective_s", "host_s", "launches", "launch_s", "fp8_flops"}
    assert result["estimate"]["predicted_s"] == max(parts["kernels_s"], result["estimate"]["step_s"])
    assert result["estimate"]["predicted_s"] >= result["estimate"]["step_s"] > 0  # the prediction beside the lower bound, never below
    assert all(set(c) >= {"op", "count", "bytes", "mesh_axes", "sources"} for c in result["collectives"])
    sources = [s for c in result["collectives"] for s in c["sources"]]
    assert sources and all(set(s) >= {"file", "line", "function", "module", "count", "bytes"} for s in sources)


def test_the_command_line_refuses_a_bad_target_with_the_valid_names():
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", "layouts/seed-2x4.json", "--target", "v9-8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr.startswith("error: target: 'v9-8' is not a TPU slice name or a GPU cluster")
    # one short line: an example of each form (a Cloud TPU type, a topology, slices, a GPU cluster) and where every form is
    assert "e.g. v5p-128, v5e-256, v5e:4x4, 2xv5p-16 or h100:2x8 (docs/targets.md lists every form)" in completed.stderr
    assert "Traceback" not in completed.stderr and completed.stderr.count("\n") == 1


def test_the_command_line_says_how_to_name_a_gpu_cluster():
    completed = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", "layouts/seed-2x4.json", "--target", "h100-8"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert completed.stderr == (
        "error: target: 'h100-8' names GPUs as a TPU type would; a GPU cluster is GPU:HOSTSxGPUS, e.g. h100:1x8 (8 GPUs per host at most)\n"
    )


def test_a_result_of_several_megabytes_comes_back(seed_dict, tmp_path, monkeypatch):
    """The child's stdout is read while it runs: a result larger than a pipe's 64 KiB buffer (here ~4 MB: the
    seed's real result with its collectives repeated) would otherwise block the child for ever."""
    import explorer.compile.target_compile as target_compile

    layout = parse_layout(seed_dict)
    result, _ = compile_target(layout, TARGET)
    big = result.to_json()
    big["collectives"] = big["collectives"] * (4_000_000 // len(json.dumps(big["collectives"])) + 1)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    assert path.stat().st_size > 4_000_000
    monkeypatch.setattr(target_compile, "cached", lambda *_: None)  # compile again, through the child
    start = target_compile.forkserver.start  # the child prints the file instead (through the fork server all the same)
    monkeypatch.setattr(target_compile.forkserver, "start", lambda _, **asked: start(["--compact", str(path)], module="json.tool", **asked))
    deadline = time.monotonic() + 60
    again, cached = compile_target(layout, TARGET, should_stop=lambda: time.monotonic() > deadline, poll_s=0.05)
    assert not cached and len(again.collectives) == len(big["collectives"])
