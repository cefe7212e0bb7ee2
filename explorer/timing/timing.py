"""Time the layout's compiled train step on the devices of this process, or of every process.

In one process the mesh is this process's devices. Under ``jax.distributed`` (see
``distributed.py``) the same code runs in every process on the global mesh: inputs
are placed with ``jax.make_array_from_process_local_data``, each process handing over
only the blocks its own devices hold.

Honest measurement: warm-up steps are excluded, each timed step is exactly one call
plus ``block_until_ready`` on the whole output, and progress callbacks run between
timed regions, never inside one. Compiling and the readers of XLA's numbers live in
``compiled.py``; the collectives parser in ``hlo.py``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from explorer import reading
from explorer.reading import AbstractModel
from explorer.analysis.analyzer import analyze, model_of
from explorer.analysis.report import Report
from explorer.specs import entry_json
from explorer.compile.compiled import (
    ActivationCheck,
    CompiledStep,
    accelerator_of,
    check_timeable,
    compile_step,
    matmul_peak_flops,
    memory_of,
    memory_stats_of,
    timing_device,
)
from explorer.errors import ExplorerError
from explorer.formats import counted, human_bytes
from explorer.hlo.program import collective_ops as hlo_collective_ops
from explorer.hlo.program import collectives
from explorer.hlo.sources import Traced
from explorer.compile.xla_results import aggregate_collectives
from explorer.compile.memory_breakdown import MemoryBreakdown
from explorer.layout import Layout
from explorer.hardware.accelerators import Gpu


@dataclasses.dataclass(frozen=True)
class StepTimes:
    median: float
    p10: float
    p90: float
    min: float
    max: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: list[float]) -> "StepTimes":
        values = np.asarray(samples, dtype=float)
        return cls(
            float(np.median(values)),
            float(np.percentile(values, 10)),
            float(np.percentile(values, 90)),
            float(values.min()),
            float(values.max()),
            tuple(float(s) for s in samples),
        )


@dataclasses.dataclass(frozen=True)
class TimingResult:
    layout_name: str
    platform: str
    devices: int
    compile_s: float
    cached: bool  # the compiled step came from the cache: compile_s is the original compile time
    warmup: int
    step_s: StepTimes
    flops: float
    memory: dict[str, int]
    estimate: dict[str, int]
    collectives: dict[str, dict[str, int]]
    activations: tuple[ActivationCheck, ...]
    state_leaves: int
    loops_without_trip_count: int = 0  # see ProgramCollectives
    stopped: bool = False  # should_stop ended the run early: every figure is of the steps that ran
    planned_steps: int | None = None  # the steps asked for (more than ran where ``stopped``); None: as many as ran
    processes: int = 1  # JAX processes the mesh spans (jax.distributed); each ran the same step
    devices_per_process: int | None = None  # this process's devices in the mesh; None: all ``devices``
    sources: tuple[Traced, ...] = ()  # the collectives by kind and mesh axes, with the lines of the model they come from
    device_kind: str = ""  # jax's device_kind of this process's first device ("cpu", "NVIDIA H200")
    flops_source: str = "cost_analysis"  # or "hlo_matmuls": the optimized program's dots, where cost_analysis() misses them
    peak_bytes_in_use: int | None = None  # memory_stats() after the run (the process's peak); None where the backend has none
    bytes_limit: int | None = None  # memory_stats()'s bytes_limit: what JAX allows itself on the device
    matmul_peak_s: float | None = None  # the step's matmuls at the device's dense peak for their dtypes (MFU = this / step)
    peak_note: str = ""  # which peak MFU is against, or why there is none
    lower_bound_s: float | None = None  # roofline.estimate's step_s for this device: a lower bound, not a prediction
    predicted_s: float | None = None  # the per-kernel step model's seconds per step (None until it exists)
    expectation_note: str = ""  # why there is no bound or prediction, where one is missing
    memory_breakdown: MemoryBreakdown | None = None  # the step's buffers live at its peak (compiled.CompiledStep's)

    def __post_init__(self) -> None:
        if self.devices_per_process is None:
            object.__setattr__(self, "devices_per_process", self.devices // self.processes)

    def stopped_note(self) -> str:
        """'Stopped after N of M steps' and what the figures cover, or '' for a run that timed every step asked."""
        if not self.stopped:
            return ""
        ran = len(self.step_s.samples)
        return f"Stopped after {ran} of {self.planned_steps or ran} steps: every figure here is of the {counted(ran, 'step')} that ran."

    def memory_notes(self) -> list[str]:
        """Why XLA's numbers differ from the analysis' estimate, as far as we can tell."""
        notes = []
        arguments = self.memory["argument_bytes"] - self.estimate["argument_bytes"]
        outputs = self.memory["output_bytes"] - self.estimate["output_bytes"]
        notes.append(
            "arguments match the analysis exactly (state + inputs)"
            if arguments == 0
            else f"arguments differ by {arguments:+,} B from state + inputs (padding or layout of small buffers)"
        )
        if outputs == 8 * self.state_leaves:
            notes.append(
                f"outputs exceed the state by {outputs:,} B: the output tuple's pointer table, 8 B for each of its {self.state_leaves} buffers"
            )
        elif outputs:
            notes.append(f"outputs differ from the state by {outputs:+,} B")
        else:
            notes.append("outputs match the state exactly")
        if self.memory["alias_bytes"]:
            notes.append(f"the state is donated: XLA reuses its {human_bytes(self.memory['alias_bytes'])} for the outputs (aliased)")
        notes.append(self._temporaries_note())
        return notes

    def _temporaries_note(self) -> str:
        """What the temporaries hold, said only as far as their size allows (192 B hold no gradients)."""
        temp, declared = self.memory["temp_bytes"], self.estimate["declared_activation_bytes"]
        if temp < declared:
            return (
                f"temporaries ({human_bytes(temp)}) are less than the declared activations ({human_bytes(declared)}): XLA fuses values into "
                "the ops that use them and writes the new state over the donated one, so it holds few buffers of its own"
            )
        return (
            f"temporaries ({human_bytes(temp)}) are XLA's own buffers after reuse: the activations it keeps for the backward pass "
            f"(the analysis lists {human_bytes(declared)} declared), and gradients and Adam's update where not written over the donated state"
        )

    @property
    def steps_per_s(self) -> float:
        return 1.0 / self.step_s.median

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.step_s.median

    @property
    def mfu(self) -> float | None:
        """Model FLOP utilisation: the step's matmul flops at the device's peak for their dtypes, over the step."""
        return None if self.matmul_peak_s is None else self.matmul_peak_s / self.step_s.median

    def ratio(self, expected_s: float | None) -> float | None:
        """The measured median over an expected step time (the bound or the prediction)."""
        return None if not expected_s else self.step_s.median / expected_s

    def expectations(self) -> list[dict[str, Any]]:
        """The measured step, the predicted step and the lower bound side by side, each with its ratio and what it is."""
        missing = self.expectation_note or "none applies"
        return [
            {"what": "measured", "step_s": self.step_s.median, "ratio": 1.0, "note": f"median of {len(self.step_s.samples)} steps"},
            {
                "what": "predicted",
                "step_s": self.predicted_s,
                "ratio": self.ratio(self.predicted_s),
                "note": "the per-kernel step model" if self.predicted_s is not None else missing,
            },
            {
                "what": "lower bound",
                "step_s": self.lower_bound_s,
                "ratio": self.ratio(self.lower_bound_s),
                "note": "the roofline (max of flops over peak, bytes over bandwidth, collectives): a bound, not a prediction"
                if self.lower_bound_s is not None
                else missing,
            },
        ]

    # Fields written to JSON under their own names and as they are (plain numbers, strings, dicts); the others below.
    PLAIN_FIELDS = (
        "platform", "devices", "processes", "devices_per_process", "compile_s", "flops", "flops_source", "device_kind",
        "matmul_peak_s", "peak_note", "predicted_s", "lower_bound_s", "expectation_note", "peak_bytes_in_use", "bytes_limit",
        "memory", "estimate", "collectives", "loops_without_trip_count", "state_leaves", "stopped", "planned_steps",
    )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {field: getattr(self, field) for field in self.PLAIN_FIELDS} | {
            "layout": self.layout_name,
            "compile_cached": self.cached,
            "warmup_steps": self.warmup,
            "step_s": dataclasses.asdict(self.step_s) | {"samples": list(self.step_s.samples)},
            "steps_per_s": self.steps_per_s,
            "flops_per_s": self.flops_per_s,
            "mfu": self.mfu,
            "expectations": self.expectations(),
            "activations": [
                {
                    "path": a.path,
                    "shape": list(a.shape),
                    "chosen": [entry_json(e) for e in a.chosen],
                    "declared": None if a.declared is None else [entry_json(e) for e in a.declared],
                    "differs": a.differs,
                }
                for a in self.activations
            ],
            "memory_notes": self.memory_notes(),
            "sources": [t.to_json() for t in self.sources],
            "memory_breakdown": None if self.memory_breakdown is None else self.memory_breakdown.to_json(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TimingResult":
        """The inverse of ``to_dict`` (a worker process sends its result as JSON)."""
        steps = data["step_s"]
        return cls(
            **{field: data[field] for field in cls.PLAIN_FIELDS},
            layout_name=data["layout"],
            cached=data["compile_cached"],
            warmup=data["warmup_steps"],
            step_s=StepTimes(steps["median"], steps["p10"], steps["p90"], steps["min"], steps["max"], tuple(steps["samples"])),
            activations=tuple(
                ActivationCheck(
                    a["path"],
                    tuple(a["shape"]),
                    _spec_from_json(a["chosen"]),
                    None if a["declared"] is None else _spec_from_json(a["declared"]),
                )
                for a in data["activations"]
            ),
            sources=tuple(Traced.from_json(t) for t in data.get("sources", ())),
            memory_breakdown=MemoryBreakdown.from_json(data.get("memory_breakdown")),
        )


def traced_collectives(hlo_text: str, mesh_shape: tuple[int, ...], mesh_axes: tuple[str, ...]) -> tuple[Traced, ...]:
    """The program's collectives by kind and mesh axes, each with its source lines (no target: no roofline time)."""
    ops = hlo_collective_ops(hlo_text, math.prod(mesh_shape))
    positions = np.zeros((math.prod(mesh_shape), 1))  # this process's devices: no torus to read
    return tuple(
        Traced(c.op, c.mesh_axes, c.count, c.bytes, sources)
        for c, sources in aggregate_collectives(ops, tuple(mesh_shape), tuple(mesh_axes), positions, text=hlo_text)
    )


