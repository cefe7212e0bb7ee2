"""Compiling the layout's train step on this process's devices, and reading what XLA built.

The step is the Flax guide's (``explorer.compile.train_step``, which the target compile uses too):
``jax.jit(init, out_shardings=...)`` builds the state, and the train step is
jitted with in and out shardings and the state donated (``donate_argnums=0``: its output reuses the
state's buffers, as every training loop and the target compile do), traced under ``jax.set_mesh`` and
``nn.logical_axis_rules``. Shardings come from the analysis. Compiled steps are kept
in a bounded cache keyed by the layout without its name. The readers turn
``memory_analysis()`` and ``cost_analysis()`` into plain numbers, and the forward pass
compiled with every module output tells which shardings XLA chose for activations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec

from explorer import reading
from explorer import caches
from explorer.compile import memory_breakdown
from explorer.compile.memory_breakdown import MemoryBreakdown
from explorer.compile.train_step import abstract_inputs, argument_kinds, make_init, make_train_step, with_sharding
from explorer.analysis.analyzer import analyze, input_shardings, model_of, state_shardings
from explorer.analysis.report import Report
from explorer.meshes import layout_mesh
from explorer.analysis.findings import indivisible_error
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.specs import normal_spec
from explorer.hardware.accelerators import CHIPS, GPUS, Chip, Gpu

MEMORY_FRACTION = 0.6  # refuse a timing whose host footprint (estimated, then XLA's) exceeds this share of available memory
CACHE_SIZE = 4


@dataclasses.dataclass(frozen=True)
class ActivationCheck:
    """A module output: the sharding XLA chose for it, and the one the model declared (if any)."""

    path: str
    shape: tuple[int, ...]
    chosen: tuple[Any, ...]
    declared: tuple[Any, ...] | None

    @property
    def differs(self) -> bool:
        return self.declared is not None and self.declared != self.chosen


@dataclasses.dataclass(frozen=True)
class CompiledStep:
    """A compiled init and train step for one layout, with what XLA says about them."""

    init: Any
    step: Any
    input_shardings: tuple[NamedSharding, ...]
    compile_s: float
    activations: tuple[ActivationCheck, ...]
    mesh: Any = None  # the jax Mesh both were compiled for
    memory_breakdown: MemoryBreakdown | None = None  # the step's buffers live at its peak, from XLA's dump of its compile


# --- guard rails ---------------------------------------------------------------------------


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else physical memory."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_footprint_bytes(report: Report) -> int:
    """A rough upper bound of host memory for timing on simulated devices.

    Every simulated device lives in this process's memory: per device, the state is
    held as input and output, gradients and Adam's update as temporaries (~2x
    params), plus inputs and declared activations.
    """
    return device_footprint_bytes(report) * report.mesh.size


def device_footprint_bytes(report: Report) -> int:
    """``host_footprint_bytes`` for one device: the first gate's estimate where each device has its own memory."""
    t = report.totals
    return 2 * (t.param_bytes + t.opt_state_bytes) + 2 * t.param_bytes + t.input_bytes + t.activation_bytes


def timing_device():
    """The device whose kind and memory the gates and the result read: this process's first."""
    return jax.local_devices()[0]


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """Where a timing's buffers live, and how much of it the gates allow.

    Simulated CPU devices all live in this host's RAM: every device's need together against
    ``MEMORY_FRACTION`` of the host's available memory. An accelerator holds its own buffers: one
    device's need against its memory, ``memory_stats()['bytes_limit']`` (what JAX allows itself) where
    the backend gives it, else the device kind's figure (``targets``: on a GPU, JAX's default share).
    """

    device: str  # "the host" for simulated devices, else the device's kind ("NVIDIA H200")
    simulated: bool
    limit_bytes: int  # what the gates allow: for the host, MEMORY_FRACTION of ``available_bytes``
    available_bytes: int
    source: str  # where ``available_bytes`` comes from

    def needed(self, per_device: int, devices: int) -> int:
        """What the gate compares with ``limit_bytes``: every simulated device's, or one accelerator's."""
        return per_device * devices if self.simulated else per_device

    def refusal(self, needed: int, what: str) -> str:
        """An accelerator's message for ``needed`` bytes over its limit, naming the device (``what``: where the figure comes from)."""
        return (
            f"would need {needed / 2**30:,.2f} GiB on the {self.device}, of its {self.available_bytes / 2**30:,.2f} GiB "
            f"({self.source}): {what}"
        )


