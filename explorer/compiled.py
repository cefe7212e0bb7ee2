"""Compiling the layout's train step on this process's devices, and reading what XLA built.

The step is the Flax guide's (``explorer.train_step``, which the target compile uses too):
``jax.jit(init, out_shardings=...)`` builds the state, and the train step is
jitted with in and out shardings, traced under ``jax.set_mesh`` and
``nn.logical_axis_rules``. Shardings come from the analysis. Compiled steps are kept
in a bounded cache keyed by the layout without its name. The readers turn
``memory_analysis()`` and ``cost_analysis()`` into plain numbers, and the forward pass
compiled with every module output tells which shardings XLA chose for activations.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec

from explorer import caches, reading
from explorer.train_step import abstract_inputs, make_init, make_train_step, with_sharding
from explorer.analysis import Report, analyze, input_shardings, layout_mesh, model_of, state_shardings
from explorer.findings import indivisible_error
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.specs import normal_spec

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
    t = report.totals
    per_device = 2 * (t.param_bytes + t.opt_state_bytes) + 2 * t.param_bytes + t.input_bytes + t.activation_bytes
    return per_device * report.mesh.size


def check_timeable(report: Report) -> None:
    """Refuse layouts that cannot be timed here, before compiling: the first gate, with the numbers.

    A planned mesh, a dimension the mesh does not divide (the Layout page's message),
    and a state whose estimated footprint does not fit. ``check_compiled_memory`` is
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
    needed, available = host_footprint_bytes(report), available_memory_bytes()
    if needed > MEMORY_FRACTION * available:
        raise ExplorerError(
            "model",
            report.layout.model.name,
            f"would need about {needed / 2**30:,.1f} GiB on the host to time ({report.mesh.size} simulated devices); "
            f"{available / 2**30:,.1f} GiB are available and the limit is {MEMORY_FRACTION:.0%} of that",
        )


def compiled_peak_bytes(compiled) -> int:
    """Bytes one device needs while running ``compiled``, by XLA's ``memory_analysis()``.

    Arguments and outputs are live together with the temporaries; aliased outputs
    reuse their argument's buffer.
    """
    stats = compiled.memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def check_compiled_memory(step: "CompiledStep", report: Report) -> None:
    """The second gate: refuse, with XLA's numbers, a step whose compiled peak does not fit this host.

    Every simulated device lives in this process, so the host needs the per-device
    peak times the device count. Runs after compiling and before anything is allocated.
    """
    per_device = max(compiled_peak_bytes(step.init), compiled_peak_bytes(step.step))
    needed, available = per_device * report.mesh.size, available_memory_bytes()
    if needed > MEMORY_FRACTION * available:
        stats = step.step.memory_analysis()
        raise ExplorerError(
            "model",
            report.layout.model.name,
            f"would need {needed / 2**30:,.2f} GiB on the host to time: XLA's compiled memory analysis gives "
            f"{per_device / 2**30:,.2f} GiB per device (arguments {stats.argument_size_in_bytes / 2**30:,.2f} + outputs "
            f"{stats.output_size_in_bytes / 2**30:,.2f} + temporaries {stats.temp_size_in_bytes / 2**30:,.2f} - aliased "
            f"{stats.alias_size_in_bytes / 2**30:,.2f} GiB for the step) x {report.mesh.size} simulated devices; "
            f"{available / 2**30:,.1f} GiB are available and the limit is {MEMORY_FRACTION:.0%} of that. Nothing was allocated.",
        )


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
        step_compiled = step.compile()
        compile_s = time.perf_counter() - start
        abstract_state = jax.tree_util.tree_map(with_sharding, shardings, template)
        activations = (
            _chosen_activation_shardings(model, report, abstract_state.params, inputs, shardings.params)
            if model.framework == "linen"
            else ()
        )
    return CompiledStep(init_compiled, step_compiled, inputs_sharding, compile_s, activations)


def lower_step(layout: Layout, report: Report | None = None):
    """The layout's train step lowered, not compiled, on this process's devices: the program XLA is handed
    (``explorer.origins`` runs Shardy's propagation on it)."""
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
        step = jax.jit(make_train_step(model), in_shardings=(shardings, *inputs_sharding), out_shardings=shardings).lower(
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


def flops_of(compiled) -> float:
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older JAX returned one dict per program
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", 0.0))
