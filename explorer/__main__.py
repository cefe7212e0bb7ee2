"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles]
    python -m explorer time LAYOUT.json [--steps N] [--json]
    python -m explorer compile LAYOUT.json --target NAME [--json]
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
    analyze.add_argument("--tiles", action="store_true", help="include the block each device holds")
    timing = commands.add_parser("time", help="compile and time the jitted train step on this process's devices")
    timing.add_argument("layout", help="a layout JSON file")
    timing.add_argument("--steps", type=int, default=20, help="timed steps after warm-up (default 20)")
    timing.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    timing.add_argument("--json", action="store_true", help="print the result as JSON")
    compile_ = commands.add_parser("compile", help="compile the train step for a TPU slice (no TPU needed): memory, collectives, roofline")
    compile_.add_argument("layout", help="a layout JSON file")
    compile_.add_argument("--target", required=True, help="a Cloud TPU type (v5p-128, v5litepod-16) or libtpu topology (v5p:4x4x4)")
    compile_.add_argument("--json", action="store_true", help="print the result as JSON")
    compile_.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # the worker the others spawn
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
        if args.command == "compile":
            return _compile(args)
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


def _compile(args: argparse.Namespace) -> int:
    from explorer.layout import load_layout_file
    from explorer.targets import parse_target

    layout, target = load_layout_file(args.layout), parse_target(args.target)
    if args.in_process:
        from explorer.target_compile import STAGE_PREFIX, compile_for_target

        result = compile_for_target(layout, target, on_stage=lambda stage: print(STAGE_PREFIX + stage, file=sys.stderr, flush=True))
        cached = False
    else:
        from explorer.target_compile import compile_target

        shown = [None]

        def progress(stage: str, elapsed: float) -> None:
            if stage != shown[0] and not args.json:
                print(f"{stage}... ({elapsed:.1f} s)", file=sys.stderr)
                shown[0] = stage

        result, cached = compile_target(layout, target, on_stage=progress)
    if args.json:
        json.dump(result | {"cached": cached}, sys.stdout, indent=2)
        print()
    else:
        from explorer.text import target_text

        print(target_text(result, cached))
    return 0


if __name__ == "__main__":
    sys.exit(main())