def _spec_from_json(entries: list[Any]) -> tuple[Any, ...]:
    return tuple(tuple(e) if isinstance(e, list) else e for e in entries)


# --- timing -------------------------------------------------------------------------------------


def example_inputs(model: AbstractModel, shardings: tuple[NamedSharding, ...], seed: int = 0) -> tuple:
    """Inputs of the right shape and sharding: normal floats, small non-negative integers (token ids), random masks.

    Every process draws the same global values and hands JAX only the blocks its own
    devices hold, as a multi-host data loader would, so one process and many get
    identical inputs.
    """
    key = jax.random.key(seed)
    arrays = []
    for spec, sharding in zip(reading.live(model).built.inputs, shardings):
        key, sub = jax.random.split(key)
        dtype = jnp.dtype(spec.dtype)
        value = (
            jax.random.bernoulli(sub, 0.5, spec.shape)
            if dtype == jnp.bool_  # a mask
            else jax.random.randint(sub, spec.shape, 0, 2, dtype)
            if jnp.issubdtype(dtype, jnp.integer)
            else jax.random.normal(sub, spec.shape, dtype)
        )
        arrays.append(jax.make_array_from_process_local_data(sharding, process_local_data(np.asarray(value), sharding), value.shape))
    return tuple(arrays)


def process_local_data(value: np.ndarray, sharding: NamedSharding) -> np.ndarray:
    """The part of ``value`` this process's devices hold, in the form ``make_array_from_process_local_data`` wants.

    Along each dimension: the blocks this process's devices hold, in order and
    concatenated; a dimension whose blocks cover it whole is kept whole.
    """
    indices = sharding.addressable_devices_indices_map(value.shape).values()
    keep = []
    for dim, size in enumerate(value.shape):
        blocks = sorted({index[dim].indices(size)[:2] for index in indices})
        keep.append(np.concatenate([np.arange(begin, stop) for begin, stop in blocks]))
    return value[np.ix_(*keep)] if keep else value


