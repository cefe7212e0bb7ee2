"""Compile the layout's train step for a TPU slice this machine does not have, and read what XLA built.

The recipe is MaxText's ``train_compile.py``: ``get_topology_desc`` gives the devices
of a real slice (from ``libtpu``, no TPU needed), ``topologies.make_mesh`` lays the
mesh over them, and the same train step the Timing page runs (grad of the model's
loss, Adam's ``apply_gradients``, traced under ``jax.set_mesh`` and the rules) is
lowered with abstract arguments carrying the layout's shardings and compiled, with
the train state donated as production loops do. ``xla_tpu_no_crash_on_oom`` makes
the TPU compiler return a program that does not fit, so its memory figures can be
shown instead of ``RESOURCE_EXHAUSTED``.

Compiles run in a child process (``python -m explorer compile ... --json``): the
one loading libtpu must be the only one in this process tree to have done so
(libtpu's lock file), a compile can take minutes and must be stoppable, and the
child's memory goes back when it ends. The parent never loads libtpu. Results are
cached on disk by (layout, target, versions).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.targets import Target, check_mesh_fits, parse_target

CACHE_FORMAT = 1  # bump when the result's shape or meaning changes
STAGE_PREFIX = "stage: "
COMPILER_OPTIONS = {"xla_tpu_no_crash_on_oom": True}
STAGES = ("trace", "lower", "compile", "analyse")


# --- in the child: the compile itself ----------------------------------------------------------

def compile_for_target(layout: Layout, target: Target, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compile ``layout``'s train step for ``target`` in this process; the result in the documented JSON form."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    from explorer.analysis import analyze, model_of
    from explorer.compiled import _make_train_step, _with_sharding

    stage = on_stage or (lambda _: None)
    check_mesh_fits(target, _mesh_size(layout))
    stage("trace")
    report = analyze(layout)
    model = model_of(layout)
    kwargs = {"chip_config_name": target.chip.chip_config_name} if target.chip.chip_config_name else {}
    try:
        topology = topologies.get_topology_desc(topology_name=target.topology, platform="tpu", **kwargs)
    except Exception as error:  # libtpu missing or refusing the name
        raise ExplorerError("target", target.name, f"libtpu cannot describe {target.topology}: {error}") from None
    mesh = topologies.make_mesh(topology, tuple(layout.mesh.shape), tuple(layout.mesh.axes))
    specs = iter(report.array(a.path).spec for a in model.state_arrays)
    shardings = jax.tree_util.tree_map(lambda _: NamedSharding(mesh, PartitionSpec(*next(specs))), model.state_shapes)
    inputs = [a for a in report.arrays if a.kind == "input"]
    input_shardings = tuple(NamedSharding(mesh, PartitionSpec(*a.spec)) for a in inputs)
    abstract_inputs = tuple(
        jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=s) for i, s in zip(model.built.inputs, input_shardings)
    )
    abstract_state = jax.tree_util.tree_map(_with_sharding, shardings, model.state_shapes)
    start = time.perf_counter()
    stage("lower")
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        lowered = jax.jit(
            _make_train_step(model), in_shardings=(shardings, *input_shardings), out_shardings=shardings, donate_argnums=0,
        ).lower(abstract_state, *abstract_inputs)
    stage("compile")
    compiled = lowered.compile(COMPILER_OPTIONS)
    compile_s = time.perf_counter() - start
    stage("analyse")
    return analyse(compiled, target, mesh, compile_s)


def _mesh_size(layout: Layout) -> int:
    size = 1
    for s in layout.mesh.shape:
        size *= s
    return size


def analyse(compiled, target: Target, mesh, compile_s: float) -> dict[str, Any]:
    """The documented result from a compiled program for ``target`` on ``mesh``."""
    import numpy as np

    from explorer import hlo, roofline

    stats = compiled.memory_analysis()
    memory = {
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "alias_bytes": int(stats.alias_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "peak_bytes": int(stats.peak_memory_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
    }
    cost = compiled.cost_analysis() or {}
    text = compiled.as_text()
    extra = hlo.loop_work(text)
    flops = float(cost.get("flops", 0.0)) + extra.flops
    bytes_accessed = float(cost.get("bytes accessed", 0.0)) + extra.bytes
    coords = np.array([_coords(d) for d in mesh.devices.flat])
    collectives = _collectives(hlo.collective_ops(text, mesh.size), tuple(mesh.devices.shape), tuple(mesh.axis_names), coords)
    estimate = roofline.estimate(flops, bytes_accessed, collectives, target.chip)
    peak = memory["peak_bytes"] or memory["argument_bytes"] + memory["output_bytes"] - memory["alias_bytes"] + memory["temp_bytes"]
    return {
        "target": target.to_dict(),
        "mesh": {"shape": list(mesh.devices.shape), "axes": list(mesh.axis_names)},
        "compile_s": compile_s,
        "memory": memory,
        "fits": peak <= target.chip.hbm_bytes,
        "headroom_bytes": target.chip.hbm_bytes - peak,
        "flops": flops,
        "bytes_accessed": bytes_accessed,
        "loop_work": {"flops": extra.flops, "bytes": extra.bytes},
        "padding": _padding(hlo.entry_parameters(text)),
        "collectives": [
            {"op": c.op, "count": c.count, "bytes": c.bytes, "mesh_axes": list(c.mesh_axes),
             "group_size": c.group_size, "ici_axes": c.ici_axes, "seconds": roofline.collective_seconds(c, target.chip)}
            for c in collectives
        ],
        "estimate": estimate.to_dict(),
        "donated": True,
    }


def _padding(parameters) -> dict[str, Any]:
    """How the arguments' tiled layout pads them: the totals and every parameter that grows."""
    return {
        "bytes": sum(p.bytes for p in parameters),
        "padded_bytes": sum(p.padded_bytes for p in parameters),
        "padded": [{"shape": p.shape, "bytes": p.bytes, "padded_bytes": p.padded_bytes} for p in parameters if p.padded_bytes != p.bytes],
    }


