"""``python -m explorer`` (installed: ``partition-explorer``): analyze a layout file from the command line.

    python -m explorer analyze LAYOUT.json [--json] [--tiles | --tiles-for GLOB] [--strict] [--array PATH [--dims R,C] [--block DIM=K]]
    python -m explorer time LAYOUT.json [--steps N] [--json] [--processes N]
    python -m explorer time LAYOUT.json --coordinator HOST:PORT --num-processes N --process-id I
    python -m explorer compile LAYOUT.json --target NAME [--json] [--memory] [--levers]
    python -m explorer advise LAYOUT.json --target NAME [--json] [--compiles N] [--role NAME=ROLE] [--depth-shortcut auto|on|off] [--depth-option NAME] [--pipelines auto|on|off] [--rules]
    python -m explorer analyze|compile|advise --maxtext KEY=VALUE ... [--target NAME]   (a MaxText config, its own keys)
    python -m explorer compile --step MODULE:FACTORY --target NAME [--mesh AXIS=SIZE,...] [--option KEY=VALUE]   (your own step)
    python -m explorer url LAYOUT.json
    python -m explorer op SPEC.json [--json] [--time STEPS] [--warmup N]

``-`` reads the layout from standard input. Bad input exits with status 2 and one
message on stderr, never a traceback; ``analyze --strict`` exits with 1 when an
error-level finding stands (a sharding JAX would refuse), for CI.

Modules are imported where a command needs them, never at start-up: ``analyze --json``
loads neither pandas nor plotly, an analysis the trace's disk cache answers loads neither
Flax nor optax nor any model's code (only ``time``, ``compile`` and ``op`` do), and ``url``
does not even start JAX. Building the parser imports only light modules (for their defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from explorer.hardware import devices
from explorer.formats import clock, fit


INSTALLED_SCRIPT = "partition-explorer"  # pyproject.toml's [project.scripts] entry
COMMANDS_WITHOUT_JAX = frozenset({"url"})  # the rest configure the simulated devices before JAX starts
HEARTBEAT_S = 30.0  # a progress line that has not changed is said again this often (a compile can take minutes)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (the process's arguments when None) and run the command; its exit status."""
    return execute(parse_arguments(argv))


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=_program_name(), description="Explore JAX/Flax partition layouts.")
    parser.add_argument("--devices", type=int, default=None, help="simulated CPU devices (default 8, or EXPLORER_CPU_DEVICES)")
    commands = parser.add_subparsers(dest="command", required=True)
    analyze = commands.add_parser("analyze", help="how every array of the train step is sharded")
    analyze.add_argument("layout", nargs="?", help="a layout JSON file, or - for standard input (or --maxtext)")
    _maxtext_argument(analyze)
    analyze.add_argument("--json", action="store_true", help="print the report as JSON")
    analyze.add_argument("--tiles", action="store_true", help="include the block each device holds, for every array")
    analyze.add_argument(
        "--tiles-for",
        metavar="GLOB",
        default=None,
        help="include the blocks only for arrays whose path matches GLOB (fnmatch, e.g. 'params/*kernel'); implies --tiles",
    )
    analyze.add_argument("--strict", action="store_true", help="exit with 1 when an error-level finding stands")
    analyze.add_argument(
        "--values",
        nargs="?",
        const="",
        default=None,
        metavar="SEARCH",
        help="Explicit axes: every forward value with the sharding in its type, grouped by source line "
        "(only those matching SEARCH, e.g. 'attention reshard'); with --json, added as \"values\"",
    )
    analyze.add_argument(
        "--origins",
        nargs="?",
        const="",
        default=None,
        metavar="SEARCH",
        help="every value of the train step with its sharding after Shardy's propagation and where each mesh axis came "
        "from (an input, an output, a constraint's line), grouped by source line (only those matching SEARCH); with "
        '--json, added as "origins"',
    )
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
    _distributed_arguments(timing)
    compile_ = _target_command(
        commands,
        "compile",
        "compile the train step for a TPU slice or an NVIDIA GPU cluster (neither needed): memory, collectives, roofline",
        "a layout JSON file",
        sweep=True,
    )
    _step_arguments(compile_)
    compile_.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # the worker the others spawn
    compile_.add_argument(
        "--memory", action="store_true", help="what fills the memory at the peak: the buffers live there by kind, line and layer (a table)"
    )
    compile_.add_argument(
        "--levers",
        action="store_true",
        help="with --memory: compile each lever that shrinks the peak's largest contributors (remat, microbatches, FSDP, a "
        'smaller batch...) and show its new peak; with --json, added as "levers"',
    )
    _pool_arguments(compile_)
    advise = _target_command(
        commands,
        "advise",
        "rank meshes and rules for a TPU slice or GPU cluster: stage 1 estimates, stage 2 XLA compiles",
        "a layout JSON file: its model, and its mesh and rules as one candidate",
    )
    advise.add_argument("--compiles", type=int, default=4, help="shortlisted candidates to compile for the target (default 4)")
    advise.add_argument("--role", action="append", default=[], metavar="NAME=ROLE", help="a logical name's role (repeatable)")
    advise.add_argument(
        "--depth-shortcut",
        choices=("auto", "on", "off"),
        default="auto",
        help="compile each candidate at depths 2 and 4, extrapolate to the model's depth, then compile the best in full "
        "(auto: for models whose layers are not scanned, where it saves time)",
    )
    advise.add_argument(
        "--depth-option", metavar="NAME", default=None, help="the model option that sets its depth (default: a known name, e.g. layers)"
    )
    advise.add_argument(
        "--pipelines",
        choices=("auto", "on", "off"),
        default="auto",
        help="search pipelines of the built-in transformer (stage counts, microbatches; auto: on several slices)",
    )
    advise.add_argument(
        "--rules", action="store_true", help="write each candidate's rules whole in the table (default: those that place something, short)"
    )
    _pool_arguments(advise)
    url = commands.add_parser("url", help="print the layout as a link's query string")
    url.add_argument("layout", help="a layout JSON file, or - for standard input")
    op = commands.add_parser("op", help="arrays on a mesh and an expression: the shardings XLA chooses, collectives, timing")
    op.add_argument("spec", help="an op spec JSON file (mesh, arrays, expr, out_spec; examples/ops/ holds the guide's examples)")
    op.add_argument("--json", action="store_true", help="print the result as JSON")
    op.add_argument("--time", type=int, default=None, metavar="STEPS", help="also time STEPS calls, sharded and on one device")
    op.add_argument("--warmup", type=int, default=1, help="untimed warm-up calls of each before timing (default 1)")
    return parser.parse_args(argv)


