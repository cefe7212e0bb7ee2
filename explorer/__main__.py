"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles] [--strict] [--array PATH [--dims R,C] [--block DIM=K]]
    python -m explorer time LAYOUT.json [--steps N] [--json]
    python -m explorer url LAYOUT.json

``-`` reads the layout from standard input. Bad input exits with status 2 and one
message on stderr, never a traceback; ``analyze --strict`` exits with 1 when an
error-level finding stands (a dimension the mesh does not divide), for CI.

Modules are imported where a command needs them: ``analyze --json`` loads neither
pandas nor plotly.
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
    analyze.add_argument("layout", help="a layout JSON file, or - for standard input")
    analyze.add_argument("--json", action="store_true", help="print the report as JSON")
    analyze.add_argument("--tiles", action="store_true", help="include the block each device holds")
    analyze.add_argument("--strict", action="store_true", help="exit with 1 when an error-level finding stands")
    analyze.add_argument("--array", metavar="PATH", help="draw one array's device grid (e.g. params/.../kernel)")
    analyze.add_argument("--dims", metavar="R,C", help="with --array: the dimensions drawn as rows and columns")
    analyze.add_argument(
        "--block", metavar="DIM=K", action="append", default=[], help="with --array: cut dimension DIM at block K (default 0)"
    )
    timing = commands.add_parser("time", help="compile and time the jitted train step on this process's devices")
    timing.add_argument("layout", help="a layout JSON file, or - for standard input")
    timing.add_argument("--steps", type=int, default=20, help="timed steps after warm-up (default 20)")
    timing.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    timing.add_argument("--json", action="store_true", help="print the result as JSON")
    url = commands.add_parser("url", help="print the layout as a link's query string")
    url.add_argument("layout", help="a layout JSON file, or - for standard input")
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


def _load(path: str):
    from explorer.layout import load_layout_file, load_layout_json

    return load_layout_json(sys.stdin.read()) if path == "-" else load_layout_file(path)


def _analyze(args: argparse.Namespace) -> int:
    from explorer.analysis import analyze, array_to_dict, report_to_dict

    report = analyze(_load(args.layout))
    if args.array is not None:
        info = _array(report, args.array)
        if args.json:
            print(json.dumps(array_to_dict(info, report, include_tiles=True), indent=2))
        else:
            print(_array_text(report, info, args))
    elif args.json:
        print(json.dumps(report_to_dict(report, include_tiles=args.tiles), indent=2))  # dumps: a third faster than dump
    else:
        from explorer.text import report_table

        print(report_table(report, include_tiles=args.tiles))
    errors = [finding for finding in report.warnings if finding.level == "error"]
    if args.strict and errors:
        print(f"strict: {len(errors)} error-level finding(s), e.g. {errors[0].message}", file=sys.stderr)
        return 1
    return 0


def _array(report, path: str):
    from explorer.errors import ExplorerError

    try:
        return report.array(path)
    except KeyError:
        params = [a.path for a in report.arrays if a.kind == "param"][:3]
        raise ExplorerError("--array", path, f"is not an array of this layout; its parameters include {params}") from None


def _array_text(report, info, args: argparse.Namespace) -> str:
    from explorer.errors import ExplorerError
    from explorer.text import grid_text
    from explorer.tiles import default_dims

    ndim = len(info.shape)
    dims = default_dims(info.shape, info.spec, report.mesh)
    if args.dims is not None:
        parts = args.dims.split(",")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) < ndim for p in parts) or parts[0].strip() == parts[1].strip():
            raise ExplorerError("--dims", args.dims, f"is not two different dimensions of a {ndim}-D array, like 0,1")
        dims = (int(parts[0]), int(parts[1]))
    index = {}
    for item in args.block:
        dim, _, block = item.partition("=")
        if not (dim.strip().isdigit() and block.strip().isdigit() and int(dim) < ndim and int(dim) not in dims):
            raise ExplorerError(
                "--block", item, f"is not DIM=K with DIM a dimension of the {ndim}-D array other than the drawn {dims}"
            )
        index[int(dim)] = int(block)
    header = (
        f"{info.path}: shape {tuple(info.shape)} {info.dtype}, spec {info.spec_text()}, "
        f"shard {tuple(info.shard_shape)} on each device, each block on {info.replication} device(s)"
    )
    return header + "\n" + grid_text(info.shape, info.spec, report.mesh, dims=dims, index=index)


def _url(args: argparse.Namespace) -> int:
    from explorer.share import layout_to_query

    print(layout_to_query(_load(args.layout)))
    return 0


def _time(args: argparse.Namespace) -> int:
    from explorer.text import timing_text
    from explorer.timing import time_layout

    layout = _load(args.layout)
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
