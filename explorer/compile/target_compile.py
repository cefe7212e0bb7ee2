"""Compile the layout's train step for a target in a child process: start it, follow its stages, stop it.

This module's one job is the compile child process and the protocol between it and its parent; the
compile the child runs is ``xla_compile.compile_for_target``, what XLA built is read by
``xla_results``, and results are kept on disk by ``compile_cache`` (by layout, target and versions).

Compiles run in a child process (``python -m explorer compile ... --in-process``, started by
``compile_target``): the one loading libtpu must be the only one in this process tree to have done
so (libtpu's lock file), a compile can take minutes and must be stoppable, and the child's memory
goes back when it ends. The parent never loads libtpu. Parent and child talk through one protocol
(``child_command``, ``child_main``, ``report_stage``, ``_read_stages``, ``_read_result``): the child
writes a ``STAGE_PREFIX`` line on stderr as it enters each of ``STAGES`` and the result's JSON on
stdout.

The result is a ``compile_result.TargetCompile``, built once per compile; its ``to_json()`` is the
documented JSON form.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import threading
import time
from typing import Callable

from explorer import children, forkserver
from explorer.compile.compile_cache import cached, store
from explorer.compile.compile_result import TargetCompile
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.hardware.targets import Target, check_mesh_fits, parse_target, slice_split
from explorer.compile.xla_compile import require_gpu_plugin
from explorer.hardware.devices import PROJECT_ROOT, child_environment, compile_flags
from explorer.hardware.libtpu_log import drop_noise
from explorer.compile.xla_results import with_verdict

STAGES = ("trace", "lower", "compile", "analyze")


# --- the protocol between parent and child: how the child is started, reports its stages and sends its result --

STAGE_PREFIX = "stage: "  # the child's stderr line as it enters one of STAGES; every other line is kept for its error


def child_command(layout_path: str, target: Target) -> list[str]:
    """The child's command line (``python -m explorer`` and ``child_arguments``)."""
    return [sys.executable, "-m", "explorer", *child_arguments(layout_path, target)]


def child_arguments(layout_path: str, target: Target) -> list[str]:
    """The child's arguments to ``python -m explorer``. One CPU device: the child only needs the CPU backend for
    tracing; the target's devices come from libtpu (or the CUDA plugin)."""
    return ["--devices", "1", "compile", layout_path, "--target", target.topology, "--in-process"]