def execute(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status (2: bad input, one message naming it)."""
    from explorer.errors import ExplorerError

    try:
        if args.command == "analyze":
            from explorer.reading import collector

            with collector.paused():  # one short command, JAX's import and the output included: no collector passes
                devices.configure(args.devices)
                return _analyze(args)
        if args.command not in COMMANDS_WITHOUT_JAX:
            devices.configure(args.devices)
        if args.command == "time":
            from explorer.time_command import time_command

            return time_command(args)
        if args.command == "compile":
            return _compile(args)
        if args.command == "advise":
            return _advise(args)
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


def _program_name() -> str:
    """``partition-explorer`` when run as the installed script, ``python -m explorer`` otherwise (for usage lines)."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    return INSTALLED_SCRIPT if script == INSTALLED_SCRIPT else "python -m explorer"


def _pool_arguments(command: argparse.ArgumentParser) -> None:
    """``--workers`` and ``--cluster``: where and how many compiles run at once (``explorer.compile.compile_pool``)."""
    command.add_argument(
        "--workers", type=int, default=None, help="compiles at once (default: the cores, fewer where host memory holds fewer)"
    )
    command.add_argument(
        "--cluster",
        metavar="ADDRESS",
        default=None,
        help="run the compiles as tasks on this Ray cluster (HOST:PORT, or auto; default EXPLORER_CLUSTER; "
        "needs pip install -r requirements-ray.txt, see docs/cluster.md)",
    )


def _configure_pool(args: argparse.Namespace) -> None:
    """This process's compile pool as the command asks: workers, and a Ray cluster (``--cluster``, else EXPLORER_CLUSTER)."""
    from explorer.compile.compile_pool import POOL, check_workers

    if args.workers is not None:
        POOL.configure(check_workers(args.workers))
    address = args.cluster or os.environ.get("EXPLORER_CLUSTER") or None
    if address:
        POOL.connect(address)


TARGET_HELP = (
    "a Cloud TPU type (v5p-128, v5litepod-16, v5e-256), a libtpu topology (v5p:4x4x4), N slices of either (2xv5p-128), or a "
    'GPU cluster GPU:HOSTSxGPUS of a100, h100, h200, b200 (h100:1x8, h100:8x8; needs pip install "partition-explorer[gpu]")'
)


def _target_command(commands, name: str, help: str, layout_help: str, *, sweep: bool = False) -> argparse.ArgumentParser:
    """A command that takes a layout and a target (``compile``, ``advise``): its layout, ``--target`` (repeatable for a
    sweep) and ``--json``."""
    parser = commands.add_parser(name, help=help)
    parser.add_argument("layout", nargs="?", help=layout_help + " (or --maxtext)")
    _maxtext_argument(parser)
    parser.add_argument(
        "--target",
        required=True,
        action="append" if sweep else "store",
        help=("(repeatable: a sweep, compiled --workers at once) " if sweep else "") + TARGET_HELP,
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


MAXTEXT_HELP = (
    "a MaxText config instead of a layout file: MaxText's own keys as train_compile.py takes them (model_name=llama2-7b "
    "per_device_batch_size=4 ici_fsdp_parallelism=8 compile_topology=v5e-256 ...); --target wins over compile_topology; "
    "needs the optional extra: pip install --no-deps -r requirements-maxtext.txt"
)


def _maxtext_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument("--maxtext", nargs="+", metavar="KEY=VALUE", default=None, help=MAXTEXT_HELP)


STEP_HELP = (
    "your own jitted step instead of a layout file: an allow-listed factory (EXPLORER_ALLOWED_FACTORIES) taking the "
    "target's mesh, factory(mesh, **options) -> (fn, args[, kwargs]) (docs/step.md)"
)


def _step_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--step", metavar="MODULE:FACTORY", default=None, help=STEP_HELP)
    command.add_argument(
        "--mesh",
        metavar="AXIS=SIZE,...",
        default=None,
        help="with --step: the mesh built over the target (default: data=<all its devices>)",
    )
    command.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --step: an option given to the factory (repeatable; JSON values)",
    )


def _layout_of(args: argparse.Namespace, target: str | None = None):
    """The command's layout: its file, or a MaxText config (``--maxtext``) built by MaxText for ``target``."""
    from explorer.errors import ExplorerError

    if args.maxtext is not None and args.layout is not None:
        raise ExplorerError("--maxtext", " ".join(args.maxtext), f"replaces a layout file; give one or the other, not {args.layout!r} too")
    if getattr(args, "step", None) is not None:
        return _step_layout(args, target)
    if args.maxtext is not None:
        from explorer.layout import parse_layout
        from explorer.models import maxtext

        return parse_layout(maxtext.layout_data(args.maxtext, target))
    if args.layout is None:
        raise ExplorerError("layout", None, "is missing: give a layout JSON file, - for standard input, or --maxtext KEY=VALUE ...")
    from explorer.layout import load_layout_argument

    return load_layout_argument(args.layout)


def _step_layout(args: argparse.Namespace, target: str | None):
    """``--step MODULE:FACTORY`` as a step layout (``models.steps.step_layout_data``) for ``target``."""
    from explorer.models.steps import step_layout_data
    from explorer.errors import ExplorerError
    from explorer.hardware.targets import parse_target
    from explorer.layout import parse_layout

    if args.layout is not None or args.maxtext is not None:
        raise ExplorerError("--step", args.step, "replaces a layout file and --maxtext; give one of them")
    options = {}
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ExplorerError("--option", pair, "is not KEY=VALUE (an option given to the step's factory, e.g. batch=64)")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    return parse_layout(step_layout_data(args.step, parse_target(target), args.mesh, options))


def _distributed_arguments(timing: argparse.ArgumentParser) -> None:
    from explorer.timing.distributed import JOIN_TIMEOUT_S
    from explorer.timing.workers import STALL_TIMEOUT_S

    local = timing.add_argument_group("local processes")
    local.add_argument(
        "--processes",
        type=int,
        default=1,
        help="time across N local processes with jax.distributed, the mesh's devices split evenly (default 1)",
    )
    local.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_TIMEOUT_S,
        help=f"end the run when no worker reports progress for this many seconds (default {STALL_TIMEOUT_S:.0f})",
    )
    hosts = timing.add_argument_group("joining a multi-host run (run the same command on every host)")
    hosts.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address and a free port, the same on every host")
    hosts.add_argument("--num-processes", type=int, help="processes in the run")
    hosts.add_argument("--process-id", type=int, help="this process's id, 0 .. N-1; process 0 prints the result")
    hosts.add_argument(
        "--join-timeout",
        type=int,
        default=JOIN_TIMEOUT_S,
        help=f"seconds to wait for every process to join, here or with --processes (default {JOIN_TIMEOUT_S})",
    )