def _coords(device) -> tuple[int, ...]:
    return tuple(getattr(device, "coords", None) or (device.id,))


def _collectives(ops, mesh_shape: tuple[int, ...], mesh_axes: tuple[str, ...], coords) -> list:
    """Aggregate the program's collectives per (op, mesh axes spanned, group size, torus axes spanned)."""
    from explorer.roofline import Collective

    totals: dict[tuple, list[int]] = {}
    for op in ops:
        spanned, torus = _spanned(op.groups, mesh_shape, mesh_axes, coords)
        key = (op.op, spanned, op.group_size, torus)
        entry = totals.setdefault(key, [0, 0])
        entry[0] += op.runs
        entry[1] += op.runs * op.bytes
    return [Collective(op, count, size, axes, group, torus) for (op, axes, group, torus), (count, size) in sorted(totals.items())]


def _spanned(groups, mesh_shape, mesh_axes, coords) -> tuple[tuple[str, ...], int]:
    """Which mesh axes the groups' members differ along, and how many torus axes their chips span.

    Ids in the groups are positions in the mesh's devices in mesh order (the program's
    device assignment); ``coords`` holds each position's chip coordinates.
    """
    import numpy as np

    if not groups:
        return (("?",) if groups is None else ()), 0
    axes: set[int] = set()
    torus: set[int] = set()
    for group in groups:
        members = [i for i in group if i < int(np.prod(mesh_shape))]
        if len(members) < 2:
            continue
        positions = np.array(np.unravel_index(members, mesh_shape)).T
        axes.update(int(a) for a in np.nonzero(positions.min(0) != positions.max(0))[0])
        chip = coords[members]
        torus.update(int(a) for a in np.nonzero(chip.min(0) != chip.max(0))[0])
    return tuple(mesh_axes[a] for a in sorted(axes)), len(torus)


# --- in the parent: a child process, live stages, stop, the disk cache ---------------------------

