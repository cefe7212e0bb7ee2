"""Compile the layout's train step for a TPU slice or GPU cluster this machine does not have, in this process.

This module's one job is the compile itself, the work of the compile child (``target_compile.child_main``
calls ``compile_for_target``); reading what XLA built is ``xla_results``, laying the mesh over the target's
devices is ``placement``. The recipe is MaxText's ``train_compile.py``: ``get_topology_desc`` gives the devices
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
result is read from the dump (``xla_results.analyze_dump``). The same files give every compile's memory breakdown (the
buffers live at the peak and what each holds: ``memory_breakdown``), a GPU cluster's too.

An NVIDIA GPU cluster (``h100:2x8``) takes the same path with JAX's CUDA plugin in place of
libtpu, and no GPU: ``get_topology_desc(platform="cuda", target_config=..., topology="1x2x8")``
describes the cluster from XLA's own GPU target config (``explorer/hardware/gpu_targets/``), and the
program is compiled for it as for a TPU slice. What differs:

- XLA's GPU compiler never refuses a program for memory: it plans buffers against the target
  config's memory (its rematerialization pass tries to bring the program under about 80% of it and
  logs ``Can't reduce memory use below ...`` when it cannot), and ``memory_analysis()`` then gives the
  figures. What XLA logs about it (its rematerialization giving up, arguments and outputs exceeding
  the memory it schedules for) is kept under ``xla_messages``.
- GPU programs compile with ``--xla_gpu_experimental_use_collective_kernels=`` (NCCL for every
  collective, as a real cluster without XLA's experimental kernels runs them): without it a Triton
  all-reduce kernel was reported to fail to compile for 1x8x8 (the programs the tests and the
  benchmark compile build either way). The child process gets it in ``XLA_FLAGS``, and every GPU
  compile as a compiler option (``GPU_COMPILER_OPTIONS``, the same debug option).
- Autotuning needs a GPU: kernels are XLA's defaults for the target, not the autotuned ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

from explorer.compile import memory_breakdown
from explorer.compile.compile_result import TargetCompile
from explorer.errors import ExplorerError, first_line
from explorer.layout import Layout
from explorer.hardware.placement import place_mesh, target_topology
from explorer.hardware.targets import Target, check_mesh_fits, slice_split
from explorer.compile.xla_results import analyze_compiled, analyze_dump, dump_cross_check, parse_oom
from explorer.analysis.stage_plan import pipeline_of

COMPILER_OPTIONS: dict[str, Any] = {}  # no xla_tpu_no_crash_on_oom: libtpu >= 0.0.47.1 refuses its programs
GPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_experimental_use_collective_kernels": ""}  # the same, for in-process compiles
GPU_PLUGINS = ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")
GPU_INSTALL = 'pip install "partition-explorer[gpu]"'
# What XLA's GPU compiler logs when a program does not fit: its rematerialization giving up, and the arguments and
# outputs alone exceeding the memory it schedules for (80% of the GPU's).
_XLA_MEMORY = re.compile(r"Can't reduce memory use below .*|The byte size of input/output arguments .*")


def compile_for_target(layout: Layout, target: Target, on_stage: Callable[[str], None] | None = None) -> TargetCompile:
    """Compile ``layout``'s train step for ``target`` in this process (the child's work: ``target_compile.child_main``)."""
    import flax.linen as nn
    import jax
    from explorer import reading
    from explorer.analysis.analyzer import analyze, input_shardings, model_of, state_shardings
    from explorer.compile.train_step import abstract_inputs, argument_kinds, make_train_step, with_sharding

    stage = on_stage or (lambda _: None)
    check_mesh_fits(target, layout.mesh.size)
    shape, axes = tuple(layout.mesh.shape), tuple(layout.mesh.axes)
    dcn = slice_split(target, shape, axes, layout.mesh.dcn)  # per axis, the slices it spans (all 1 on one slice)
    if target.is_gpu:
        require_gpu_plugin(target)
    stage("trace")
    report = analyze(layout)
    model = model_of(layout)
    topology = target_topology(target)
    mesh, method = place_mesh(list(topology.devices), shape, axes, layout.mesh.types, dcn)
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
    arguments = argument_kinds(model.framework, abstract_state, inputs)  # what each entry parameter holds
    dump = tempfile.mkdtemp(prefix="explorer-xla-dump-")
    try:
        if target.is_gpu:
            result = _compile_for_gpu(lowered, target, mesh, method, start, stage, pipeline_of(layout), dump)
            return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, arguments))
        try:
            compiled = lowered.compile({**COMPILER_OPTIONS, "xla_dump_to": dump})
        except Exception as error:  # XLA's own refusal: out of HBM is a result, anything else a message
            oom = parse_oom(str(error))
            if oom is None:
                raise ExplorerError(
                    "target", target.name, f"XLA could not compile the step: {first_line(error)}{libtpu_hint(error)}"
                ) from None
            compile_s = time.perf_counter() - start
            stage("analyze")
            result = analyze_dump(dump, oom, target, mesh, method, compile_s)
            return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, arguments))
        compile_s = time.perf_counter() - start
        stage("analyze")
        result = analyze_compiled(
            compiled, target, mesh, method, compile_s, cross_check=dump_cross_check(dump), pipeline=pipeline_of(layout)
        )
        return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, arguments))
    finally:
        shutil.rmtree(dump, ignore_errors=True)


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


def _compile_for_gpu(
    lowered, target: Target, mesh, method: str, start: float, stage, pipeline=None, dump: str | None = None
) -> TargetCompile:
    """Compile for the GPU cluster, keeping what XLA logs about memory (and its files in ``dump``, where given); XLA's
    GPU compiler does not refuse for memory."""
    logged: list[str] = []
    try:
        with _xla_log(logged):
            compiled = lowered.compile(GPU_COMPILER_OPTIONS | ({"xla_dump_to": dump} if dump else {}))
    except Exception as error:
        raise ExplorerError("target", target.name, f"XLA could not compile the step: {first_line(error)}") from None
    compile_s = time.perf_counter() - start
    stage("analyze")
    messages = tuple(found[0] for found in map(_XLA_MEMORY.search, logged) if found)
    return analyze_compiled(compiled, target, mesh, method, compile_s, xla_messages=messages, pipeline=pipeline)


SCOPED_VMEM_HINT = (
    " (a kernel's blocks need more of the TPU's scoped VMEM than XLA gives by default: the runs that use such blocks raise "
    "it in LIBTPU_INIT_ARGS, e.g. tpu-recipes' v6e configs' --xla_tpu_scoped_vmem_limit_kib=98304; set the run's "
    "LIBTPU_INIT_ARGS for this compile too, or take smaller blocks)"
)


def libtpu_hint(error: Exception) -> str:
    """What to do about a TPU compile error that a run's own libtpu flags avoid (the compile child passes
    ``LIBTPU_INIT_ARGS`` on to libtpu as a run does), else nothing.

    >>> libtpu_hint(RuntimeError("RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: ...")).startswith(" (a kernel")
    True
    >>> libtpu_hint(RuntimeError("INVALID_ARGUMENT: something else"))
    ''
    """
    return SCOPED_VMEM_HINT if "CompileTimeScopedVmemOom" in str(error) else ""


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
