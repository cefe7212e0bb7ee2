"""Compile a layout's step for a TPU slice or GPU cluster this machine does not have, in this process.

This module's one job is the compile itself, the work of the compile child (``target_compile.child_main``
calls ``compile_for_target``); reading what XLA built is ``xla_results``, laying the mesh over the target's
devices is ``placement``. Three sources lower a step (``LoweredStep``) and one tail compiles and reads it
(``compile_lowered``): the explorer's train step around a layout's model (``_explorer_step``, below), MaxText's own
train step for a ``maxtext`` layout (``models.maxtext.lower_train_step``: the program ``train_compile.py`` compiles),
and a user's own jitted function (a step layout's factory, or ``explorer.plan``: ``compile.jitted``). The recipe is MaxText's ``train_compile.py``: ``get_topology_desc`` gives the devices
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
from explorer.hardware.devices import compile_flags
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


@dataclasses.dataclass(frozen=True)
class LoweredStep:
    """A step lowered for a target's devices: what the one compile-and-read tail (``compile_lowered``) takes, whoever
    wrote the step (the explorer's train step for a layout, MaxText's own for a ``maxtext`` layout, a user's jitted
    function: ``compile_for_target`` makes one of each, ``notebook.plan`` the last)."""

    lowered: Any  # jax.stages.Lowered
    mesh: Any  # the jax Mesh over the target's devices that the program's shardings name
    method: str  # how that mesh lies on the devices (placement.PLACEMENTS; "maxtext": MaxText's create_device_mesh)
    program: str  # what was lowered, in words (TargetCompile.program)
    started: float  # time.perf_counter() when its trace began: the compile's time counts from there
    compiler_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # besides the explorer's (MaxText's compile_xla_flags)
    pipeline: tuple[int, int] | None = None  # a pipelined built-in transformer's (stages, trip count): its bubble
    # what each entry parameter holds, (path, kind, shape) in XLA's order (``train_step.argument_kinds``): the memory
    # breakdown's kinds; () for a user's step, whose parameters are "argument"s
    arguments: tuple[tuple[str, str, tuple[int, ...]], ...] = ()


EXPLORER_STEP = "the explorer's train step (the Flax guides' recipe: the model's loss, Adam, the state donated)"
MAXTEXT_STEP = "MaxText's own train step (train_compile.py's program for these keys: its train_step, state, optimizer)"


def compile_for_target(layout: Layout, target: Target, on_stage: Callable[[str], None] | None = None) -> TargetCompile:
    """Compile ``layout``'s step for ``target`` in this process (the child's work: ``target_compile.child_main``): a
    ``maxtext`` layout's is MaxText's own train step, a step layout's the user's jitted function, any other the
    explorer's train step around the layout's model."""
    from explorer.models import MAXTEXT, STEP

    stage = on_stage or (lambda _: None)
    check_mesh_fits(target, layout.mesh.size)
    if target.is_gpu:
        require_gpu_plugin(target)
    stage("trace")
    if layout.model.name == MAXTEXT:
        step = _maxtext_step(layout, target, stage)
    elif layout.model.name == STEP:
        step = _user_step(layout, target, stage)
    else:
        step = _explorer_step(layout, target, stage)
    return compile_lowered(step, target, stage)


def target_mesh(layout: Layout, target: Target):
    """The layout's mesh laid over the target's devices (``placement.place_mesh``; on several slices each axis spanning
    the slices ``targets.slice_split`` gives it), and how: ``(mesh, method)``."""
    shape, axes = tuple(layout.mesh.shape), tuple(layout.mesh.axes)
    dcn = slice_split(target, shape, axes, layout.mesh.dcn)  # per axis, the slices it spans (all 1 on one slice)
    return place_mesh(list(target_topology(target).devices), shape, axes, layout.mesh.types, dcn)


def _user_step(layout: Layout, target: Target, stage: Callable[[str], None]) -> LoweredStep:
    """A step layout's own jitted function (``models.steps.factory_step``: its allow-listed factory given the target's mesh,
    built from the layout's), lowered under that mesh."""
    from explorer.compile.jitted import lower_on, name_of
    from explorer.models.steps import factory_step

    mesh, method = target_mesh(layout, target)
    factory = layout.model.options["factory"]
    start = time.perf_counter()
    fn, args, kwargs = factory_step(factory, {k: v for k, v in layout.model.options.items() if k != "factory"}, mesh)
    stage("lower")
    return LoweredStep(lower_on(fn, args, kwargs, mesh), mesh, method, f"your own step, {name_of(fn)} from {factory}", start)


