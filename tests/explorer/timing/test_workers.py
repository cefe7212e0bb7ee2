"""The local launcher of a multi-process timing (``explorer/timing/workers.py``): its result, its refusals, and faults.

Faults end every worker: a killed worker ends the run with exit 2 naming it, Ctrl+C stops them all, and they end
themselves when the launcher is killed.
"""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.timing import workers
from explorer.errors import ExplorerError
from explorer.timing.timing import TimingResult, time_layout
from explorer.timing.workers import time_local_processes, what_it_said
from tests.explorer.timing import test_distributed
from tests.explorer.timing.test_distributed import small_layout
from tests.paths import ROOT

SLACK_S = 20  # for a loaded machine, on top of the launcher's stated bound
small_layout_file = test_distributed.small_layout_file  # the same fixture: the small layout, as a file


def test_result_survives_its_json_form(seed_dict):
    """Workers send their result as JSON: nothing may be lost on the way."""
    single = time_layout(small_layout(seed_dict), steps=2, warmup=0)
    result = dataclasses.replace(single, processes=2, devices_per_process=4)
    assert TimingResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_processes_must_split_the_mesh_evenly(seed_dict):
    with pytest.raises(ExplorerError, match=r"--processes: 3 does not divide the mesh's 8 devices"):
        time_local_processes(small_layout(seed_dict), 3)


def test_a_worker_refusal_is_the_single_process_refusal(seed_dict):
    """A layout the workers refuse (here: too big for this host) gives the error one process gives."""
    huge = small_layout(seed_dict, model={"name": "mlp", "options": {"batch": 8, "layers": 4, "depth": 65536}})
    with pytest.raises(ExplorerError) as single:
        time_layout(huge, steps=1)
    with pytest.raises(ExplorerError) as spread:
        time_local_processes(huge, 2, steps=1)
    assert spread.value.field == single.value.field == "model"
    needs = str(single.value).split(" GiB on the host")[0]
    assert "would need about" in needs and str(spread.value).startswith(needs)


# --- faults, through the command line ---------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, stopped or sleeping: anything but gone or a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def start_timing(request):
    """Starts ``explorer time --processes 2`` with many steps, returned once its workers are timing.

    Whatever a failing test leaves behind is killed afterwards, by process id.
    """
    started = []

    def cleanup():
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    request.addfinalizer(cleanup)

    def start(layout_file, **options):
        process, by_id = _start_timing(layout_file, **options)
        started.extend([process.pid, *by_id.values()])
        return process, by_id

    return start


def _start_timing(layout_file, sigint_ignored=False):
    """``sigint_ignored``: started as a non-interactive shell starts a background job (``cmd &``), with SIGINT ignored."""
    env = {**os.environ, "EXPLORER_CPU_DEVICES": "8"}
    process = subprocess.Popen(
        [sys.executable, "-m", "explorer", "time", str(layout_file), "--processes", "2", "--steps", "10000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    test_distributed.wait_until_timing(process)
    pids = children_of(process.pid)
    assert len(pids) == 2, pids
    by_id = {int(Path(f"/proc/{p}/cmdline").read_text().split("\0")[-2]): p for p in pids}
    return process, by_id


def test_a_killed_worker_ends_the_run_with_exit_2_naming_it(small_layout_file, start_timing):
    process, workers_by_id = start_timing(small_layout_file)
    os.kill(workers_by_id[1], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = process.communicate(timeout=120)
    ended_in = time.monotonic() - killed_at
    assert process.returncode == 2, stderr
    message = stderr.strip().splitlines()[-1]
    # The launcher prints process 0's phases: once process 0 is timing, process 1 has finished the warm-up
    # steps with it (they share every collective), but its own "timing" event may not have reached the
    # launcher yet, so the stage the launcher last heard from process 1 is one of these two.
    assert re.match(r"error: process 1 of 2: 'was killed by SIGKILL' while (warming up|timing)\b", message), message
    assert "Traceback" not in stderr
    # A liveness bound, not a speed goal: the stated bound plus slack for a loaded machine, and
    # below JAX's own heartbeat timeout, so the launcher's supervision ended it, not JAX.
    assert ended_in < workers.POLL_S + workers.KILL_GRACE_S + SLACK_S < workers.HEARTBEAT_TIMEOUT_S
    assert not [pid for pid in workers_by_id.values() if alive(pid)]


def test_ctrl_c_stops_every_worker(small_layout_file, start_timing):
    """Even when the launcher was started with SIGINT ignored, as a suite run in the background starts it
    (the CI failure of issue 35: the launcher never saw the SIGINT and timed on)."""
    process, workers_by_id = start_timing(small_layout_file, sigint_ignored=True)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not [pid for pid in workers_by_id.values() if alive(pid)]


def test_workers_end_themselves_when_the_launcher_is_killed(small_layout_file, start_timing):
    process, workers_by_id = start_timing(small_layout_file)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60
    while [pid for pid in workers_by_id.values() if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers_by_id.values() if alive(pid)]


def test_the_telling_line_of_a_worker_stderr():
    aborted = [
        "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1",
        "E1122 10:42:22.467732   17367 coordination_service.cc:1549] [96] Use error polling to propagate the following error",
        "F1122 10:42:22.470330   17378 client.h:80] Terminating process because the JAX distributed service detected fatal errors. "
        "absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
        "1",
        "*** Check failure stack trace: ***",
        "    @     0x7f20b94f0321  tsl::RPCState<>::OnCompleted()",
    ]
    said = what_it_said(aborted)
    assert said.startswith("Terminating process because") and said.endswith("(stopped sending heartbeats): 1")
    crashed = [
        "E1122 10:00:00.000000   1 x.cc:1] an earlier complaint",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "MemoryError: out of host memory",
    ]
    assert what_it_said(crashed).endswith("MemoryError: out of host memory")
    assert what_it_said(["[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"]) == "nothing"
