"""Compile the layout's train step for a TPU slice this machine does not have, and read what XLA built.

The recipe is MaxText's ``train_compile.py``: ``get_topology_desc`` gives the devices
of a real slice (from ``libtpu``, no TPU needed), ``topologies.make_mesh`` lays the
mesh over them, and the same train step the Timing page runs (grad of the model's
loss, Adam's ``apply_gradients``, traced under ``jax.set_mesh`` and the rules) is
lowered with abstract arguments carrying the layout's shardings and compiled, with
the train state donated as production loops do.

A program that does not fit the chip: libtpu 0.0.47.1 and later refuse a program compiled
with ``xla_tpu_no_crash_on_oom`` (``INVALID_ARGUMENT: Invalid TPU program``), and without it
the compiler stops with ``RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: ... HLO temporaries
(25.00G) exceeds available HBM (15.75G)``. It has by then assigned every buffer, and with
``xla_dump_to`` it writes that assignment, its memory-usage report and the optimized program
before refusing. So every compile dumps into a temporary folder; when XLA refuses for HBM, the
result is read from the dump: arguments, outputs, aliased, temporaries and the peak (the HBM
total of XLA's report), the collectives and the dot/convolution flops of the optimized program
(``cost_analysis()`` needs a compiled executable, so ``flops_source`` says which), with
``fits: false`` and E1000's own figures under ``oom``.

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
import shutil
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

CACHE_FORMAT = 2  # bump when the result's shape or meaning changes
STAGE_PREFIX = "stage: "
COMPILER_OPTIONS: dict[str, Any] = {}  # no xla_tpu_no_crash_on_oom: libtpu >= 0.0.47.1 refuses its programs
_E1000 = re.compile(
    r"E1000: CompileTimeHbmOom:.*?\((?P<required>[\d.]+)(?P<unit>[KMGT]?)\) exceeds available HBM \((?P<available>[\d.]+)(?P<unit2>[KMGT]?)\)",
    re.S,
)
STAGES = ("trace", "lower", "compile", "analyse")


# --- in the child: the compile itself ----------------------------------------------------------

def compile_for_target(layout: Layout, target: Target, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compile ``layout``'s train step for ``target`` in this process; the result in the documented JSON form."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import NamedSharding, PartitionSpec

    from explorer import reading
    from explorer.analysis import analyze, model_of
    from explorer.train_step import make_train_step, with_sharding

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
    mesh, method = place_mesh(list(topology.devices), tuple(layout.mesh.shape), tuple(layout.mesh.axes), layout.mesh.types)
    specs = iter(report.array(a.path).spec for a in model.state_arrays)
    shardings = jax.tree_util.tree_map(lambda _: NamedSharding(mesh, PartitionSpec(*next(specs))), reading.live(model).state)
    inputs = [a for a in report.arrays if a.kind == "input"]
    input_shardings = tuple(NamedSharding(mesh, PartitionSpec(*a.spec)) for a in inputs)
    abstract_inputs = tuple(
        jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=s) for i, s in zip(reading.live(model).built.inputs, input_shardings)
    )
    abstract_state = jax.tree_util.tree_map(with_sharding, shardings, reading.live(model).state)
    start = time.perf_counter()
    stage("lower")
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        lowered = jax.jit(
            make_train_step(model), in_shardings=(shardings, *input_shardings), out_shardings=shardings, donate_argnums=0,
        ).lower(abstract_state, *abstract_inputs)
    stage("compile")
    dump = tempfile.mkdtemp(prefix="explorer-xla-dump-")
    try:
        try:
            compiled = lowered.compile({**COMPILER_OPTIONS, "xla_dump_to": dump})
        except Exception as error:  # XLA's own refusal: out of HBM is a result, anything else a message
            oom = parse_oom(str(error))
            if oom is None:
                raise ExplorerError("target", target.name, f"XLA could not compile the step: {_first_line(error)}") from None
            compile_s = time.perf_counter() - start
            stage("analyse")
            result = analyse_dump(dump, oom, target, mesh, compile_s)
            result["mesh"]["placement_method"] = method
            return result
        compile_s = time.perf_counter() - start
        stage("analyse")
        result = analyse(compiled, target, mesh, compile_s)
        result["mesh"]["placement_method"] = method
        result["cross_check"] = _cross_check(dump, result)
        return result
    finally:
        shutil.rmtree(dump, ignore_errors=True)


PLACEMENTS = ("mesh_utils", "split_physical_axes", "device_order")


def place_mesh(devices: list, shape: tuple[int, ...], axes: tuple[str, ...], types: tuple[str, ...] | None = None):
    """The slice's devices laid out as the logical mesh, and how: the first of ``PLACEMENTS`` that works.

    ``mesh_utils``: ``topologies.make_mesh``'s own placement (each logical axis a product of
    whole physical axes); ``split_physical_axes``: ``mesh_utils.create_device_mesh(...,
    allow_split_physical_axes=True)``, which lets a logical axis take part of a physical one
    (8x8 on a 4x4x4 torus); ``device_order``: the devices in libtpu's order, reshaped. The
    result's ``mesh.placement`` says which torus axes each logical axis moves along. ``types`` are the
    layout's axis types (``topologies.make_mesh`` and ``Mesh`` default to Auto).
    """
    from explorer.analysis import axis_types_of

    import numpy as np
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh

    attempts = (
        lambda: mesh_utils.create_device_mesh(shape, devices),
        lambda: mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True),
        lambda: np.array(devices, dtype=object).reshape(shape),
    )
    for method, attempt in zip(PLACEMENTS, attempts):
        try:
            return Mesh(attempt(), axes, axis_types=axis_types_of(types or ("auto",) * len(axes))), method
        except Exception:  # mesh_utils refuses the shape: try the next placement
            continue
    raise ExplorerError("mesh.shape", list(shape), f"cannot be laid over {len(devices)} devices")


def _cross_check(folder: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """What the route for a program that does not fit would have read, for a program that fits.

    The tests compare these with ``memory_analysis()`` and ``cost_analysis()``, which is what
    makes the figures of a refused program trustworthy.
    """
    from explorer import hlo

    try:
        memory = hlo.dumped_memory(
            _dumped(folder, "after_optimizations-buffer-assignment.txt"), _dumped(folder, "after_optimizations-memory-usage-report.txt"),
        )
        work = hlo.matmul_work(_dumped(folder, "after_optimizations.txt"))
    except (OSError, ValueError):
        return None
    return {"memory": memory, "matmul_flops": work.flops}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_oom(message: str) -> dict[str, Any] | None:
    """E1000's figures (bytes, as XLA rounds them: two decimals of its unit), or None for another error.

    >>> parse_oom("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory "
    ...           "required for HLO temporaries (25.00G) exceeds available HBM (15.75G). HLO module: jit_train_step.")["available_bytes"]
    16911433728
    """
    found = _E1000.search(message)
    if found is None:
        return None
    return {
        "required_bytes": round(float(found["required"]) * _UNITS[found["unit"]]),
        "available_bytes": round(float(found["available"]) * _UNITS[found["unit2"]]),
        "message": _first_line(Exception(message)),
    }


def _dumped(folder: str, suffix: str) -> str:
    """The text of the train step's dump file ending in ``suffix`` (the largest if several modules match)."""
    names = [n for n in os.listdir(folder) if "jit_train_step" in n and n.endswith(suffix)]
    if not names:
        raise FileNotFoundError(suffix)
    name = max(names, key=lambda n: os.path.getsize(os.path.join(folder, n)))
    with open(os.path.join(folder, name)) as handle:
        return handle.read()


