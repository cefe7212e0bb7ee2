"""The ``time`` command: a layout's train step timed here, in local processes, or as one process of a run across
machines (``--coordinator``), its figures printed as ``explorer time`` prints them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from explorer.layout import load_layout_argument


def _stoppable_by_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt in this process, whatever it inherited.

    A process started with SIGINT ignored (a background job of a non-interactive shell, as a test suite
    run in the background starts its children) keeps it ignored, and Python then installs no handler:
    a Ctrl-C or ``kill -INT`` did nothing, and a timing across processes ran on. ``execute``'s handler
    ends every worker on KeyboardInterrupt.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def time_command(args: argparse.Namespace) -> int:
    from explorer.errors import ExplorerError
    from explorer.text import timing_text

    _stoppable_by_ctrl_c()

    joining = args.coordinator is not None
    if not joining and args.num_processes is not None:
        raise ExplorerError("--num-processes", args.num_processes, "joins a multi-host run: give --coordinator HOST:PORT too")
    if not joining and args.process_id is not None:
        raise ExplorerError("--process-id", args.process_id, "joins a multi-host run: give --coordinator HOST:PORT too")
    if joining and (args.num_processes is None or args.process_id is None):
        raise ExplorerError("--coordinator", args.coordinator, "needs --num-processes and --process-id too")
    if joining and args.processes != 1:
        raise ExplorerError("--processes", args.processes, "starts local processes; it cannot be combined with --coordinator")
    progress = None if args.json else (lambda phase: print(f"{phase}...", file=sys.stderr))
    if joining:
        result = _time_joined(args, progress)
        if result is None:
            return 0
    elif args.processes != 1:
        from explorer.timing.workers import time_local_processes

        result = time_local_processes(
            load_layout_argument(args.layout),
            args.processes,
            steps=args.steps,
            warmup=args.warmup,
            on_phase=progress,
            stall_timeout_s=args.stall_timeout,
            join_timeout_s=args.join_timeout,
        )
    else:
        from explorer.timing.timing import time_layout

        result = time_layout(load_layout_argument(args.layout), steps=args.steps, warmup=args.warmup, on_phase=progress)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(timing_text(result))
    return 0


def _time_joined(args: argparse.Namespace, progress):
    """Join the run, time, and return the result in process 0 (None in the others)."""
    import jax

    from explorer.timing.distributed import check_join_arguments, join, parse_coordinator, reserve_stdout, time_joined

    layout = load_layout_argument(args.layout)
    check_join_arguments(args.coordinator, args.num_processes, args.process_id)
    host, port = parse_coordinator(args.coordinator)
    local = host in ("127.0.0.1", "localhost", "[::1]")
    reserve_stdout()
    join(
        args.coordinator,
        args.num_processes,
        args.process_id,
        join_timeout_s=args.join_timeout,
        bind_address=f"{host}:{port}" if local else None,
    )
    lead = jax.process_index() == 0
    try:
        result = time_joined(layout, args.steps, args.warmup, on_phase=progress if lead else None)
    except KeyboardInterrupt:
        _leave_the_run(130, "interrupted: stopped; this process left the run, and the others end when their next collective finds it gone")
    except jax.errors.JaxRuntimeError as error:  # a collective whose peer is gone: stopped, killed or crashed
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        _leave_the_run(2, f"error: process {args.process_id} of {args.num_processes}: another process of the run is gone ({reason})")
    jax.distributed.shutdown()
    return result if lead else None


def _leave_the_run(code: int, message: str) -> None:
    """End this process of a joined run now, skipping JAX's exit handler.

    At exit JAX shuts the distributed client down, which waits at a barrier for every process; the
    others wait in a collective for this one, so a stopped process hung there until the heartbeat or the
    barrier timed out (42 s to over 150 s measured). Nothing is left to write but the message.
    """
    print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