def _explorer_step(layout: Layout, target: Target, stage: Callable[[str], None]) -> LoweredStep:
    """The explorer's train step for ``layout`` lowered with abstract arguments carrying its shardings on the target's
    devices (``placement.place_mesh``), the train state donated."""
    import flax.linen as nn
    import jax
    from explorer import reading
    from explorer.analysis.analyzer import analyze, input_shardings, model_of, state_shardings
    from explorer.compile.train_step import abstract_inputs, argument_kinds, make_train_step, with_sharding

    report = analyze(layout)
    model = model_of(layout)
    mesh, method = target_mesh(layout, target)
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
    arguments = argument_kinds(model.framework, abstract_state, inputs)
    return LoweredStep(lowered, mesh, method, EXPLORER_STEP, start, pipeline=pipeline_of(layout), arguments=arguments)


def _maxtext_step(layout: Layout, target: Target, stage: Callable[[str], None]) -> LoweredStep:
    """MaxText's own train step for the layout's keys on the target (``maxtext.lower_train_step``: train_compile.py's
    recipe, MaxText's functions called in its order), its mesh MaxText's own over libtpu's description of the slice."""
    from explorer.compile.train_step import argument_kinds
    from explorer.models import maxtext

    start = time.perf_counter()
    maxtext.as_main_does()  # before libtpu loads (the keys' mesh below describes the slice)
    keys = maxtext.program_keys(
        layout.model.options, target.name, layout.mesh.shape, layout.mesh.axes, layout.mesh.dcn, layout.rules_for_flax()
    )
    stage("lower")
    lowered, mesh, options = maxtext.lower_train_step(keys)
    (state, *inputs), _ = lowered.args_info  # train_step(state, batch, rng): MaxText's TrainState holds .params, .opt_state
    arguments = argument_kinds("linen", state, tuple(inputs))
    return LoweredStep(lowered, mesh, "maxtext", MAXTEXT_STEP, start, options, arguments=arguments)


def compile_lowered(step: LoweredStep, target: Target, on_stage: Callable[[str], None] | None = None) -> TargetCompile:
    """The one compile-and-read tail: ``step`` compiled for ``target`` (TPU: with ``xla_dump_to``, so that a program XLA
    refuses for HBM is read from its dump; GPU: XLA's memory messages kept) and read into a ``TargetCompile`` with the
    flags it ran under (``devices.compile_flags`` of this process's environment, as libtpu and XLA read them)."""
    stage = on_stage or (lambda _: None)
    stage("compile")
    flags = tuple(compile_flags(target, dict(os.environ)).items())
    facts = {"flags": flags, "program": step.program, "donated": _donated(step.lowered)}
    dump = tempfile.mkdtemp(prefix="explorer-xla-dump-")
    try:
        if target.is_gpu:
            result = _compile_for_gpu(step, target, stage, dump)
            return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, step.arguments), **facts)
        try:
            compiled = step.lowered.compile({**COMPILER_OPTIONS, **step.compiler_options, "xla_dump_to": dump})
        except Exception as error:  # XLA's own refusal: out of HBM is a result, anything else a message
            oom = parse_oom(str(error))
            if oom is None:
                raise ExplorerError(
                    "target", target.name, f"XLA could not compile the step: {first_line(error)}{libtpu_hint(error, flags)}"
                ) from None
            compile_s = time.perf_counter() - step.started
            stage("analyze")
            result = analyze_dump(dump, oom, target, step.mesh, step.method, compile_s)
            return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, step.arguments), **facts)
        compile_s = time.perf_counter() - step.started
        stage("analyze")
        result = analyze_compiled(
            compiled, target, step.mesh, step.method, compile_s, cross_check=dump_cross_check(dump), pipeline=step.pipeline
        )
        return dataclasses.replace(result, memory_breakdown=memory_breakdown.from_dump(dump, step.arguments), **facts)
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def _donated(lowered) -> bool:
    """Whether the program donates any of its arguments (``Lowered.args_info``: each argument's ``donated``)."""
    import jax

    return any(getattr(info, "donated", False) for info in jax.tree_util.tree_leaves(lowered.args_info))


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


