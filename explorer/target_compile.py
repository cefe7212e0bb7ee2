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

An NVIDIA GPU cluster (``h100:2x8``) takes the same path with JAX's CUDA plugin in place of
libtpu, and no GPU: ``get_topology_desc(platform="cuda", target_config=..., topology="1x2x8")``
describes the cluster from XLA's own GPU target config (``explorer/gpu_targets/``), and the
program is compiled for it as for a TPU slice. What differs:

- XLA's GPU compiler never refuses a program for memory: it plans buffers against the target
  config's memory (its rematerialization pass tries to bring the program under about 80% of it and
  logs ``Can't reduce memory use below ...`` when it cannot), and ``memory_analysis()`` then gives the
  figures. The verdict compares XLA's peak per GPU with what JAX lets one process use, 75% of the
  GPU's memory unless ``XLA_PYTHON_CLIENT_MEM_FRACTION`` says otherwise (``memory_limit`` says which
  figure); ``fits_device`` compares it with the whole memory. What XLA logs about it (its
  rematerialization giving up, arguments and outputs exceeding the memory it schedules for) is kept
  under ``xla_messages``.
- ``cost_analysis()`` is empty: flops are the dots of the optimized program (Triton gemm fusions
  and cuBLAS calls included), each counted as often as its computation runs, a loop body once per
  iteration (``hlo.matmul_work``); the memory term reads the same dots' operands and results, a
  lower bound on the bytes the step moves (``flops_source``/``bytes_source``: ``hlo_matmuls``).
