"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles]
    python -m explorer time LAYOUT.json [--steps N] [--json]
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
    return 0


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
    from explorer.layout import load_layout_file
    from explorer.text import timing_text
    from explorer.timing import time_layout

    layout = load_layout_file(args.layout)
    progress = None if args.json else (lambda phase: print(f"{phase}...", file=sys.stderr))
    result = time_layout(layout, steps=args.steps, warmup=args.warmup, on_phase=progress)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(timing_text(result))
    return 0


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