def _analyze(args: argparse.Namespace) -> int:
    from explorer.analysis.analyzer import analyze, array_to_dict, report_to_dict

    report = analyze(_layout_of(args))
    tiles, pattern = args.tiles or args.tiles_for is not None, args.tiles_for or "*"
    if args.values is not None and not report.typed:
        from explorer.errors import ExplorerError

        raise ExplorerError(
            "--values",
            args.values,
            "needs a mesh with Explicit axes (mesh.axis_types), where every value's type carries its sharding; this layout's axes are Auto",
        )
    if args.origins is not None:
        from explorer.compile import origins

        found = origins.matching(origins.of_layout(report.layout), args.origins)
        if not args.json:
            from explorer.text import origins_text

            print(fit(origins_text(found, args.origins)))
            return 0
    if args.values is not None and not args.json:
        from explorer.text import values_text

        print(fit(values_text(report.values, args.values)))
    elif args.array is not None:
        info = _array(report, args.array)
        if args.json:
            print(json.dumps(array_to_dict(info, report, include_tiles=True), indent=2))
        else:
            from explorer.text import array_text

            print(array_text(report, info, args.dims, args.block))
    elif args.json:
        data = report_to_dict(report, include_tiles=tiles, tiles_for=pattern)
        if args.values is not None:
            from explorer.analysis.values import matching, value_to_dict

            data["values"] = [value_to_dict(v) for v in matching(report.values, args.values)]
        if args.origins is not None:
            data["origins"] = [v.to_json() for v in found]
        print(json.dumps(data, indent=2))
    else:
        from explorer.text import report_table

        print(fit(report_table(report, include_tiles=tiles, tiles_for=pattern)))
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