- Devices are host-major (host 0's GPUs first); ``mesh.placement`` says, per mesh axis, how many
  hosts and GPUs per host one group of it spans and whether its collectives ride NVLink or the
  network, and the roofline costs each collective on that level (``roofline``).
- GPU programs compile with ``--xla_gpu_experimental_use_collective_kernels=`` (NCCL for every
  collective, as a real cluster without XLA's experimental kernels runs them): without it a Triton
  all-reduce kernel was reported to fail to compile for 1x8x8 (the programs the tests and the
  benchmark compile build either way). The child process gets it in ``XLA_FLAGS``, and every GPU
  compile as a compiler option (``GPU_COMPILER_OPTIONS``, the same debug option).
- Autotuning needs a GPU: kernels are XLA's defaults for the target, not the autotuned ones.

The result is a ``compile_result.TargetCompile``, built once per compile; its ``to_json()`` is the
documented JSON form.

Compiles run in a child process (``python -m explorer compile ... --in-process``, started by
``compile_target``): the one loading libtpu must be the only one in this process tree to have done
so (libtpu's lock file), a compile can take minutes and must be stoppable, and the child's memory
goes back when it ends. The parent never loads libtpu. Parent and child talk through one protocol
(``child_command``, ``child_main``, ``report_stage``, ``_read_stages``, ``_read_result``): the child
writes a ``STAGE_PREFIX`` line on stderr as it enters each of ``STAGES`` and the result's JSON on
stdout. Results are cached on disk by (layout, target, versions).
"""

from __future__ import annotations

import contextlib
import dataclasses
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

from explorer.compile_result import (
    AxisPlacement,
    CollectiveCost,
    CrossCheck,
    Memory,
    MemoryLimit,
    Oom,
    Padding,
    TargetCompile,
    TargetMesh,
)
from explorer.errors import ExplorerError
from explorer.hlo import LoopWork
from explorer.layout import Layout
from explorer.targets import (
    GPU_INSTALL,
    JAX_MEMORY_FRACTION,
    MEMORY_FRACTION_ENV,
    Target,
    check_mesh_fits,
    memory_fraction,
    parse_target,
)

CACHE_FORMAT = 5  # bump when the result's shape or meaning changes (4: written by TargetCompile.to_json; 5: collectives' sources)
COMPILER_OPTIONS: dict[str, Any] = {}  # no xla_tpu_no_crash_on_oom: libtpu >= 0.0.47.1 refuses its programs
GPU_FLAG = "--xla_gpu_experimental_use_collective_kernels="  # NCCL for every collective (see the module docstring)
GPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_experimental_use_collective_kernels": ""}  # the same, for in-process compiles
GPU_PLUGINS = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
# What XLA's GPU compiler logs when a program does not fit: its rematerialization giving up, and the arguments and
# outputs alone exceeding the memory it schedules for (80% of the GPU's).
_XLA_MEMORY = re.compile(r"Can't reduce memory use below .*|The byte size of input/output arguments .*")
_E1000 = re.compile(
    r"E1000: CompileTimeHbmOom:.*?\((?P<required>[\d.]+)(?P<unit>[KMGT]?)\) exceeds available HBM \((?P<available>[\d.]+)(?P<unit2>[KMGT]?)\)",
    re.S,
)
STAGES = ("trace", "lower", "compile", "analyze")


# --- in the child: the compile itself ----------------------------------------------------------


def compile_for_target(layout: Layout, target: Target, on_stage: Callable[[str], None] | None = None) -> TargetCompile:
    """Compile ``layout``'s train step for ``target`` in this process (the child's work: ``child_main``)."""
    import flax.linen as nn
    import jax
    from jax.experimental import topologies

    from explorer import reading
    from explorer.analysis import analyze, input_shardings, model_of, state_shardings
    from explorer.train_step import abstract_inputs, make_train_step, with_sharding

    stage = on_stage or (lambda _: None)
    check_mesh_fits(target, _mesh_size(layout))
    if target.is_gpu:
        require_gpu_plugin(target)
    stage("trace")
    report = analyze(layout)
    model = model_of(layout)
    topology = _topology(target, topologies)
    mesh, method = place_mesh(list(topology.devices), tuple(layout.mesh.shape), tuple(layout.mesh.axes), layout.mesh.types)
    shardings = state_shardings(report, model, mesh)
    inputs_sharding = input_shardings(report, mesh)
    inputs = abstract_inputs(model, inputs_sharding)
    abstract_state = jax.tree_util.tree_map(with_sharding, shardings, reading.live(model).state)
    start = time.perf_counter()
    stage("lower")
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        lowered = jax.jit(
            make_train_step(model),
            in_shardings=(shardings, *inputs_sharding),
            out_shardings=shardings,
            donate_argnums=0,
        ).lower(abstract_state, *inputs)
    stage("compile")
    if target.is_gpu:
        return _compile_for_gpu(lowered, target, mesh, method, start, stage)
    dump = tempfile.mkdtemp(prefix="explorer-xla-dump-")
    try:
        try:
            compiled = lowered.compile({**COMPILER_OPTIONS, "xla_dump_to": dump})
        except Exception as error:  # XLA's own refusal: out of HBM is a result, anything else a message
            oom = parse_oom(str(error))
            if oom is None:
                raise ExplorerError("target", target.name, f"XLA could not compile the step: {_first_line(error)}") from None
            compile_s = time.perf_counter() - start
            stage("analyze")
            return analyze_dump(dump, oom, target, mesh, method, compile_s)
        compile_s = time.perf_counter() - start
        stage("analyze")
        return analyze_compiled(compiled, target, mesh, method, compile_s, cross_check=_cross_check(dump))
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def _topology(target: Target, topologies):
    """The target's devices: libtpu's topology for a TPU slice, the CUDA plugin's from XLA's target config for GPUs."""
    if target.is_gpu:
        try:
            return topologies.get_topology_desc(platform="cuda", target_config=target.chip.target_config, topology=target.gpu_topology)
        except Exception as error:  # the plugin refusing the config or the topology
            raise ExplorerError(
                "target", target.name, f"the CUDA plugin cannot describe {target.gpu_topology}: {_first_line(error)}"
            ) from None
    kwargs = {"chip_config_name": target.chip.chip_config_name} if target.chip.chip_config_name else {}
    try:
        return topologies.get_topology_desc(topology_name=target.topology, platform="tpu", **kwargs)
    except Exception as error:  # libtpu missing or refusing the name
        raise ExplorerError("target", target.name, f"libtpu cannot describe {target.topology}: {error}") from None


def gpu_plugin() -> str | None:
    """The JAX CUDA plugin this environment has (``jax_plugins.xla_cuda13``), or None; imports nothing heavy."""
    import importlib.util

    for name in GPU_PLUGINS:
        with contextlib.suppress(ImportError, ValueError):
            if importlib.util.find_spec(name) is not None:
                return name
    return None


def require_gpu_plugin(target: Target) -> None:
    """One line saying how to install the plugin, where a GPU target is asked for without it."""
    if target.is_gpu and gpu_plugin() is None:
        raise ExplorerError(
            "target",
            target.name,
            f"compiling for NVIDIA GPUs needs JAX's CUDA plugin (a compile-only install: no GPU, no CUDA libraries): {GPU_INSTALL}",
        )


def _compile_for_gpu(lowered, target: Target, mesh, method: str, start: float, stage) -> TargetCompile:
    """Compile for the GPU cluster, keeping what XLA logs about memory; XLA's GPU compiler does not refuse for memory."""
    logged: list[str] = []
    try:
        with _xla_log(logged):
            compiled = lowered.compile(GPU_COMPILER_OPTIONS)
    except Exception as error:
        raise ExplorerError("target", target.name, f"XLA could not compile the step: {_first_line(error)}") from None
    compile_s = time.perf_counter() - start
    stage("analyze")
    messages = tuple(found[0] for found in map(_XLA_MEMORY.search, logged) if found)
    return analyze_compiled(compiled, target, mesh, method, compile_s, xla_messages=messages)


@contextlib.contextmanager
def _xla_log(lines: list[str]):
    """XLA's log lines (C++ writes them to file descriptor 2) while the block runs: into ``lines``, then on to stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode(errors="replace")
            lines.extend(text.splitlines())
            sys.stderr.write(text)


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


def _cross_check(folder: str) -> CrossCheck | None:
    """What the route for a program that does not fit would have read, for a program that fits.

    The tests compare these with ``memory_analysis()`` and ``cost_analysis()``, which is what
    makes the figures of a refused program trustworthy.
    """
    from explorer import hlo

    try:
        memory = hlo.dumped_memory(
            _dumped(folder, "after_optimizations-buffer-assignment.txt"),
            _dumped(folder, "after_optimizations-memory-usage-report.txt"),
        )
        work = hlo.matmul_work(_dumped(folder, "after_optimizations.txt"))
    except (OSError, ValueError):
        return None
    return CrossCheck(Memory(**memory), work.flops)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_oom(message: str) -> Oom | None:
    """E1000's figures (bytes, as XLA rounds them: two decimals of its unit), or None for another error.

    >>> parse_oom("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory "
    ...           "required for HLO temporaries (25.00G) exceeds available HBM (15.75G). HLO module: jit_train_step.").available_bytes
    16911433728
    """
    found = _E1000.search(message)
    if found is None:
        return None
    return Oom(
        required_bytes=round(float(found["required"]) * _UNITS[found["unit"]]),
        available_bytes=round(float(found["available"]) * _UNITS[found["unit2"]]),
        message=_first_line(Exception(message)),
    )


def _dumped(folder: str, suffix: str) -> str:
    """The text of the train step's dump file ending in ``suffix`` (the largest if several modules match)."""
    names = [n for n in os.listdir(folder) if "jit_train_step" in n and n.endswith(suffix)]
    if not names:
        raise FileNotFoundError(suffix)
    name = max(names, key=lambda n: os.path.getsize(os.path.join(folder, n)))
    with open(os.path.join(folder, name)) as handle:
        return handle.read()


def analyze_dump(folder: str, oom: Oom, target: Target, mesh, method: str, compile_s: float) -> TargetCompile:
    """The result for a program XLA refused for HBM, read from its dump (see the module docstring)."""
    from explorer import hlo

    try:
        memory = hlo.dumped_memory(
            _dumped(folder, "after_optimizations-buffer-assignment.txt"),
            _dumped(folder, "after_optimizations-memory-usage-report.txt"),
        )
        text = _dumped(folder, "after_optimizations.txt")
    except (OSError, ValueError):  # no dump: E1000's own figures only
        return _result(target, mesh, method, compile_s, Memory(peak_bytes=oom.required_bytes), None, None, [], "", oom)
    work = hlo.matmul_work(text)
    return _result(target, mesh, method, compile_s, Memory(**memory), work.flops, work.bytes, _mesh_collectives(text, mesh), text, oom)


def _mesh_size(layout: Layout) -> int:
    size = 1
    for s in layout.mesh.shape:
        size *= s
    return size


def analyze_compiled(
    compiled,
    target: Target,
    mesh,
    method: str,
    compile_s: float,
    *,
    xla_messages: tuple[str, ...] = (),
    cross_check: CrossCheck | None = None,
) -> TargetCompile:
    """The result from a program XLA compiled for ``target`` on ``mesh`` (laid out by ``method``)."""
    from explorer import hlo

    stats = compiled.memory_analysis()
    arguments, outputs, aliased, temporaries = (
        int(stats.argument_size_in_bytes),
        int(stats.output_size_in_bytes),
        int(stats.alias_size_in_bytes),
        int(stats.temp_size_in_bytes),
    )
    memory = Memory(
        argument_bytes=arguments,
        output_bytes=outputs,
        alias_bytes=aliased,
        temp_bytes=temporaries,
        peak_bytes=int(stats.peak_memory_in_bytes) or arguments + outputs - aliased + temporaries,
        generated_code_bytes=int(stats.generated_code_size_in_bytes),
    )
    cost = compiled.cost_analysis() or {}
    text = compiled.as_text()
    extra = hlo.loop_work(text)
    if target.is_gpu:  # no cost_analysis(): the optimized program's dots, loops counted per iteration
        work = hlo.matmul_work(text)
        flops, bytes_accessed, source = work.flops, work.bytes, "hlo_matmuls"
    else:
        flops = float(cost.get("flops", 0.0)) + extra.flops
        bytes_accessed = float(cost.get("bytes accessed", 0.0)) + extra.bytes
        source = "cost_analysis"
    return _result(
        target,
        mesh,
        method,
        compile_s,
        memory,
        flops,
        bytes_accessed,
        _mesh_collectives(text, mesh, target),
        text,
        None,
        source=source,
        loop_work=extra,
        xla_messages=xla_messages,
        cross_check=cross_check,
    )


def _mesh_collectives(text: str, mesh, target: Target | None = None) -> list:
    import numpy as np

    from explorer import hlo

    coords = np.array([_coords(d) for d in mesh.devices.flat])
    hosts = np.array([_host(d, target) for d in mesh.devices.flat]) if target is not None and target.is_gpu else None
    return aggregate_collectives(
        hlo.collective_ops(text, mesh.size), tuple(mesh.devices.shape), tuple(mesh.axis_names), coords, hosts, text
    )


def memory_limit(target: Target) -> MemoryLimit:
    """The figure the verdict compares XLA's peak with, and what it is.

    A TPU chip's HBM (XLA itself refuses a program that exceeds it); on a GPU, what JAX's
    GPU client lets one process use: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the memory the
    GPU's target config gives, 75% by default (https://docs.jax.dev/en/latest/gpu_memory_allocation.html).
    """
    from explorer.text import human_bytes

    device = target.chip.device_hbm_bytes
    if not target.is_gpu:
        return MemoryLimit(device, device, 1.0, f"the device's {human_bytes(device)} of HBM")
    fraction = memory_fraction()
    chosen = os.environ.get(MEMORY_FRACTION_ENV, "").strip()
    how = (
        f"with {MEMORY_FRACTION_ENV}={chosen}"
        if chosen and fraction != JAX_MEMORY_FRACTION
        else f"by default ({MEMORY_FRACTION_ENV}, 0.75)"
    )
    return MemoryLimit(
        int(device * fraction),
        device,
        fraction,
        f"{fraction:.0%} of the GPU's {human_bytes(device)} (its memory in XLA's target config): what JAX lets one process use {how}",
    )


def with_verdict(result: TargetCompile, target: Target) -> TargetCompile:
    """``result`` with its target's figures, memory limit and verdict for this environment (a cached result was
    judged where it was compiled; the GPU memory fraction may differ here)."""
    peak, limit = result.memory.peak_bytes, memory_limit(target)
    return dataclasses.replace(
        result,
        target=target,
        memory_limit=limit,
        fits=bool(result.compiled and peak <= limit.bytes),
        fits_device=bool(result.compiled and peak <= limit.device_bytes),
        headroom_bytes=limit.bytes - peak,
    )


def _result(
    target: Target,
    mesh,
    method: str,
    compile_s: float,
    memory: Memory,
    flops,
    bytes_accessed,
    collectives: list,
    text: str,
    oom: Oom | None,
    *,
    source: str | None = None,
    loop_work: LoopWork = LoopWork(0.0, 0.0),
    xla_messages: tuple[str, ...] = (),
    cross_check: CrossCheck | None = None,
) -> TargetCompile:
    """The result, built once. ``oom`` is E1000's figures when XLA refused the program for HBM, else None."""
    from explorer import hlo, roofline

    limit = memory_limit(target)
    known = flops is not None
    source = source or ("cost_analysis" if oom is None else ("hlo_matmuls" if known else None))
    return TargetCompile(
        target=target,
        mesh=TargetMesh(tuple(mesh.devices.shape), tuple(mesh.axis_names), placement(mesh, target), method),
        compile_s=compile_s,
        compiled=oom is None,
        memory=memory,
        memory_source="memory_analysis" if oom is None else ("xla_dump" if memory.argument_bytes is not None else "e1000"),
        memory_limit=limit,
        fits=oom is None and memory.peak_bytes <= limit.bytes,
        fits_device=oom is None and memory.peak_bytes <= limit.device_bytes,
        headroom_bytes=limit.bytes - memory.peak_bytes,
        oom=oom,
        xla_messages=xla_messages,
        flops=flops,
        bytes_accessed=bytes_accessed,
        flops_source=source,
        bytes_source=source,
        loop_work=loop_work,
        padding=_padding(hlo.entry_parameters(text)) if text else None,
        collectives=tuple(CollectiveCost.of(c, target, sources) for c, sources in collectives),
        estimate=roofline.estimate(flops, bytes_accessed, [c for c, _ in collectives], target.chip) if known else None,
        cross_check=cross_check,
    )


def _host(device, target: Target) -> int:
    """The host of a GPU device: the CUDA plugin's coordinates are (partition, host, GPU); else host-major ids."""
    coords = getattr(device, "coords", None)
    return int(coords[1]) if coords is not None and len(coords) == 3 else device.id // target.gpus_per_host


def placement(mesh, target: Target | None = None) -> tuple[AxisPlacement, ...]:
    """How each logical mesh axis lies on the torus, or on a GPU cluster's hosts (``gpu_placement``)."""
    if target is not None and target.is_gpu:
        return gpu_placement(mesh, target)
    return torus_placement(mesh)


def gpu_placement(mesh, target: Target) -> tuple[AxisPlacement, ...]:
    """How each mesh axis falls on the hosts and GPUs (devices are host-major): per axis, one group's spread.

    ``hosts``: the hosts one group of the axis (the devices that differ only along it) spans;
    ``gpus_per_host``: its GPUs in each of them; ``link``: ``nvlink`` when a group stays in one
    host, ``network`` when it spans hosts; ``torus_axes`` names the levels it moves along (``host``,
    ``gpu``), as a TPU axis names its torus axes.
    """
    import numpy as np

    hosts = np.array([_host(d, target) for d in mesh.devices.flat]).reshape(mesh.devices.shape)
    out = []
    for axis, name in enumerate(mesh.axis_names):
        size = int(mesh.devices.shape[axis])
        groups = np.moveaxis(hosts, axis, -1).reshape(-1, size)
        spanned = max(len(set(g.tolist())) for g in groups)
        per_host = size // spanned
        levels = (["host"] if spanned > 1 else []) + (["gpu"] if per_host > 1 else [])
        where = (
            f"{per_host} GPU{'s' if per_host > 1 else ''} of one host, over NVLink"
            if spanned == 1
            else f"{per_host} GPU{'s' if per_host > 1 else ''} in each of {spanned} hosts, over the network"
        )
        out.append(
            AxisPlacement(
                name, size, tuple(levels), spanned, per_host, "nvlink" if spanned == 1 else "network", f"{name} ({size}): {where}"
            )
        )
    return tuple(out)


def torus_placement(mesh) -> tuple[AxisPlacement, ...]:
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
        out.append(AxisPlacement(name, int(size), tuple(names[int(a)] for a in spans)))
    return tuple(out)


def _padding(parameters) -> Padding:
    """How the arguments' tiled layout pads them: the totals and every parameter that grows."""
    return Padding(
        bytes=sum(p.bytes for p in parameters),
        padded_bytes=sum(p.padded_bytes for p in parameters),
        padded=tuple(p for p in parameters if p.padded_bytes != p.bytes),
    )


def _coords(device) -> tuple[int, ...]:
    return tuple(getattr(device, "coords", None) or (device.id,))


def aggregate_collectives(ops, mesh_shape: tuple[int, ...], mesh_axes: tuple[str, ...], coords, hosts=None, text: str = "") -> list:
    """Aggregate the program's collectives per (op, mesh axes spanned, group size, torus axes spanned, hosts spanned),
    each with the lines of the user's code its instructions come from (``sources.line_sources`` of ``text``).

    ``hosts``, for a GPU cluster, holds each mesh position's host: a group's collective crosses
    the network when its members sit on more than one.
    """
    from explorer.roofline import Collective
    from explorer.sources import line_sources

    totals: dict[tuple, list] = {}
    for op in ops:
        spanned, torus, across = _spanned(op.groups, mesh_shape, mesh_axes, coords, hosts)
        key = (op.op, spanned, op.group_size, torus, across)
        entry = totals.setdefault(key, [0, 0, []])
        entry[0] += op.runs
        entry[1] += op.runs * op.bytes
        entry[2].append(op)
    return [
        (Collective(op, count, size, axes, group, torus, across), line_sources(text, members) if text else ())
        for (op, axes, group, torus, across), (count, size, members) in sorted(totals.items(), key=lambda item: item[0])
    ]


def _spanned(groups, mesh_shape, mesh_axes, coords, hosts=None) -> tuple[tuple[str, ...], int, int]:
    """Which mesh axes the groups' members differ along, how many torus axes their chips span, and how many
    hosts the largest group spans (1 without ``hosts``).

    Ids in the groups are positions in the mesh's devices in mesh order (the program's
    device assignment); ``coords`` holds each position's chip coordinates.
    """
    import numpy as np

    if not groups:
        return (("?",) if groups is None else ()), 0, 1
    axes: set[int] = set()
    torus: set[int] = set()
    across = 1
    for group in groups:
        members = [i for i in group if i < int(np.prod(mesh_shape))]
        if len(members) < 2:
            continue
        positions = np.array(np.unravel_index(members, mesh_shape)).T
        axes.update(int(a) for a in np.nonzero(positions.min(0) != positions.max(0))[0])
        chip = coords[members]
        torus.update(int(a) for a in np.nonzero(chip.min(0) != chip.max(0))[0])
        if hosts is not None:
            across = max(across, len(set(hosts[members].tolist())))
    return tuple(mesh_axes[a] for a in sorted(axes)), len(torus), across


# --- the protocol between parent and child: how the child is started, reports its stages and sends its result --

STAGE_PREFIX = "stage: "  # the child's stderr line as it enters one of STAGES; every other line is kept for its error


def child_command(layout_path: str, target: Target) -> list[str]:
    """The child's command line. One CPU device: the child only needs the CPU backend for tracing; the target's
    devices come from libtpu (or the CUDA plugin)."""
    return [sys.executable, "-m", "explorer", "--devices", "1", "compile", layout_path, "--target", target.topology, "--in-process"]


def child_main(layout_path: str, target_name: str) -> int:
    """The child (``python -m explorer compile LAYOUT --target NAME --in-process``): compile in this process,
    reporting each stage (``report_stage``), then write the result's JSON on stdout."""
    from explorer.layout import load_layout_file

    result = compile_for_target(load_layout_file(layout_path), parse_target(target_name), on_stage=report_stage)
    json.dump(result.to_json(), sys.stdout)
    print()
    return 0


def report_stage(stage: str) -> None:
    """In the child: tell the parent that ``stage`` begins."""
    print(STAGE_PREFIX + stage, file=sys.stderr, flush=True)


def _read_stages(stream, stages: list[str], errors: list[str]) -> None:
    """In the parent: the child's stderr, its stages into ``stages``, the last 50 other lines into ``errors``."""
    for line in stream:
        line = line.rstrip("\n")
        if line.startswith(STAGE_PREFIX):
            stages.append(line[len(STAGE_PREFIX) :])
        elif line.strip():
            errors.append(line)
            del errors[:-50]


def _read_result(output: str) -> TargetCompile:
    """In the parent: the result the child wrote on stdout."""
    return TargetCompile.from_json(json.loads(output))


# --- in the parent: a child process, live stages, stop, the disk cache ---------------------------


def versions() -> dict[str, str]:
    found = {}
    for package in ("jax", "jaxlib", "libtpu", "jax-cuda13-plugin", "flax", "optax"):
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


def cached(layout: Layout, target: Target) -> TargetCompile | None:
    """The cached result for (layout, target, versions), or None; a corrupt entry is dropped."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return None
    try:
        with open(path) as handle:
            result = TargetCompile.from_json(json.load(handle))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not a result (a writer that died half-way)
        with contextlib.suppress(OSError):
            os.remove(path)
        return None
    return with_verdict(result, target)


def _store(layout: Layout, target: Target, result: TargetCompile) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``; concurrent writers both win."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(result.to_json(), out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def child_environment(target: Target | None = None) -> dict[str, str]:
    """CPU as JAX's backend (libtpu or the CUDA plugin is only asked for a topology), and libtpu's lock not held against us.

    For a GPU target, ``XLA_FLAGS`` gains ``--xla_gpu_experimental_use_collective_kernels=`` (see the
    module docstring), and XLA's warnings are logged (``TF_CPP_MIN_LOG_LEVEL=1`` unless the user chose):
    its rematerialization lines say when a program does not fit the GPU.
    """
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    if target is not None and target.is_gpu:
        flags = env.get("XLA_FLAGS", "")
        if "xla_gpu_experimental_use_collective_kernels" not in flags:
            env["XLA_FLAGS"] = f"{flags} {GPU_FLAG}".strip()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
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
) -> tuple[TargetCompile, bool]:
    """The result for (layout, target) and whether it came from the disk cache.

    Otherwise compiles in a child process, calling ``on_stage(stage, elapsed_s)`` as
    the child reports stages and every ``poll_s``; ``should_stop()`` returning True
    kills the child (and its process group) and raises ``Stopped``. ``on_start``
    gets the child's process id.
    """
    target = parse_target(target) if isinstance(target, str) else target
    check_mesh_fits(target, _mesh_size(layout))
    require_gpu_plugin(target)
    hit = cached(layout, target)
    if hit is not None:
        return hit, True
    report = on_stage or (lambda *_: None)
    with tempfile.TemporaryDirectory(prefix="explorer-compile-") as folder:
        path = os.path.join(folder, "layout.json")
        with open(path, "w") as handle:
            json.dump(layout.to_dict(), handle)
        child = subprocess.Popen(
            child_command(path, target),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_environment(target),
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            start_new_session=True,
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
    result = with_verdict(_read_result(output), target)
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


def stop(child: subprocess.Popen) -> None:
    """Kill the child's process group and reap it."""
    if child.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