def _compile_for_gpu(step: LoweredStep, target: Target, stage, dump: str | None = None) -> TargetCompile:
    """Compile for the GPU cluster, keeping what XLA logs about memory (and its files in ``dump``, where given); XLA's
    GPU compiler does not refuse for memory."""
    logged: list[str] = []
    try:
        with _xla_log(logged):
            compiled = step.lowered.compile({**GPU_COMPILER_OPTIONS, **step.compiler_options, **({"xla_dump_to": dump} if dump else {})})
    except Exception as error:
        raise ExplorerError("target", target.name, f"XLA could not compile the step: {first_line(error)}") from None
    compile_s = time.perf_counter() - step.started
    stage("analyze")
    messages = tuple(found[0] for found in map(_XLA_MEMORY.search, logged) if found)
    return analyze_compiled(compiled, target, step.mesh, step.method, compile_s, xla_messages=messages, pipeline=step.pipeline)


SCOPED_VMEM_HINT = (
    " (a kernel's blocks need more of the TPU's scoped VMEM than XLA gives by default: the runs that use such blocks raise "
    "it in LIBTPU_INIT_ARGS, e.g. tpu-recipes' v6e configs' --xla_tpu_scoped_vmem_limit_kib=98304; set the run's "
    "LIBTPU_INIT_ARGS for this compile too, or take smaller blocks)"
)


def libtpu_hint(error: Exception, flags: tuple[tuple[str, str], ...] = ()) -> str:
    """What to do about a TPU compile error that a run's own libtpu flags avoid (the compile child passes
    ``LIBTPU_INIT_ARGS`` on to libtpu as a run does), or the flags of ``flags`` the error names (flags libtpu accepts
    at load but refuses for this chip or program): each flag whose name the error quotes, and the flags of its family
    (the quoted name followed by ``_...``: libtpu 0.0.50.1 refuses all-gather's continuation fusion on v6e and asks for
    ``xla_tpu_enable_async_collective_fusion=false``, which its ``..._fuse_all_gather=true`` still enables; a member
    set to false is kept), else nothing.

    >>> libtpu_hint(RuntimeError("RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: ...")).startswith(" (a kernel")
    True
    >>> libtpu_hint(RuntimeError("INVALID_ARGUMENT: something else"))
    ''
    >>> libtpu_hint(RuntimeError("not supported on platforms other than TPU v5e. Disable it with xla_tpu_x_fusion=false"),
    ...             (("LIBTPU_INIT_ARGS", "--xla_tpu_x_fusion=true --xla_tpu_x_fusion_all_gather=true --xla_tpu_x_fusion_ar=false"),))
    ' (refused: LIBTPU_INIT_ARGS has --xla_tpu_x_fusion=true --xla_tpu_x_fusion_all_gather=true; leave them out for this target)'
    """
    text = str(error)
    if "CompileTimeScopedVmemOom" in text:
        return SCOPED_VMEM_HINT
    quoted = set(re.findall(r"(?<![\w-])(xla_\w+)", text))
    for variable, value in flags:
        named = [w for w in value.split() if any(_name(w) == q or (_name(w).startswith(q + "_") and not _off(w)) for q in quoted)]
        if named:
            return f" (refused: {variable} has {' '.join(named)}; leave {'them' if len(named) > 1 else 'it'} out for this target)"
    return ""


def _off(word: str) -> bool:
    """A flag that turns something off (``--xla_x=false``): a family member the refusal does not ask to leave out."""
    return word.partition("=")[2].lower() in ("false", "0", "disabled")


def _name(word: str) -> str:
    """A flag's name: ``--xla_a=1`` -> ``xla_a``."""
    return word.lstrip("-").split("=", 1)[0]


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