def memory_budget(device=None) -> MemoryBudget:
    """The budget for timing on ``device`` (default ``timing_device()``), see ``MemoryBudget``."""
    device = device if device is not None else timing_device()
    if device.platform == "cpu":
        available = available_memory_bytes()
        return MemoryBudget("the host", True, int(MEMORY_FRACTION * available), available, "MemAvailable")
    stats = memory_stats_of(device)
    if stats.get("bytes_limit"):
        return MemoryBudget(device.device_kind, False, int(stats["bytes_limit"]), int(stats["bytes_limit"]), "JAX's limit")
    chip = accelerator_of(device)
    if chip is None:
        raise ExplorerError(
            "device",
            device.device_kind,
            "gives no memory_stats() and is not in the accelerator table (explorer.hardware.targets): its memory is unknown, "
            "so the timing is refused before anything is allocated",
        )
    usable = chip.usable_bytes if isinstance(chip, Gpu) else chip.device_hbm_bytes
    source = "JAX's default share of its memory, by its kind" if isinstance(chip, Gpu) else "its HBM, by its kind"
    return MemoryBudget(device.device_kind, False, usable, usable, source)


def memory_stats_of(device) -> dict[str, int]:
    """``device.memory_stats()``, or {} where the backend gives none (CPU returns None; some backends raise)."""
    try:
        return device.memory_stats() or {}
    except (RuntimeError, NotImplementedError):
        return {}


def accelerator_of(device) -> Chip | Gpu | None:
    """The table's entry (``targets.CHIPS``, ``targets.GPUS``) for ``device``'s kind; None for a CPU or an unknown kind."""
    kind = device.device_kind
    for entry in (*CHIPS.values(), *GPUS.values()):
        if entry.device_kind == kind or (isinstance(entry, Gpu) and kind.startswith(f"NVIDIA {entry.generation.upper()}")):
            return entry
    return None


def check_timeable(report: Report) -> None:
    """Refuse layouts that cannot be timed here, before compiling: the first gate, with the numbers.

    A planned mesh, a dimension the mesh does not divide (the Layout page's message),
    and a state whose estimated footprint does not fit (``memory_budget``). ``check_compiled_memory`` is
    the second gate, after compiling and before anything is allocated.
    """
    if report.mesh.abstract:
        raise ExplorerError(
            "mesh.shape",
            list(report.mesh.shape),
            f"needs {report.mesh.size:,} devices and this process has {jax.device_count()}: "
            "it can be analyzed as a planned mesh but not timed",
        )
    refused = [w for w in report.warnings if w.code in ("unknown-mesh-axis", "mesh-axis-twice")]
    if refused:
        raise ExplorerError(
            "rules", [list(r) for r in report.layout.rules_for_flax()], f"give a sharding JAX refuses: {refused[0].message}"
        )
    indivisible = indivisible_error(report)
    if indivisible:
        raise indivisible
    budget = memory_budget()
    needed = budget.needed(device_footprint_bytes(report), report.mesh.size)
    if needed > budget.limit_bytes:
        if budget.simulated:
            problem = (
                f"would need about {needed / 2**30:,.1f} GiB on the host to time ({report.mesh.size} simulated devices); "
                f"{budget.available_bytes / 2**30:,.1f} GiB are available and the limit is {MEMORY_FRACTION:.0%} of that"
            )
        else:
            problem = budget.refusal(needed, "the analysis' estimate of one device's state, gradients, inputs and activations")
        raise ExplorerError("model", report.layout.model.name, problem)