def versions() -> dict[str, str]:
    found = {}
    for package in ("jax", "jaxlib", "libtpu", "flax", "optax"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def cache_key(layout: Layout, target: Target) -> str:
    from explorer.compiled import layout_key

    identity = json.dumps(
        {"layout": layout_key(layout), "topology": target.topology, "versions": versions(), "format": CACHE_FORMAT},
        sort_keys=True,
    )
    return hashlib.sha256(identity.encode()).hexdigest()


def _cache_path(key: str) -> str | None:
    """Where a compile's result is kept, under the explorer's cache folder (``trace_cache.cache_dir``); None when off."""
    from explorer.trace_cache import cache_dir

    folder = cache_dir()
    return None if folder is None else os.path.join(folder, "compiles", key + ".json")


def cached(layout: Layout, target: Target) -> dict[str, Any] | None:
    """The cached result for (layout, target, versions), or None; a corrupt entry is dropped."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return None
    try:
        with open(path) as handle:
            result = json.load(handle)
        if not isinstance(result, dict) or "memory" not in result:
            raise ValueError("not a result")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.remove(path)
        return None
    result["target"]["name"] = target.name
    return result


def _store(layout: Layout, target: Target, result: dict[str, Any]) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``; concurrent writers both win."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(result, out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def child_environment() -> dict[str, str]:
    """CPU as JAX's backend (libtpu is only asked for a topology), and libtpu's lock not held against us."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


class Stopped(Exception):
    """The compile was stopped before it finished."""


def compile_target(
    layout: Layout,
    target: Target | str,
    on_stage: Callable[[str, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    poll_s: float = 0.2,
    on_start: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The result for (layout, target) and whether it came from the disk cache.

    Otherwise compiles in a child process, calling ``on_stage(stage, elapsed_s)`` as
    the child reports stages and every ``poll_s``; ``should_stop()`` returning True
    kills the child (and its process group) and raises ``Stopped``. ``on_start``
    gets the child's process id.
    """
    target = parse_target(target) if isinstance(target, str) else target
    check_mesh_fits(target, _mesh_size(layout))
    hit = cached(layout, target)
    if hit is not None:
        return hit, True
    report = on_stage or (lambda *_: None)
    with tempfile.TemporaryDirectory(prefix="explorer-compile-") as folder:
        path = os.path.join(folder, "layout.json")
        with open(path, "w") as handle:
            json.dump(layout.to_dict(), handle)
        # One CPU device: the child only needs the CPU backend for tracing; the target's devices come from libtpu.
        command = [sys.executable, "-m", "explorer", "--devices", "1", "compile", path, "--target", target.topology, "--json", "--in-process"]
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_environment(),
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), start_new_session=True,
        )
        if on_start:
            on_start(child.pid)
        stages: list[str] = ["starting"]
        errors: list[str] = []
        reader = threading.Thread(target=_read_stages, args=(child.stderr, stages, errors), daemon=True)
        reader.start()
        started = time.monotonic()
        try:
            while child.poll() is None:
                report(stages[-1], time.monotonic() - started)
                if should_stop and should_stop():
                    stop(child)
                    raise Stopped(f"stopped during {stages[-1]} after {time.monotonic() - started:.1f} s")
                time.sleep(poll_s)
        except BaseException:
            stop(child)
            raise
        output = child.stdout.read()
        reader.join(timeout=5)
    if child.returncode != 0:
        raise ExplorerError("target", target.name, f"compile failed: {child_error(errors, child.returncode)}")
    result = json.loads(output)
    result["target"]["name"] = target.name
    _store(layout, target, result)
    return result, False


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
        return message[len("error: "):]
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]):
            text = [lines[index]]
            for line in lines[index + 1:]:
                if line.startswith(_JAX_PREFACE) or line.startswith("Traceback") or line.startswith("The above exception"):
                    break
                text.append(line.strip())
            return " ".join(text)
    useful = [line for line in lines if not line.startswith(_JAX_PREFACE)]
    return useful[-1] if useful else f"exit status {returncode}"


def _read_stages(stream, stages: list[str], errors: list[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        if line.startswith(STAGE_PREFIX):
            stages.append(line[len(STAGE_PREFIX):])
        elif line.strip():
            errors.append(line)
            del errors[:-50]


def stop(child: subprocess.Popen) -> None:
    """Kill the child's process group and reap it."""
    if child.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
