"""Two local processes under jax.distributed: the same program as one process; joining a multi-host run.

The ground truth is the single-process run of the same layout in this test process
(8 simulated devices): XLA's per-device memory, the collectives, and the parameters
after three steps must be the same when the mesh's devices are split over two
processes (4 each) that talk through gloo.
"""

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest


from explorer.timing import workers
from explorer.layout import parse_layout
from explorer.timing.timing import timed_run, time_layout
from explorer.timing.distributed import state_arrays
from explorer.timing.workers import time_local_processes
from tests.paths import ROOT

SMALL_MLP = {"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 256, "scan": False}}


def small_layout(seed_dict, **changes):
    data = copy.deepcopy(seed_dict)
    data["model"] = SMALL_MLP
    data.update(changes)
    return parse_layout(data)


PLANNED_STEPS = 1000


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """The guide's layout (2x4 mesh, batch over data, hidden over model) in 2 processes, 1000 steps asked and Stop
    pressed once 3 have been reported (as the Timing page's Stop does): the run ends after the steps under way."""
    from explorer.layout import SEED_LAYOUT

    layout = small_layout(SEED_LAYOUT)
    state_file = tmp_path_factory.mktemp("state") / "state.npz"
    reported: list[float] = []
    result = time_local_processes(
        layout,
        2,
        steps=PLANNED_STEPS,
        warmup=0,
        state_file=str(state_file),
        on_step=lambda _, seconds: reported.append(seconds),
        should_stop=lambda: len(reported) >= 3,
    )
    with np.load(state_file) as saved:
        state = dict(saved)
    return layout, result, state, reported


def test_two_processes_report_the_single_process_memory_and_collectives(two_processes):
    layout, result, _, _ = two_processes
    single = time_layout(layout, steps=1, warmup=0)
    assert (result.processes, result.devices_per_process, result.devices) == (2, 4, 8)
    assert (single.processes, single.devices_per_process) == (1, 8)
    assert result.memory == single.memory
    assert result.collectives == single.collectives
    assert result.collectives["all-reduce"]["count"] > 0
    assert result.activations == single.activations
    assert result.sources == single.sources


def test_a_stopped_two_process_run_keeps_every_figure_of_the_steps_it_ran(two_processes):
    """Issue 45: Stop killed the workers and kept only process 0's median, p10 and p90. Now the workers stop after
    the step under way, all alike, and return their whole result: compile time, memory and collectives (above)."""
    _, result, _, reported = two_processes
    ran = len(result.step_s.samples)
    assert result.stopped and result.planned_steps == PLANNED_STEPS
    assert 3 <= ran < PLANNED_STEPS, ran
    assert list(result.step_s.samples) == reported  # the steps process 0 reported as they ran, every one
    assert result.step_s.median == float(np.median(reported))
    assert result.compile_s > 0
    assert result.stopped_note() == f"Stopped after {ran} of {PLANNED_STEPS} steps: every figure here is of the {ran} steps that ran."


def test_parameters_after_the_steps_run_match_the_single_process_run(two_processes):
    """Parameters, and Adam's moments: its first steps move each parameter by about the
    learning rate times the gradient's sign, so the moments are what reflect the gradients' values.
    The run was stopped: its state is that of exactly the steps it reports, in both processes."""
    layout, result, saved, _ = two_processes
    ran = len(result.step_s.samples)
    expected = {name: np.asarray(value) for name, value in state_arrays(timed_run(layout, steps=ran, warmup=0).state).items()}
    assert set(saved) == set(expected)
    assert len([name for name in expected if name.startswith("params/")]) == 4
    assert len([name for name in expected if "/mu/" in name]) == len([name for name in expected if "/nu/" in name]) == 4
    for name, value in expected.items():
        # gloo and one process sum the gradients in different orders: float32 rounding, scaled to the array. Up to
        # 1e-5 of the array's largest value (about 80 ulps, three Adam steps of rounding: 4.6e-6 seen at the suite's
        # lowest CPU code-generation effort, see conftest.py); a gradient not summed over both processes is off by half.
        np.testing.assert_allclose(saved[name], value, rtol=1e-5, atol=1e-5 * float(np.abs(value).max()), err_msg=name)
    # the steps moved every parameter: the comparison is not of initial values
    initial = state_arrays(timed_run(layout, steps=1, warmup=0).state)
    assert not np.allclose(np.asarray(initial["params/LogicalDotReluDot_0/W2"]), saved["params/LogicalDotReluDot_0/W2"])


@pytest.fixture
def small_layout_file(seed_dict, tmp_path):
    path = tmp_path / "small-2x4.json"
    path.write_text(json.dumps(small_layout(seed_dict).to_dict()))
    return path


def test_joining_a_run_from_the_command_line_prints_once(small_layout_file):
    """What every host of a multi-host run does, here with two processes on loopback."""
    port = workers.free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    hosts = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "explorer",
                "--devices",
                "4",
                "time",
                str(small_layout_file),
                "--steps",
                "2",
                "--json",
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    (out0, err0), (out1, err1) = [host.communicate(timeout=300) for host in hosts]
    assert [host.returncode for host in hosts] == [0, 0], err0 + err1
    result = json.loads(out0)
    assert (result["processes"], result["devices_per_process"], result["devices"]) == (2, 4, 8)
    assert len(result["step_s"]["samples"]) == 2 and out1 == ""


@pytest.mark.parametrize(
    "args,message",
    [
        (["--processes", "3"], "error: --processes: 3 does not divide the mesh's 8 devices evenly"),
        (["--num-processes", "2"], "error: --num-processes: 2 joins a multi-host run: give --coordinator HOST:PORT too"),
        (["--coordinator", "10.0.0.1"], "error: --coordinator: '10.0.0.1' needs --num-processes and --process-id too"),
        (["--coordinator", "nowhere", "--num-processes", "2", "--process-id", "0"], "error: --coordinator: 'nowhere' is not HOST:PORT"),
        (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"], "error: --process-id: 2 must be between 0 and 1"),
        (["--processes", "2", "--coordinator", "127.0.0.1:1"], "error: --coordinator: '127.0.0.1:1' needs --num-processes"),
    ],
)
def test_distributed_arguments_are_checked_before_anything_starts(small_layout_file, capsys, args, message):
    from explorer.__main__ import main

    assert main(["time", str(small_layout_file), *args]) == 2
    assert capsys.readouterr().err.startswith(message)


def wait_until_timing(process: subprocess.Popen) -> None:
    """Read the command's progress on stderr until it says it is timing (fails if it ends first)."""
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("timing..."):
            return
    pytest.fail(f"the run ended before timing: {''.join(lines)}")


def test_a_joined_process_ends_on_sigterm(small_layout_file):
    """JAX's preemption service would catch SIGTERM (to checkpoint at a sync point) and time on: a process
    of a multi-host run, stopped by its scheduler or ``kill``, must end."""
    import signal
    import time

    command = [sys.executable, "-m", "explorer", "--devices", "8", "time", str(small_layout_file), "--steps", "10000"]
    joined = command + ["--coordinator", f"127.0.0.1:{workers.free_port()}", "--num-processes", "1", "--process-id", "0"]
    process = subprocess.Popen(
        joined, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}
    )
    try:
        wait_until_timing(process)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        process.communicate(timeout=60)
        assert process.returncode == -signal.SIGTERM, time.monotonic() - sent
    finally:
        process.kill()
        process.wait()


def test_a_stopped_process_of_a_joined_run_ends_and_so_do_the_others(small_layout_file):
    """Ctrl-C on one host of a multi-host run: it leaves at once (JAX's exit handler would wait at the shutdown
    barrier for the others, who wait in a collective for it: 42 s to over 150 s before), and the others end on
    their next collective with one line naming what happened, not a traceback."""
    import signal

    port = workers.free_port()
    hosts = [
        subprocess.Popen(
            [sys.executable, "-m", "explorer", "--devices", "4", "time", str(small_layout_file), "--steps", "10000"]
            + ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        for i in range(2)
    ]
    try:
        wait_until_timing(hosts[0])
        hosts[1].send_signal(signal.SIGINT)
        (_, err1), (_, err0) = [host.communicate(timeout=60) for host in (hosts[1], hosts[0])]
        assert hosts[1].returncode == 130 and "interrupted: stopped" in err1, err1[-2000:]
        assert hosts[0].returncode == 2, err0[-2000:]
        assert err0.strip().splitlines()[-1].startswith("error: process 0 of 2: another process of the run is gone (")
        assert "Traceback" not in err0 + err1
    finally:
        for host in hosts:
            host.kill()
            host.wait()
