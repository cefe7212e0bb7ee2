"""``python -m explorer``: analyse a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles]

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
    args = parser.parse_args(argv)

    from explorer.errors import ExplorerError

    try:
        devices.configure(args.devices)
        if args.command == "analyze":
            return _analyze(args)
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


if __name__ == "__main__":
    sys.exit(main())