def _url(args: argparse.Namespace) -> int:
    from explorer.sharing.share import layout_to_query

    from explorer.layout import load_layout_argument

    print(layout_to_query(load_layout_argument(args.layout)))
    return 0


def _op(args: argparse.Namespace) -> int:
    from explorer.ops.op_spec import load_op_file
    from explorer.ops.ops import analyze_op, time_op
    from explorer.text import op_text

    spec = load_op_file(args.spec)
    analysis = analyze_op(spec)
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


def progress_printer(stream, heartbeat_s: float = HEARTBEAT_S, now=time.monotonic):
    """A progress callback ``(line, elapsed_s)`` that prints a line with its elapsed time when the line changes, and
    while it does not (a compile of minutes) again every ``heartbeat_s`` (issue 55: the waiting line repeated every
    second, then nothing for three minutes inside a compile)."""
    shown: list = [None, 0.0]  # the line printed last, and when

    def progress(line: str, elapsed: float) -> None:
        if line != shown[0] or now() - shown[1] >= heartbeat_s:
            print(f"{line} ({clock(elapsed)})", file=stream, flush=True)
            shown[:] = [line, now()]

    return progress


def _advise(args: argparse.Namespace) -> int:
    """Progress on stderr, the verdict and the ranked table (or ``--json``) on stdout."""
    from explorer.advisor import advise, depth_of, search_text, search_to_dict
    from explorer.errors import ExplorerError
    from explorer.hardware.targets import parse_target

    if args.compiles < 0:
        raise ExplorerError("--compiles", args.compiles, "is not a whole number of compiles (0 or more)")
    roles = {}
    for item in args.role:
        name, sep, role = item.partition("=")
        if not sep or not name:
            raise ExplorerError("--role", item, "is not NAME=ROLE, e.g. hidden=tensor")
        roles[name] = role
    layout, target = _layout_of(args, args.target), parse_target(args.target)
    if args.maxtext is not None:  # the slices the keys ask for of the slice --target names (maxtext.target_of)
        target = parse_target(layout.target)
    progress = progress_printer(sys.stderr) if not args.json else None

    shortcut = {"auto": None, "on": True, "off": False}[args.depth_shortcut]
    if args.depth_option is not None:
        depth_of(layout, args.depth_option)  # a bad name is refused before any work
    _configure_pool(args)
    search = advise(
        layout,
        target,
        compiles=args.compiles,
        roles=roles,
        on_progress=progress,
        shortcut=shortcut,
        depth_option=args.depth_option,
        pipelines={"auto": None, "on": True, "off": False}[args.pipelines],
    )
    if args.json:
        json.dump(search_to_dict(search), sys.stdout, indent=2)
        print()
    else:
        print(search_text(search, whole_rules=args.rules))
    return 0