def estimate_from(report: Report) -> dict[str, int]:
    t = report.totals
    return {
        "argument_bytes": t.param_bytes + t.opt_state_bytes + t.input_bytes,
        "output_bytes": t.param_bytes + t.opt_state_bytes,
        "declared_activation_bytes": t.activation_bytes,
    }


@dataclasses.dataclass(frozen=True)
class TimedRun:
    result: TimingResult
    state: Any  # the TrainState after the last timed step (global arrays in a multi-process run)


def time_layout(layout: Layout, *args, **options) -> TimingResult:
    """Compile (or reuse) the layout's train step and time ``steps`` steps after ``warmup``: ``timed_run``'s result
    (its arguments: ``steps``, ``warmup``, ``on_step``, ``should_stop``, ``on_phase``).

    ``on_step(i, seconds)`` is called after each timed step, outside the timed region.
    Raises ExplorerError for layouts that cannot run here.
    """
    return timed_run(layout, *args, **options).result


def timed_run(
    layout: Layout,
    steps: int = 20,
    warmup: int = 2,
    on_step: Callable[[int, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> TimedRun:
    """``time_layout``, keeping the final state too.

    In a multi-process run every process calls this with the same arguments, and a ``should_stop`` they all
    answer alike (``distributed.agreed_stop``): every process must run the same number of steps.
    """
    if not 1 <= steps <= 10_000:
        raise ExplorerError("steps", steps, "must be between 1 and 10,000")
    report = analyze(layout)
    check_timeable(report)
    phase = on_phase or (lambda _: None)
    phase("compiling")
    compiled, cached = compile_step(layout, report)
    model = model_of(layout)
    phase("initialising")
    inputs = example_inputs(model, compiled.input_shardings)
    state = compiled.init(jax.random.key(0), *inputs)
    jax.block_until_ready(state)
    phase("warming up")
    for _ in range(warmup):
        state = compiled.step(state, *inputs)
    jax.block_until_ready(state)
    phase("timing")
    samples, stopped, state = _timed_steps(compiled.step, state, inputs, steps, on_step, should_stop)
    text = compiled.step.as_text()
    program = collectives(text)
    processes = [device.process_index for device in jax.devices()[: report.mesh.size]]
    device = timing_device()
    figures = device_figures(compiled, device, len(set(processes)), processes.count(jax.process_index()))
    in_use = memory_stats_of(device)  # the real peak beside XLA's analysis, where the backend gives it (not CPU)
    result = TimingResult(
        layout_name=layout.name,
        platform=device.platform,
        devices=report.mesh.size,
        compile_s=compiled.compile_s,
        cached=cached,
        warmup=warmup,
        step_s=StepTimes.of(samples),
        flops=figures.flops,
        memory=memory_of(compiled.step),
        estimate=estimate_from(report),
        collectives=program.ops,
        loops_without_trip_count=program.loops_without_trip_count,
        sources=traced_collectives(text, report.mesh.shape, report.mesh.axes),
        activations=compiled.activations,
        state_leaves=sum(1 for a in report.arrays if a.kind in ("param", "opt_state")),
        stopped=stopped,
        planned_steps=steps,
        processes=len(set(processes)),
        devices_per_process=processes.count(jax.process_index()),
        device_kind=device.device_kind,
        flops_source=figures.flops_source,
        peak_bytes_in_use=in_use.get("peak_bytes_in_use"),
        bytes_limit=in_use.get("bytes_limit"),
        matmul_peak_s=figures.matmul_peak_s,
        peak_note=figures.peak_note,
        lower_bound_s=figures.lower_bound_s,
        predicted_s=figures.predicted_s,
        expectation_note=figures.expectation_note,
        memory_breakdown=compiled.memory_breakdown,
    )
    return TimedRun(result, state)


@dataclasses.dataclass(frozen=True)
class DeviceFigures:
    """What the step's program and the device's table entry say, beside the measured step (``TimingResult``'s fields)."""

    flops: float
    flops_source: str
    matmul_peak_s: float | None
    peak_note: str
    lower_bound_s: float | None
    predicted_s: float | None
    expectation_note: str


CPU_NOTE = (
    "no bound or prediction applies to timing on simulated CPU devices: the roofline and the step model describe "
    "accelerators (see explorer compile --target)"
)
CPU_PEAK_NOTE = "no MFU on CPU: the simulated devices share the host's cores, whose peak is not in the accelerator table"
NO_PREDICTION = "the per-kernel step model gave no prediction for this program"


def device_figures(compiled: CompiledStep, device, processes: int, per_process: int) -> DeviceFigures:
    """FLOPs, MFU's peak, the lower bound and the prediction for ``compiled`` on ``device``'s kind.

    On simulated CPU devices: ``cost_analysis()``'s flops with each loop's further iterations added
    (``xla_results.counted_work``, as a TPU target's), and no peak, bound or prediction. On an
    accelerator in the table (``targets``), the program is read as ``explorer compile`` reads a target's
    (``xla_results.analyze_compiled``, one home): on a GPU the optimized program's dots, since
    ``cost_analysis()`` misses cuBLAS/Triton matmuls; the roofline's bound and the step model's prediction
    (``step_model``) for this many devices.
    """
    from explorer.hlo import program as hlo
    from explorer.compile.xla_results import counted_work

    text = compiled.step.as_text()
    if device.platform == "cpu":
        flops = counted_work(compiled.step, text)[0]
        return DeviceFigures(flops, "cost_analysis", None, CPU_PEAK_NOTE, None, None, CPU_NOTE)
    chip = accelerator_of(device)
    if chip is None:
        flops = hlo.matmul_work(text).flops
        unknown = f"{device.device_kind} is not in the accelerator table (explorer.hardware.targets)"
        return DeviceFigures(flops, "hlo_matmuls", None, f"no MFU: {unknown}", None, None, f"no bound or prediction: {unknown}")
    from explorer.hardware.targets import Target
    from explorer.compile.xla_results import analyze_compiled

    shape = (processes, per_process) if isinstance(chip, Gpu) else (processes * per_process,)
    target = Target(f"{chip.generation}:{'x'.join(map(str, shape))}", chip, shape)
    read = analyze_compiled(compiled.step, target, compiled.mesh, "timing", compiled.compile_s)
    at_peak, labels = 0.0, []
    for dtype, flops in sorted(hlo.matmul_flops_by_dtype(text).items()):
        peak, label = matmul_peak_flops(chip, dtype)
        at_peak += flops / peak
        labels.append(f"{dtype} matmuls at {label}")
    estimate = read.estimate
    return DeviceFigures(
        read.flops,
        read.flops_source,
        at_peak or None,
        "; ".join(labels) or "no matmuls",
        estimate.step_s if estimate else None,
        estimate.predicted_s if estimate else None,
        "" if estimate and estimate.predicted_s is not None else NO_PREDICTION,
    )


def _timed_steps(step, state, inputs, steps, on_step, should_stop) -> tuple[list[float], bool, Any]:
    samples: list[float] = []
    for index in range(steps):
        start = time.perf_counter()
        state = step(state, *inputs)
        jax.block_until_ready(state)
        samples.append(time.perf_counter() - start)
        if on_step:
            on_step(index, samples[-1])
        if should_stop and should_stop():
            return samples, True, state
    return samples, False, state
