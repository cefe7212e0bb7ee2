"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles | --tiles-for GLOB]
    python -m explorer time LAYOUT.json [--steps N] [--json]
    python -m explorer url LAYOUT.json

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
    analyze.add_argument("--tiles", action="store_true", help="include the block each device holds, for every array")
    analyze.add_argument(
        "--tiles-for", metavar="GLOB", default=None,
        help="include the blocks only for arrays whose path matches GLOB (fnmatch, e.g. 'params/*kernel'); implies --tiles",
    )
    timing = commands.add_parser("time", help="compile and time the jitted train step on this process's devices")
    timing.add_argument("layout", help="a layout JSON file")
    timing.add_argument("--steps", type=int, default=20, help="timed steps after warm-up (default 20)")
    timing.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    timing.add_argument("--json", action="store_true", help="print the result as JSON")
    url = commands.add_parser("url", help="print the layout as a link's query string")
    url.add_argument("layout", help="a layout JSON file")
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
    tiles, pattern = args.tiles or args.tiles_for is not None, args.tiles_for or "*"
    if args.json:
        json.dump(report_to_dict(report, include_tiles=tiles, tiles_for=pattern), sys.stdout, indent=2)
        print()
    else:
        print(report_table(report, include_tiles=tiles, tiles_for=pattern))
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


if __name__ == "__main__":
    sys.exit(main())