def child_main(layout_path: str, target_name: str) -> int:
    """The child (``python -m explorer compile LAYOUT --target NAME --in-process``): compile in this process,
    reporting each stage (``report_stage``), then write the result's JSON on stdout."""
    from explorer.layout import load_layout_file
    from explorer.compile.xla_compile import compile_for_target

    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the result only (a model's code may print: MaxText does)
        result = compile_for_target(load_layout_file(layout_path), parse_target(target_name), on_stage=report_stage)
    json.dump(result.to_json(), sys.stdout)
    print()
    return 0


def report_stage(stage: str) -> None:
    """In the child: tell the parent that ``stage`` begins."""
    print(STAGE_PREFIX + stage, file=sys.stderr, flush=True)


def _read_stages(stream, stages: list[str], errors: list[str]) -> None:
    """In the parent: the child's stderr, its stages into ``stages``, the last 50 other lines into ``errors`` (libtpu's
    start-up noise left out: ``libtpu_log``)."""
    recent: list[str] = []
    for line in stream:
        line = line.rstrip("\n")
        if line.startswith(STAGE_PREFIX):
            stages.append(line[len(STAGE_PREFIX) :])
        elif line.strip():
            recent = (recent + [line])[-60:]
            errors[:] = drop_noise(recent)[-50:]


def _read_output(stream, chunks: list[str]) -> None:
    """In the parent: the child's stdout, read as it comes (a pipe holds 64 KiB; a child writing more than that
    blocks until it is read, so reading only after the child ended would wait for ever on a big result)."""
    for chunk in iter(lambda: stream.read(1 << 16), ""):
        chunks.append(chunk)


def _read_result(output: str) -> TargetCompile:
    """In the parent: the result the child wrote on stdout."""
    return TargetCompile.from_json(json.loads(output))


# --- in the parent: a child process, live stages, stop -----------------------------------------------


class Stopped(Exception):
    """The compile was stopped before it finished."""


def check_compilable(layout: Layout, target: Target) -> None:
    """ExplorerError unless ``target`` can take ``layout``: its mesh fits, a split the slices can hold, the GPU plugin."""
    check_mesh_fits(target, layout.mesh.size)
    slice_split(target, tuple(layout.mesh.shape), tuple(layout.mesh.axes), layout.mesh.dcn)  # a split the slices cannot hold
    require_gpu_plugin(target)


def compile_target(
    layout: Layout,
    target: Target | str,
    on_stage: Callable[[str, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    poll_s: float = 0.2,
    on_start: Callable[[int], None] | None = None,
    fresh: bool = False,
) -> tuple[TargetCompile, bool]:
    """The result for (layout, target) under this process's flags (``devices.compile_flags``) and whether it came from
    the disk cache (``fresh``: compile again, whatever the cache holds, and keep the new result there).

    Otherwise compiles in a child process (forked by ``forkserver``: it ends with this process), calling
    ``on_stage(stage, elapsed_s)`` as the child reports stages and every ``poll_s``; ``should_stop()`` returning True
    kills the child (and its process group) and raises ``Stopped``. ``on_start``
    gets the child's process id. A flag libtpu (or XLA) refuses (``refused_flag``: recipes written for a newer libtpu
    carry some) is left out and the compile run again without it; the result names each such flag in one line
    (``TargetCompile.refused_flags``), and is kept under the flags asked for.
    """
    target = parse_target(target) if isinstance(target, str) else target
    check_compilable(layout, target)
    hit = None if fresh else cached(layout, target)
    if hit is not None:
        return hit, True
    flags, refused = compile_flags(target), []
    with tempfile.TemporaryDirectory(prefix="explorer-compile-") as folder:
        path = os.path.join(folder, "layout.json")
        with open(path, "w") as handle:
            json.dump(layout.to_dict(), handle)
        while True:
            returncode, output, errors = _run_child(path, target, flags, on_stage, should_stop, poll_s, on_start)
            if returncode == 0:
                break
            found = refused_flag(errors, flags)
            if found is None or not set(found.value.split()) <= set(flags.get(found.field, "").split()):
                raise found or ExplorerError("target", target.name, f"compile failed: {child_error(errors, returncode)}")
            flags = {**flags, found.field: " ".join(w for w in flags[found.field].split() if w not in found.value.split())}
            refused.append(left_out(found))
    result = dataclasses.replace(with_verdict(_read_result(output), target), refused_flags=tuple(refused))
    store(layout, target, result)
    return result, False


def _run_child(path: str, target: Target, flags: dict[str, str], on_stage, should_stop, poll_s, on_start) -> tuple[int, str, list[str]]:
    """One compile child for the layout file at ``path`` under ``flags``, followed to its end: (exit status, its stdout,
    its last stderr lines). Stop kills it and raises ``Stopped``."""
    report = on_stage or (lambda *_: None)
    try:
        child = forkserver.start(child_arguments(path, target), env=child_environment(target, flags), cwd=PROJECT_ROOT)
    except ChildProcessError as error:
        raise ExplorerError("target", target.name, f"compile failed: {error}") from None
    if on_start:
        on_start(child.pid)
    stages: list[str] = ["starting"]
    errors: list[str] = []
    chunks: list[str] = []
    readers = [
        threading.Thread(target=_read_stages, args=(child.stderr, stages, errors), daemon=True),
        threading.Thread(target=_read_output, args=(child.stdout, chunks), daemon=True),
    ]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    try:
        while child.poll() is None:
            report(stages[-1], time.monotonic() - started)
            if should_stop and should_stop():
                children.stop(child)
                raise Stopped(f"stopped during {stages[-1]} after {time.monotonic() - started:.1f} s")
            time.sleep(poll_s)
    except BaseException:
        children.stop(child)
        raise
    for reader in readers:
        reader.join(timeout=60)
    return child.returncode, "".join(chunks), errors


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exhausted|Interrupt)\w*: ")
_JAX_PREFACE = ("For simplicity, JAX has removed its internal frames", "-" * 20)


def child_error(lines: list[str], returncode: int) -> str:
    """The compile child's own error from its last stderr lines: the explorer's message, else the exception's
    (its type and message, without JAX's "For simplicity, JAX has removed its internal frames..." preface).

    >>> child_error(["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: One of pjit's inputs "
    ...              "is incompatible", "--------------------", "For simplicity, JAX has removed its internal frames from "
    ...              "the traceback of the following exception. Set JAX_TRACEBACK_FILTERING=off to include these."], 1)
    "ValueError: One of pjit's inputs is incompatible"
    """
    message = next((line for line in reversed(lines) if line.startswith("error: ")), None)
    if message:
        return message[len("error: ") :]
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]):
            text = [lines[index]]
            for line in lines[index + 1 :]:
                if line.startswith(_JAX_PREFACE) or line.startswith("Traceback") or line.startswith("The above exception"):
                    break
                text.append(line.strip())
            return " ".join(text)
    useful = [line for line in lines if not line.startswith(_JAX_PREFACE)]
    return useful[-1] if useful else f"exit status {returncode}"