def compiled_peak_bytes(compiled) -> int:
    """Bytes one device needs while running ``compiled``, by XLA's ``memory_analysis()``.

    Arguments and outputs are live together with the temporaries; aliased outputs
    reuse their argument's buffer.
    """
    stats = compiled.memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def check_compiled_memory(step: "CompiledStep", report: Report) -> None:
    """The second gate: refuse, with XLA's numbers, a step whose compiled peak does not fit (``memory_budget``).

    Simulated devices all live in this process, so the host needs the per-device peak times the
    device count; an accelerator needs one device's peak. Runs after compiling and before anything is allocated.
    """
    per_device = max(compiled_peak_bytes(step.init), compiled_peak_bytes(step.step))
    budget = memory_budget()
    needed = budget.needed(per_device, report.mesh.size)
    if needed > budget.limit_bytes:
        stats = step.step.memory_analysis()
        analysis = (
            f"XLA's compiled memory analysis gives {per_device / 2**30:,.2f} GiB per device (arguments "
            f"{stats.argument_size_in_bytes / 2**30:,.2f} + outputs {stats.output_size_in_bytes / 2**30:,.2f} + temporaries "
            f"{stats.temp_size_in_bytes / 2**30:,.2f} - aliased {stats.alias_size_in_bytes / 2**30:,.2f} GiB for the step)"
        )
        if budget.simulated:
            problem = (
                f"would need {needed / 2**30:,.2f} GiB on the host to time: {analysis} x {report.mesh.size} simulated devices; "
                f"{budget.available_bytes / 2**30:,.1f} GiB are available and the limit is {MEMORY_FRACTION:.0%} of that. "
                "Nothing was allocated."
            )
        else:
            problem = budget.refusal(needed, f"{analysis}. Nothing was allocated.")
        raise ExplorerError("model", report.layout.model.name, problem)


# --- compiling ------------------------------------------------------------------------------


def compile_step(layout: Layout, report: Report | None = None) -> tuple[CompiledStep, bool]:
    """The compiled init and step for ``layout`` (analyzed as ``report``), and whether it came from the bounded cache.

    Kept per ``Layout.key`` (a renamed layout is the same program). Both gates run: the estimate
    before compiling, XLA's compiled peak after (on a cached step too, since the memory available changes).
    """
    report = report or analyze(layout)
    check_timeable(report)
    compiled = _steps.get(layout.key)
    cached = compiled is not None
    if not cached:
        compiled = _steps.put(layout.key, _compile(layout, report))
    check_compiled_memory(compiled, report)
    return compiled, cached


_steps: caches.Registry[CompiledStep] = caches.Registry(CACHE_SIZE, "compiled.steps")


def _compile(layout: Layout, report: Report) -> CompiledStep:
    """Lower and compile the layout's init and step; ``compile_step`` has run the gates."""
    start = time.perf_counter()
    with _lowering(layout, report) as (model, mesh, inputs_sharding, inputs, init, template, shardings, step):
        replicated = NamedSharding(mesh, PartitionSpec())
        init_compiled = (
            jax.jit(init, in_shardings=(replicated, *inputs_sharding), out_shardings=shardings).lower(jax.random.key(0), *inputs).compile()
        )
        dump = tempfile.mkdtemp(prefix="explorer-xla-dump-")
        try:  # XLA's files for the step: its buffer assignment and live ranges give the memory breakdown
            step_compiled = step.compile({"xla_dump_to": dump})
            compile_s = time.perf_counter() - start
            breakdown = memory_breakdown.from_dump(dump, argument_kinds(model.framework, template, inputs))
        finally:
            shutil.rmtree(dump, ignore_errors=True)
        abstract_state = jax.tree_util.tree_map(with_sharding, shardings, template)
        activations = (
            _chosen_activation_shardings(model, report, abstract_state.params, inputs, shardings.params)
            if model.framework == "linen"
            else ()
        )
    return CompiledStep(init_compiled, step_compiled, inputs_sharding, compile_s, activations, mesh, breakdown)


def lower_step(layout: Layout, report: Report | None = None):
    """The layout's train step lowered, not compiled, on this process's devices: the program XLA is handed
    (``explorer.compile.origins`` runs Shardy's propagation on it)."""
    with _lowering(layout, report or analyze(layout)) as lowered:
        return lowered[-1]


