"""Time a layout across N local processes: start the workers, relay their progress, end them all.

Each worker is ``python -m explorer.timing.distributed`` (one process of a ``jax.distributed``
run, its share of the mesh's devices as simulated CPU devices), bound to 127.0.0.1 on
a free port. Worker 0's events (JSON lines on its stdout) drive ``on_phase`` and
``on_step`` in the caller's thread; its result is the run's result.

Faults end the whole run with an ExplorerError naming the process, its state and its
last lines on stderr, and no worker outlives the run (each has its own process group,
killed with SIGTERM and, after ``KILL_GRACE_S``, SIGKILL; should this process die
first, each worker dies with it: ``children.start``). Bounds:

- a worker that exits before the result (fails to start, crashes, is killed): the run
  ends within ``POLL_S + KILL_GRACE_S`` (about 2 s) of its exit;
- a worker that hangs: when no worker has reported anything for ``stall_timeout_s``
  (default 300 s), the run ends within ``KILL_GRACE_S`` after that. (A worker that
  never joins makes JAX abort the others after ``JOIN_TIMEOUT_S``; a frozen one, after
  ``HEARTBEAT_TIMEOUT_S``: both are exits, so usually sooner.)
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from explorer import children
from explorer.hardware.devices import MAX_CPU_DEVICES, PROJECT_ROOT
from explorer.timing.distributed import HEARTBEAT_TIMEOUT_S, JOIN_TIMEOUT_S
from explorer.errors import ExplorerError
from explorer.layout import Layout

if TYPE_CHECKING:  # imported where a result arrives: `explorer time --help` and the CLI's parser need no JAX or Flax
    from explorer.timing.timing import TimingResult

POLL_S = 0.1
KILL_GRACE_S = 2.0
STALL_TIMEOUT_S = 300.0
EXIT_AFTER_RESULT_S = 30.0  # workers shut jax.distributed down after the result; killed if slower
TAIL_LINES = 200
MAX_PROCESSES = 64


@dataclasses.dataclass
class _Worker:
    index: int
    process: subprocess.Popen
    tail: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    state: str = "starting"
    state_since: float = dataclasses.field(default_factory=time.monotonic)
    exit_code: int | None = None
    readers: list[threading.Thread] = dataclasses.field(default_factory=list)


def split_devices(devices: int, processes: int) -> int:
    """Devices per process for ``devices`` split evenly over ``processes``, or ExplorerError."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise ExplorerError("--processes", processes, f"must be between 1 and {MAX_PROCESSES}")
    if devices % processes:
        raise ExplorerError("--processes", processes, f"does not divide the mesh's {devices} devices evenly")
    per_process = devices // processes
    if per_process > MAX_CPU_DEVICES:
        raise ExplorerError("--processes", processes, f"would give each process {per_process} devices; at most {MAX_CPU_DEVICES}")
    return per_process


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def time_local_processes(
    layout: Layout,
    processes: int,
    steps: int = 20,
    warmup: int = 2,
    on_step: Callable[[int, float], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    stall_timeout_s: float = STALL_TIMEOUT_S,
    join_timeout_s: int = JOIN_TIMEOUT_S,
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
    state_file: str | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> TimingResult:
    """Time ``layout`` on ``processes`` local processes sharing its mesh's devices evenly.

    ``state_file``: the parameters and optimizer state after the last step, as ``.npz`` (see ``distributed``).
    ``should_stop``: looked at every ``POLL_S``; once true, the workers are asked to stop after their current step
    (a stop file they all agree on, ``distributed.agreed_stop``) and return their whole result for the steps that ran,
    as one process does: nothing is killed.
    """
    if not 1 <= steps <= 10_000:
        raise ExplorerError("steps", steps, "must be between 1 and 10,000")
    per_process = split_devices(layout.mesh.size, processes)
    phase = on_phase or (lambda _: None)
    with tempfile.TemporaryDirectory(prefix="explorer-workers-") as folder:
        layout_file = Path(folder) / "layout.json"
        layout_file.write_text(json.dumps(layout.to_dict()))
        port = free_port()
        common = [
            "--layout",
            str(layout_file),
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            str(processes),
            "--devices",
            str(per_process),
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
            "--join-timeout",
            str(join_timeout_s),
            "--heartbeat-timeout",
            str(heartbeat_timeout_s),
        ] + (["--save-state", str(state_file)] if state_file else [])
        stop_file = Path(folder) / "stop" if should_stop else None
        if stop_file:
            common += ["--stop-file", str(stop_file)]
        phase(f"starting {processes} processes × {per_process} devices")
        events: queue.Queue = queue.Queue()
        workers: list[_Worker] = []
        try:
            for index in range(processes):
                workers.append(_start(index, common + ["--process-id", str(index)], events))
            return _supervise(workers, events, steps, on_step, phase, stall_timeout_s, _asker(should_stop, stop_file))
        finally:
            _end_all(workers)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"  # simulated CPU devices, whatever accelerators this machine has
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("EXPLORER_CPU_DEVICES", None)
    return env


def _start(index: int, args: list[str], events: queue.Queue) -> _Worker:
    process = children.start(
        [sys.executable, "-m", "explorer.timing.distributed", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(),
        cwd=PROJECT_ROOT,
    )
    worker = _Worker(index, process)
    worker.readers = [
        threading.Thread(target=_read_events, args=(worker, events), daemon=True, name=f"worker-{index}-events"),
        threading.Thread(target=_read_stderr, args=(worker,), daemon=True, name=f"worker-{index}-stderr"),
    ]
    for reader in worker.readers:
        reader.start()
    return worker


def _read_events(worker: _Worker, events: queue.Queue) -> None:
    """Worker's stdout: one JSON event per line; the stream's end means the process ended."""
    for raw in worker.process.stdout:
        try:
            event = json.loads(raw)
        except ValueError:
            worker.tail.append(raw.decode(errors="replace").rstrip())
            continue
        if isinstance(event, dict) and "event" in event:
            events.put((worker, event))
    events.put((worker, {"event": "exit", "code": worker.process.wait()}))


def _read_stderr(worker: _Worker) -> None:
    for raw in worker.process.stderr:
        line = raw.decode(errors="replace").rstrip()
        if line:
            worker.tail.append(line)


def _asker(should_stop: Callable[[], bool] | None, stop_file: Path | None) -> Callable[[], None]:
    """Writes the stop file the first time ``should_stop()`` is true (called every ``POLL_S``)."""

    def ask() -> None:
        if should_stop is not None and stop_file is not None and not stop_file.exists() and should_stop():
            stop_file.touch()

    return ask


def _supervise(workers, events, steps, on_step, phase, stall_timeout_s, ask_to_stop) -> TimingResult:
    result: TimingResult | None = None
    last_news = time.monotonic()
    joined = 0
    while True:
        ask_to_stop()
        try:
            worker, event = events.get(timeout=POLL_S)
        except queue.Empty:
            if result is not None and time.monotonic() - last_news > EXIT_AFTER_RESULT_S:
                return result  # the result is in; a worker slow to shut down is ended by the caller
            if time.monotonic() - last_news > stall_timeout_s:
                stalled = min(workers, key=lambda w: w.state_since)
                _fail(workers, stalled, f"made no progress for {stall_timeout_s:.0f} s", f"last reported: {stalled.state}")
            continue
        last_news = time.monotonic()
        worker.state_since = last_news
        kind = event["event"]
        if kind == "exit":
            worker.exit_code = event["code"]
            if result is None and (worker.exit_code != 0 or worker.index == 0):
                _fail(workers, worker, _describe_exit(worker.exit_code), f"while {worker.state}")
            if result is not None and all(w.exit_code is not None for w in workers):
                return result
        elif kind == "error":
            _end_all(workers)
            raise ExplorerError(event["field"], event["value"], event["problem"])
        elif kind == "joined":
            worker.state = "joined"
            joined += 1
            if joined == len(workers):
                phase(f"joined: {len(workers)} processes × {event['devices']} devices")
        elif kind == "phase":
            worker.state = event["phase"]
            if worker.index == 0:
                phase(event["phase"])
        elif kind == "step":
            worker.state = f"timing (step {event['index'] + 1} of {steps})"
            if worker.index == 0 and on_step:
                on_step(event["index"], event["seconds"])
        elif kind == "result" and worker.index == 0:
            from explorer.timing.timing import TimingResult

            result = TimingResult.from_dict(event["result"])
            worker.state = "done"


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return "exited without a result" if code == 0 else f"exited with status {code}"


def _fail(workers: list[_Worker], culprit: _Worker, what: str, context: str) -> None:
    """End every worker, then raise the error naming ``culprit`` with its last lines on stderr."""
    _end_all(workers)
    for reader in culprit.readers:
        reader.join(timeout=1.0)
    said = what_it_said(list(culprit.tail))
    others = "; ".join(f"process {w.index}: {w.state}" for w in workers if w is not culprit)
    raise ExplorerError(
        f"process {culprit.index} of {len(workers)}",
        what,
        f"{context}, so the run was stopped and every worker ended. It last said: {said}"
        + (f". Others when stopped: {others}" if others else ""),
    )


_ABSL = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ [^\]]+\] ")
_NOISE = re.compile(r"^\s+@\s|^\*\*\* Check failure|^\[Gloo\] Rank \d+ is connected")


def what_it_said(lines: list[str], limit: int = 400) -> str:
    """The telling part of a worker's stderr: its last fatal (F) log record, else the exception of a
    Python traceback (its last lines), else its last error (E) record, else its last lines that
    are not stack frames or gloo's connection notices.

    A log record runs on over the following lines until the next record (JAX's messages
    name the failing task on a line of its own).
    """
    records: list[tuple[str, str]] = []
    for line in lines:
        match = _ABSL.match(line)
        if match:
            records.append((match.group(1), line[match.end() :]))
        elif line.startswith("Traceback (most recent call last)"):
            records.append(("T", ""))
        elif records and records[-1][0] in "FE" and line.strip() and not _NOISE.match(line):
            records[-1] = (records[-1][0], f"{records[-1][1]} {line.strip()}")
    fatal = [text for found, text in records if found == "F"]
    errors = [text for found, text in records if found == "E"]
    if fatal:
        return _clip(fatal[-1], limit)
    if errors and not any(found == "T" for found, _ in records):
        return _clip(errors[-1], limit)
    kept = [line for line in lines if not _NOISE.match(line)]
    return _clip(" | ".join(kept[-3:]), limit) if kept else "nothing"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _end_all(workers: list[_Worker]) -> None:
    """SIGTERM every running worker's process group, then SIGKILL what is left after the grace period.

    JAX's preemption handler would swallow SIGTERM; the workers turn it off, and SIGKILL
    follows anyway (a stopped process ignores everything else).
    """
    children.stop(*(worker.process for worker in workers), grace_s=KILL_GRACE_S)