def _compile(args: argparse.Namespace) -> int:
    if args.in_process:  # the child process compile_target starts
        from explorer.compile.target_compile import child_main

        return child_main(args.layout, args.target[-1])
    from explorer.compile.compile_pool import POOL
    from explorer.errors import ExplorerError
    from explorer.hardware.targets import parse_target

    own = args.maxtext is not None or args.step is not None  # a mesh made for the target: one target a compile
    if own and len(args.target) > 1:
        raise ExplorerError(
            "--target", args.target, "is one target with --maxtext or --step (the mesh is built for it); run one compile per target"
        )
    layout, targets = _layout_of(args, args.target[0] if own else None), [parse_target(t) for t in args.target]
    if args.maxtext is not None:  # the slices the keys ask for of the slice --target names (maxtext.target_of)
        targets = [parse_target(layout.target)]
    _configure_pool(args)
    shown = [None]

    def progress(jobs) -> None:
        stage = "; ".join(f"{j.target.name}: {j.stage}" for j in jobs) if len(targets) > 1 else (jobs[0].stage if jobs else None)
        if stage and stage != shown[0] and not args.json:
            print(f"{stage}... ({time.monotonic() - min(j.started for j in jobs):.1f} s)", file=sys.stderr)
            shown[0] = stage

    outcomes = POOL.compile_many("cli", [(layout, t) for t in targets], on_progress=progress)
    failed = next((o.error for o in outcomes if o.error is not None), None)
    if failed is not None and len(targets) == 1:
        raise failed
    if args.levers:
        from explorer.advisor.levers import what_to_change
    levers = {id(o): what_to_change(o.result, layout, "cli", progress) for o in outcomes if args.levers and o.error is None}
    if args.json:
        found = [
            {"target": t.name, "error": str(o.error)}
            if o.error
            else o.result.to_json() | {"cached": o.cached} | ({"levers": [x.to_json() for x in levers[id(o)]]} if args.levers else {})
            for t, o in zip(targets, outcomes)
        ]
        json.dump(found[0] if len(targets) == 1 else found, sys.stdout, indent=2)
        print()
    else:
        from explorer.memory_text import memory_section
        from explorer.target_text import compile_text

        for index, (t, o) in enumerate(zip(targets, outcomes)):
            text = f"error: target {t.name}: {o.error}" if o.error else compile_text(o.result, o.cached)
            print(("\n" if index else "") + text + ("" if o.error else memory_section(o.result, args.memory, levers.get(id(o)))))
    return 2 if failed is not None else 0


def run() -> None:
    """The process's entry point (``python -m explorer``, the installed ``partition-explorer``): ``main``, then exit.

    ``analyze`` ends the process as soon as its output is flushed (``os._exit``): it starts no
    worker and leaves no file open, while tearing the interpreter down (JAX's, Flax's and the
    model's modules, the traced program) takes about half a second, a fifth of a cold analysis.
    Every other command exits the usual way.
    """
    args = parse_arguments()
    code = execute(args)
    if args.command != "analyze":
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # piped into `head` (closed by main): nothing more to write
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    run()