@contextlib.contextmanager
def _lowering(layout: Layout, report: Report):
    """Under the layout's mesh and rules: the model, mesh, inputs' shardings, abstract inputs, init, the state's
    template and shardings, and the lowered train step."""
    model = model_of(layout)
    mesh = layout_mesh(layout.mesh)
    inputs_sharding = input_shardings(report, mesh)
    inputs = abstract_inputs(model, inputs_sharding)
    init = make_init(model)
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        # the state as init really builds it under this mesh (NNX variables carry their eager-sharding flag in the tree)
        template = jax.eval_shape(init, jax.random.key(0), *inputs)
        shardings = state_shardings(report, model, mesh, template)
        abstract_state = jax.tree_util.tree_map(with_sharding, shardings, template)
        # the state donated, as a training loop does: XLA reuses its buffers for the new state (alias_bytes)
        step = jax.jit(make_train_step(model), in_shardings=(shardings, *inputs_sharding), out_shardings=shardings, donate_argnums=0).lower(
            abstract_state, *inputs
        )
        yield model, mesh, inputs_sharding, inputs, init, template, shardings, step


def _chosen_activation_shardings(model, report, abstract_params, abstract_inputs, param_shardings) -> tuple[ActivationCheck, ...]:
    """Compile the forward pass returning every module output and read XLA's chosen shardings."""
    built = reading.live(model).built

    def forward(params, *inputs):
        return built.module.apply({"params": params}, *built.model_args(inputs), capture_intermediates=True, mutable=["intermediates"])

    compiled = (
        jax.jit(forward, in_shardings=(param_shardings, *(a.sharding for a in abstract_inputs)))
        .lower(abstract_params, *abstract_inputs)
        .compile()
    )
    shapes = jax.eval_shape(forward, abstract_params, *abstract_inputs)
    intermediates = shapes[1]["intermediates"]
    chosen = compiled.output_shardings[1]["intermediates"]
    declared = _declared_by_module(report, type(built.module).__name__)
    checks = []
    for (path, leaf), sharding in zip(jax.tree_util.tree_leaves_with_path(intermediates), jax.tree_util.tree_leaves(chosen)):
        module_path = _module_of(path) or type(built.module).__name__
        spec = normal_spec(getattr(sharding, "spec", ()), leaf.ndim)
        wanted = declared.get((module_path, tuple(leaf.shape)))
        checks.append(ActivationCheck(module_path, tuple(leaf.shape), spec, wanted))
    return tuple(checks)


def _module_of(path) -> str:
    """``LogicalDotReluDot_0`` from the key path ``['LogicalDotReluDot_0']['__call__'][0][0]``."""
    names = []
    for key in path:
        name = getattr(key, "key", None)
        if name == "__call__":
            break
        names.append(str(name))
    return "/".join(names)


def _declared_by_module(report: Report, top_module: str) -> dict[tuple[str, tuple[int, ...]], tuple]:
    """The last constraint each module declares, per output shape: what its output should carry.

    The model output, when it is a declared constraint, stands for the top module.
    """
    declared = {}
    for info in report.arrays:
        if info.kind != "activation":
            continue
        if info.path == "activations/output":
            if info.logical_axes is not None:
                declared[(top_module, info.shape)] = normal_spec(info.spec, len(info.shape))
            continue
        declared[(info.module, info.shape)] = normal_spec(info.spec, len(info.shape))
    return declared


def memory_of(compiled) -> dict[str, int]:
    stats = compiled.memory_analysis()
    return {
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "alias_bytes": int(stats.alias_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
        "peak_bytes": int(stats.peak_memory_in_bytes),
    }


def matmul_peak_flops(chip: Chip | Gpu, dtype: str) -> tuple[float, str]:
    """``chip``'s dense matmul peak (FLOP/s per device) for matmuls whose operands are ``dtype``, and what it is.

    bf16 (and narrower) at the table's dense bf16 peak. f32 at JAX's default precision: on an NVIDIA GPU
    it runs on TF32 tensor cores, at the spec sheet's dense TF32 rate (``step_rates.GPU_TF32``: H200
    494.7 TFLOP/s, "989 with sparsity"); on a TPU the default precision runs it as one bf16 pass: the bf16 peak.
    """
    from explorer.predict.step_rates import GPU_TF32

    peak = chip.device_peak_flops
    if dtype == "f32" and isinstance(chip, Gpu):
        return GPU_TF32[chip.generation], f"TF32 dense {GPU_TF32[chip.generation] / 1e12:,.1f} TFLOP/s (NVIDIA's data sheet)"
    kept = "" if dtype in ("bf16", "f16") or (dtype == "f32" and not isinstance(chip, Gpu)) else f" ({dtype} counted at the bf16 rate)"
    return peak, f"bf16 dense {peak / 1e12:,.0f} TFLOP/s" + kept