def analyse_dump(folder: str, oom: dict[str, Any], target: Target, mesh, compile_s: float) -> dict[str, Any]:
    """The documented result for a program XLA refused for HBM, read from its dump (see the module docstring)."""
    from explorer import hlo

    try:
        memory = hlo.dumped_memory(
            _dumped(folder, "after_optimizations-buffer-assignment.txt"), _dumped(folder, "after_optimizations-memory-usage-report.txt"),
        )
        text = _dumped(folder, "after_optimizations.txt")
    except (OSError, ValueError):  # no dump: E1000's own figures only
        return _result(target, mesh, compile_s, {"peak_bytes": oom["required_bytes"]}, None, None, [], "", oom)
    memory["generated_code_bytes"] = None
    work = hlo.matmul_work(text)
    return _result(target, mesh, compile_s, memory, work.flops, work.bytes, _mesh_collectives(text, mesh), text, oom)


def _mesh_size(layout: Layout) -> int:
    size = 1
    for s in layout.mesh.shape:
        size *= s
    return size


def analyse(compiled, target: Target, mesh, compile_s: float) -> dict[str, Any]:
    """The documented result from a compiled program for ``target`` on ``mesh``."""

    from explorer import hlo

    stats = compiled.memory_analysis()
    memory: dict[str, Any] = {
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
    if not memory["peak_bytes"]:
        memory["peak_bytes"] = memory["argument_bytes"] + memory["output_bytes"] - memory["alias_bytes"] + memory["temp_bytes"]
    result = _result(target, mesh, compile_s, memory, flops, bytes_accessed, _mesh_collectives(text, mesh), text, None)
    result["loop_work"] = {"flops": extra.flops, "bytes": extra.bytes}
    return result


def _mesh_collectives(text: str, mesh) -> list:
    import numpy as np

    from explorer import hlo

    coords = np.array([_coords(d) for d in mesh.devices.flat])
    return _collectives(hlo.collective_ops(text, mesh.size), tuple(mesh.devices.shape), tuple(mesh.axis_names), coords)


def _result(target: Target, mesh, compile_s: float, memory: dict, flops, bytes_accessed, collectives: list, text: str, oom) -> dict[str, Any]:
    """The documented JSON form. ``oom`` is E1000's figures when XLA refused the program for HBM, else None."""
    from explorer import hlo, roofline

    memory = {k: memory.get(k) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes", "generated_code_bytes")}
    peak = memory["peak_bytes"]
    hbm = target.chip.device_hbm_bytes
    known = flops is not None
    estimate = roofline.estimate(flops, bytes_accessed, collectives, target.chip) if known else None
    return {
        "target": target.to_dict(),
        "mesh": {"shape": list(mesh.devices.shape), "axes": list(mesh.axis_names), "placement": placement(mesh)},
        "compile_s": compile_s,
        "compiled": oom is None,
        "memory": memory,
        "memory_source": "memory_analysis" if oom is None else ("xla_dump" if memory["argument_bytes"] is not None else "e1000"),
        "fits": oom is None and peak <= hbm,
        "headroom_bytes": hbm - peak,
        "oom": oom,
        "flops": flops,
        "bytes_accessed": bytes_accessed,
        "flops_source": "cost_analysis" if oom is None else ("hlo_matmuls" if known else None),
        "loop_work": {"flops": 0.0, "bytes": 0.0},
        "padding": _padding(hlo.entry_parameters(text)) if text else None,
        "collectives": [
            {"op": c.op, "count": c.count, "bytes": c.bytes, "mesh_axes": list(c.mesh_axes),
             "group_size": c.group_size, "ici_axes": c.ici_axes, "seconds": roofline.collective_seconds(c, target.chip)}
            for c in collectives
        ],
        "estimate": estimate.to_dict() if estimate else None,
        "donated": True,
    }


def placement(mesh) -> list[dict[str, Any]]:
    """How each logical mesh axis lies on the torus: for each, the torus axes its steps move along.

    ``torus_axes`` lists the physical axes (x, y, z, or ``core`` for the two devices of a TPU7x
    chip) along which the devices of one logical axis' groups differ: a logical axis of size 8
    on a 4x4x4 torus spans two physical axes (it was split), and its collectives' rings cross both.
    """
    import numpy as np

    devices = mesh.devices
    coords = np.array([_coords(d) + (getattr(d, "core_on_chip", 0) or 0,) for d in devices.flat]).reshape(devices.shape + (-1,))
    names = ["x", "y", "z"][: coords.shape[-1] - 1] + ["core"]
    out = []
    for axis, name in enumerate(mesh.axis_names):
        size = devices.shape[axis]
        moved = coords.take(range(size), axis=axis)
        spans = np.nonzero((moved.max(axis=axis) != moved.min(axis=axis)).reshape(-1, coords.shape[-1]).any(0))[0]
        out.append({"axis": name, "size": int(size), "torus_axes": [names[int(a)] for a in spans]})
    return out


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
    identity = json.dumps(
        {"layout": layout.key, "topology": target.topology, "versions": versions(), "format": CACHE_FORMAT},
        sort_keys=True,
    )
    return hashlib.sha256(identity.encode()).hexdigest()


def _cache_path(key: str) -> str | None:
    """Where a compile's result is kept, under the explorer's cache folder (``trace_cache.cache_dir``); None when off."""
    from explorer.reading.disk import cache_dir

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