_UNKNOWN_FLAG = re.compile(r"Unknown command line flag '(?P<name>[^']+)'|Unknown flags? in XLA_FLAGS: (?P<xla>\S+)")
_REFUSED = re.compile(r"refused: (?P<variable>LIBTPU_INIT_ARGS|XLA_FLAGS) has (?P<word>[^;]+);")


def left_out(refused: ExplorerError) -> str:
    """The line a result keeps for flags libtpu refused (``refused_flag``), every flag written out in full.

    >>> left_out(ExplorerError("LIBTPU_INIT_ARGS", "--xla_a=1", "is a flag libtpu 0.0.50.1 refuses as it loads (why)"))
    'LIBTPU_INIT_ARGS --xla_a=1: a flag libtpu 0.0.50.1 refuses as it loads (why); left out of this compile'
    """
    return f"{refused.field} {refused.value}: {refused.problem.removeprefix('is ')}; left out of this compile"


def refused_flag(lines: list[str], flags: dict[str, str]) -> ExplorerError | None:
    """A flag of ``flags`` the child's libtpu (or XLA) refused, as one ``ExplorerError`` naming the variable and the
    flag, else None. libtpu ends the process as it loads with ``ERROR: Unknown command line flag 'NAME'`` for a flag of
    LIBTPU_INIT_ARGS it does not know (recipes written for a newer libtpu carry some), XLA with ``Unknown flags in
    XLA_FLAGS: --NAME``; a flag it knows but refuses for this target is named by the compile's own error
    (``xla_compile.libtpu_hint``).

    >>> str(refused_flag(["ERROR: Unknown command line flag '2a886c8_chip_config_name'"],
    ...                  {"LIBTPU_INIT_ARGS": "--xla_a=1 --2a886c8_chip_config_name=megachip_tccontrol"}))[:99]
    "LIBTPU_INIT_ARGS: '--2a886c8_chip_config_name=megachip_tccontrol' is a flag libtpu 0.0.50.1 refuses"
    """
    from explorer.compile.compile_cache import versions

    for line in reversed(lines):
        named = _REFUSED.search(line)
        if named is not None:
            reason = line.strip().split(" (refused:")[0].split("could not compile the step: ")[-1]
            return ExplorerError(
                named["variable"], named["word"], f"is a flag libtpu {versions()['libtpu']} refuses for this target ({reason})"
            )
        found = _UNKNOWN_FLAG.search(line)
        if found is None:
            continue
        name = (found["name"] or found["xla"] or "").lstrip("-").split("=", 1)[0]
        variable = "LIBTPU_INIT_ARGS" if found["name"] else "XLA_FLAGS"
        given = next((w for w in flags.get(variable, "").split() if w.lstrip("-").split("=", 1)[0] == name), f"--{name}")
        library = f"libtpu {versions()['libtpu']}" if found["name"] else f"XLA (jaxlib {versions()['jaxlib']})"
        return ExplorerError(variable, given, f"is a flag {library} refuses as it loads ({line.strip()})")
    return None
