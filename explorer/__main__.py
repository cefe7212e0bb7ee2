"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles]
    python -m explorer time LAYOUT.json [--steps N] [--json] [--processes N]
    python -m explorer time LAYOUT.json --coordinator HOST:PORT --num-processes N --process-id I
    python -m explorer url LAYOUT.json
    python -m explorer op SPEC.json [--json] [--time STEPS] [--warmup N]

Bad input exits with status 2 and one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from explorer import devices


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer", description="Explore JAX/Flax partition layouts.")
    parser.add_argument("--devices", type=int, default=None, help="simulated CPU devices (default 8, or EXPLORER_CPU_DEVICES)")
    commands = parser.add_subparsers(dest="command", required=True)
    analyze = commands.add_parser("analyze", help="how every array of the train step is sharded")
    analyze.add_argument("layout", help="a layout JSON file")
    analyze.add_argument("--json", action="store_true", help="print the report as JSON")
    analyze.add_argument("--tiles", action="store_true", help="include the block each device holds")
    timing = commands.add_parser("time", help="compile and time the jitted train step on this process's devices")
    timing.add_argument("layout", help="a layout JSON file")
    timing.add_argument("--steps", type=int, default=20, help="timed steps after warm-up (default 20)")
    timing.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    timing.add_argument("--json", action="store_true", help="print the result as JSON")
    _distributed_arguments(timing)
    url = commands.add_parser("url", help="print the layout as a link's query string")
    url.add_argument("layout", help="a layout JSON file")
    op = commands.add_parser("op", help="arrays on a mesh and an expression: the shardings XLA chooses, collectives, timing")
    op.add_argument("spec", help="an op spec JSON file (mesh, arrays, expr, out_spec)")
    op.add_argument("--json", action="store_true", help="print the result as JSON")
    op.add_argument("--time", type=int, default=None, metavar="STEPS", help="also time STEPS calls, sharded and on one device")
    op.add_argument("--warmup", type=int, default=1, help="untimed warm-up calls of each before timing (default 1)")
    args = parser.parse_args(argv)

    from explorer.errors import ExplorerError

    try:
        devices.configure(args.devices)
        if args.command == "analyze":
            return _analyze(args)
        if args.command == "time":
            return _time(args)
        if args.command == "url":
            return _url(args)
        if args.command == "op":
            return _op(args)
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: not an error
        sys.stderr.close()
    except KeyboardInterrupt:
        print("interrupted: stopped (every worker process too)", file=sys.stderr)
        return 130
    return 0


def _distributed_arguments(timing: argparse.ArgumentParser) -> None:
    from explorer.distributed import JOIN_TIMEOUT_S
    from explorer.workers import STALL_TIMEOUT_S

    local = timing.add_argument_group("local processes")
    local.add_argument("--processes", type=int, default=1,
                       help="time across N local processes with jax.distributed, the mesh's devices split evenly (default 1)")
    local.add_argument("--stall-timeout", type=float, default=STALL_TIMEOUT_S,
                       help=f"end the run when no worker reports progress for this many seconds (default {STALL_TIMEOUT_S:.0f})")
    hosts = timing.add_argument_group("joining a multi-host run (run the same command on every host)")
    hosts.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address and a free port, the same on every host")
    hosts.add_argument("--num-processes", type=int, help="processes in the run")
    hosts.add_argument("--process-id", type=int, help="this process's id, 0 .. N-1; process 0 prints the result")
    hosts.add_argument("--join-timeout", type=int, default=JOIN_TIMEOUT_S,
                       help=f"seconds to wait for every process to join, here or with --processes (default {JOIN_TIMEOUT_S})")


def _analyze(args: argparse.Namespace) -> int:
    from explorer.analysis import analyze, report_to_dict
    from explorer.layout import load_layout_file
    from explorer.text import report_table

    report = analyze(load_layout_file(args.layout))
    if args.json:
        json.dump(report_to_dict(report, include_tiles=args.tiles), sys.stdout, indent=2)
        print()
    else:
        print(report_table(report, include_tiles=args.tiles))
    return 0


def _url(args: argparse.Namespace) -> int:
    from explorer.layout import load_layout_file
    from explorer.share import layout_to_query

    print(layout_to_query(load_layout_file(args.layout)))
    return 0


def _time(args: argparse.Namespace) -> int:
    from explorer.errors import ExplorerError
    from explorer.layout import load_layout_file
    from explorer.text import timing_text

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
        from explorer.workers import time_local_processes

        result = time_local_processes(
            load_layout_file(args.layout), args.processes, steps=args.steps, warmup=args.warmup,
            on_phase=progress, stall_timeout_s=args.stall_timeout, join_timeout_s=args.join_timeout,
        )
    else:
        from explorer.timing import time_layout

        result = time_layout(load_layout_file(args.layout), steps=args.steps, warmup=args.warmup, on_phase=progress)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(timing_text(result))
    return 0


def _time_joined(args: argparse.Namespace, progress):
    """Join the run, time, and return the result in process 0 (None in the others)."""
    import jax

    from explorer.distributed import check_join_arguments, join, parse_coordinator, reserve_stdout, time_joined
    from explorer.layout import load_layout_file

    layout = load_layout_file(args.layout)
    check_join_arguments(args.coordinator, args.num_processes, args.process_id)
    host, port = parse_coordinator(args.coordinator)
    local = host in ("127.0.0.1", "localhost", "[::1]")
    reserve_stdout()
    join(args.coordinator, args.num_processes, args.process_id, join_timeout_s=args.join_timeout,
         bind_address=f"{host}:{port}" if local else None)
    lead = jax.process_index() == 0
    result = time_joined(layout, args.steps, args.warmup, on_phase=progress if lead else None)
    jax.distributed.shutdown()
    return result if lead else None

def _op(args: argparse.Namespace) -> int:
    from explorer.ops import analyse_op, load_op_file, time_op
    from explorer.text import op_text

    spec = load_op_file(args.spec)
    analysis = analyse_op(spec)
    timing = None
    if args.time is not None:
        progress = None if args.json else (lambda phase: print(f"{phase}...", file=sys.stderr))
        timing = time_op(spec, steps=args.time, warmup=args.warmup, on_phase=progress)
    if args.json:
        json.dump(analysis.to_dict() | {"timing": None if timing is None else timing.to_dict()}, sys.stdout, indent=2)
        print()
    else:
        print(op_text(analysis, timing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
