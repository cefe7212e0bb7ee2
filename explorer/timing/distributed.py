"""One process of a multi-process timing: join the run with ``jax.distributed`` and time on the global mesh.

Every process runs the same program, as any multi-host JAX program does: it calls
``jax.distributed.initialize`` before anything starts a backend, then the same
``timing.timed_run`` as a single process, on a mesh of all processes' devices
(``jax.devices()`` is global once the run is joined). Inputs are placed with
``jax.make_array_from_process_local_data``; collectives between processes go
through the platform's own runtime (gloo on CPU, the default in jax 0.10).

``python -m explorer time LAYOUT --coordinator HOST:PORT ...`` calls ``join`` and
``time_joined`` directly; the local launcher (``workers.py``) runs this module as a
worker, which reports in JSON lines on stdout (see ``main``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any, Callable, TextIO

from explorer.errors import ExplorerError

JOIN_TIMEOUT_S = 120  # a process that has not joined by then makes the others give up (jax aborts them)
HEARTBEAT_TIMEOUT_S = 30  # a process silent this long is declared dead by the coordinator (the others abort)


def parse_coordinator(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port, or ExplorerError.

    >>> parse_coordinator("10.0.0.1:1234")
    ('10.0.0.1', 1234)
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ExplorerError("--coordinator", address, "is not HOST:PORT (e.g. 10.0.0.1:1234)")
    return host, int(port)


def check_join_arguments(coordinator: str, num_processes: int, process_id: int) -> None:
    """ExplorerError for arguments JAX would refuse with a traceback."""
    parse_coordinator(coordinator)
    if num_processes < 1:
        raise ExplorerError("--num-processes", num_processes, "must be at least 1")
    if not 0 <= process_id < num_processes:
        raise ExplorerError("--process-id", process_id, f"must be between 0 and {num_processes - 1} (--num-processes {num_processes})")


def reserve_stdout() -> TextIO:
    """Keep the real stdout for this program's own output and point fd 1 at stderr.

    gloo prints its connection notices on the C++ stdout; they must not end up in
    the JSON a user pipes somewhere, nor among a worker's events. Sets ``sys.stdout``
    to the reserved stream and returns it.
    """
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = stream
    return stream


def join(
    coordinator: str,
    num_processes: int,
    process_id: int,
    bind_address: str | None = None,
    join_timeout_s: int = JOIN_TIMEOUT_S,
    heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
) -> None:
    """``jax.distributed.initialize`` with checked arguments. Call before anything starts a JAX backend.

    ``bind_address`` is where process 0's coordinator listens; JAX's default is every
    interface (``[::]:PORT``), so a local run passes its loopback address. JAX's preemption
    service is turned off: it catches SIGTERM (to checkpoint at a sync point) and the process
    timed on; a timing has nothing to checkpoint, and a stopped process must end.
    """
    import jax

    check_join_arguments(coordinator, num_processes, process_id)
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(
        coordinator,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=bind_address,
        initialization_timeout=join_timeout_s,
        heartbeat_timeout_seconds=heartbeat_timeout_s,
    )


def time_joined(layout, steps: int, warmup: int, on_step=None, on_phase=None, state_file: str | None = None, stop_file: str | None = None):
    """Time ``layout`` on the mesh of every process's devices; every process calls this alike.

    The mesh must use every device of the run: a process without devices in it would
    have nothing to run. ``state_file``: process 0 saves the parameters and optimizer
    state after the last step there (``.npz``, keys from ``state_arrays``), gathered from every process.
    ``stop_file``: the run stops after the step during which this file appeared (``agreed_stop``),
    with every figure of the steps that ran.
    """
    import jax

    from explorer.timing.timing import timed_run

    size = layout.mesh.size
    if size != jax.device_count():
        raise ExplorerError(
            "mesh.shape",
            list(layout.mesh.shape),
            f"has {size} devices, and the {jax.process_count()} processes of this run have {jax.device_count()} "
            f"({jax.local_device_count()} each): a multi-process timing uses them all",
        )
    should_stop = agreed_stop(stop_file) if stop_file else None
    run = timed_run(layout, steps=steps, warmup=warmup, on_step=on_step, on_phase=on_phase, should_stop=should_stop)
    if state_file is not None:
        _save_state(run.state, state_file)
    return run.result


def agreed_stop(stop_file: str) -> Callable[[], bool]:
    """A ``should_stop`` every process of the run answers alike: whether ``stop_file`` exists, as process 0 sees it.

    Every process must run the same number of steps (each step's collectives wait for all of them), so
    process 0 looks for the file and broadcasts what it saw; the others take its answer. One small
    collective after each step, outside the timed region.
    """
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    def should_stop() -> bool:
        asked = jax.process_index() == 0 and os.path.exists(stop_file)
        return bool(multihost_utils.broadcast_one_to_all(np.int32(asked)))

    return should_stop


def state_arrays(state) -> dict[str, Any]:
    """The TrainState's parameters and optimizer state by path (``params/...``, ``opt_state/...``), unboxed."""
    import flax.linen as nn
    import jax

    tree = {"params": nn.meta.unbox(state.params), "opt_state": nn.meta.unbox(state.opt_state)}
    return {jax.tree_util.keystr(k, simple=True, separator="/"): v for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def _save_state(state, path: str) -> None:
    """Gather the state from every process (a collective: all call it); process 0 writes it."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(state_arrays(state), tiled=True)
    if jax.process_index() == 0:
        np.savez(path, **{name: np.asarray(value) for name, value in gathered.items()})


# --- a local worker: python -m explorer.timing.distributed ----------------------------------------------


def _events() -> Callable[..., None]:
    """A writer of JSON lines on the real stdout; everything else written to stdout goes to stderr.

    So the parent reads nothing but events on a worker's stdout.
    """
    stream = reserve_stdout()
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        with lock:
            stream.write(json.dumps({"event": event, **fields}, default=str) + "\n")

    return emit


def main(argv: list[str] | None = None) -> int:
    """A worker started by ``workers.py``: join, time, report in JSON lines.

    Events: ``{"event": "joined"}``, ``{"event": "phase", "phase": ...}``,
    ``{"event": "step", "index": i, "seconds": s}``, ``{"event": "result", "result": {...}}``
    (process 0) and ``{"event": "error", "field", "value", "problem"}`` (then exit 2).
    """
    parser = argparse.ArgumentParser(prog="python -m explorer.timing.distributed")
    parser.add_argument("--layout", required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True, help="CPU devices of this process")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--join-timeout", type=int, default=JOIN_TIMEOUT_S)
    parser.add_argument("--heartbeat-timeout", type=int, default=HEARTBEAT_TIMEOUT_S)
    parser.add_argument("--save-state", default=None, help="an .npz file for the state after the last step")
    parser.add_argument("--stop-file", default=None, help="stop after the step during which this file appears")
    args = parser.parse_args(argv)
    emit = _events()
    try:
        import jax

        from explorer.hardware import devices
        from explorer.layout import load_layout_file

        devices.configure(args.devices)
        layout = load_layout_file(args.layout)
        join(
            args.coordinator,
            args.num_processes,
            args.process_id,
            bind_address=args.coordinator,
            join_timeout_s=args.join_timeout,
            heartbeat_timeout_s=args.heartbeat_timeout,
        )
        emit("joined", devices=jax.local_device_count())
        result = time_joined(
            layout,
            args.steps,
            args.warmup,
            on_step=lambda index, seconds: emit("step", index=index, seconds=seconds),
            on_phase=lambda phase: emit("phase", phase=phase),
            state_file=args.save_state,
            stop_file=args.stop_file,
        )
        if jax.process_index() == 0:
            emit("result", result=result.to_dict())
        jax.distributed.shutdown()
    except ExplorerError as error:
        emit("error", field=error.field, value=error.value, problem=error.problem)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
