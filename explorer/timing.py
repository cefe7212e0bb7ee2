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
from explorer.analysis import Report, analyze, model_of
from explorer.specs import entry_json
from explorer.compiled import ActivationCheck, check_timeable, compile_step, flops_of, memory_of
from explorer.errors import ExplorerError
from explorer.hlo import collective_ops as hlo_collective_ops
from explorer.hlo import collectives
from explorer.sources import Traced
from explorer.xla_results import aggregate_collectives
from explorer.layout import Layout


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
    stopped: bool = False
    processes: int = 1  # JAX processes the mesh spans (jax.distributed); each ran the same step
    devices_per_process: int | None = None  # this process's devices in the mesh; None: all ``devices``
    sources: tuple[Traced, ...] = ()  # the collectives by kind and mesh axes, with the lines of the model they come from

    def __post_init__(self) -> None:
        if self.devices_per_process is None:
            object.__setattr__(self, "devices_per_process", self.devices // self.processes)

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
        notes.append(self._temporaries_note())
        return notes

    def _temporaries_note(self) -> str:
        """What the temporaries hold, said only as far as their size allows (192 B hold no gradients)."""
        temp, declared = self.memory["temp_bytes"], self.estimate["declared_activation_bytes"]
        if temp < declared:
            return (
                f"temporaries ({temp:,} B) are less than the declared activations ({declared:,} B): XLA fuses values into "
                "the ops that use them and writes the new state over the donated one, so it holds few buffers of its own"
            )
        return (
            f"temporaries ({temp:,} B) are XLA's own buffers after reuse: the activations it keeps for the backward pass "
            f"(the analysis lists {declared:,} B declared), and gradients and Adam's update where not written over the donated state"
        )

    @property
    def steps_per_s(self) -> float:
        return 1.0 / self.step_s.median

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.step_s.median

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout_name,
            "platform": self.platform,
            "devices": self.devices,
            "processes": self.processes,
            "devices_per_process": self.devices_per_process,
            "compile_s": self.compile_s,
            "compile_cached": self.cached,
            "warmup_steps": self.warmup,
            "step_s": dataclasses.asdict(self.step_s) | {"samples": list(self.step_s.samples)},
            "steps_per_s": self.steps_per_s,
            "flops": self.flops,
            "flops_per_s": self.flops_per_s,
            "memory": self.memory,
            "estimate": self.estimate,
            "collectives": self.collectives,
            "loops_without_trip_count": self.loops_without_trip_count,
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
            "state_leaves": self.state_leaves,
            "stopped": self.stopped,
            "sources": [t.to_json() for t in self.sources],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TimingResult":
        """The inverse of ``to_dict`` (a worker process sends its result as JSON)."""
        steps = data["step_s"]
        return cls(
            layout_name=data["layout"],
            platform=data["platform"],
            devices=data["devices"],
            compile_s=data["compile_s"],
            cached=data["compile_cached"],
            warmup=data["warmup_steps"],
            step_s=StepTimes(steps["median"], steps["p10"], steps["p90"], steps["min"], steps["max"], tuple(steps["samples"])),
            flops=data["flops"],
            memory=data["memory"],
            estimate=data["estimate"],
            collectives=data["collectives"],
            activations=tuple(
                ActivationCheck(
                    a["path"],
                    tuple(a["shape"]),
                    _spec_from_json(a["chosen"]),
                    None if a["declared"] is None else _spec_from_json(a["declared"]),
                )
                for a in data["activations"]
            ),
            state_leaves=data["state_leaves"],
            loops_without_trip_count=data["loops_without_trip_count"],
            stopped=data["stopped"],
            processes=data["processes"],
            devices_per_process=data["devices_per_process"],
            sources=tuple(Traced.from_json(t) for t in data.get("sources", ())),
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


def time_layout(
    layout: Layout,
    steps: int = 20,
    warmup: int = 2,
    on_step: Callable[[int, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> TimingResult:
    """Compile (or reuse) the layout's train step and time ``steps`` steps after ``warmup``.

    ``on_step(i, seconds)`` is called after each timed step, outside the timed region.
    Raises ExplorerError for layouts that cannot run here.
    """
    return timed_run(layout, steps, warmup, on_step, should_stop, on_phase).result


def timed_run(
    layout: Layout,
    steps: int = 20,
    warmup: int = 2,
    on_step: Callable[[int, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> TimedRun:
    """``time_layout``, keeping the final state too.

    In a multi-process run every process calls this with the same arguments and no
    ``should_stop`` (all processes must run the same number of steps).
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
    result = TimingResult(
        layout_name=layout.name,
        platform=jax.devices()[0].platform,
        devices=report.mesh.size,
        compile_s=compiled.compile_s,
        cached=cached,
        warmup=warmup,
        step_s=StepTimes.of(samples),
        flops=flops_of(compiled.step),
        memory=memory_of(compiled.step),
        estimate=estimate_from(report),
        collectives=program.ops,
        loops_without_trip_count=program.loops_without_trip_count,
        sources=traced_collectives(text, report.mesh.shape, report.mesh.axes),
        activations=compiled.activations,
        state_leaves=sum(1 for a in report.arrays if a.kind in ("param", "opt_state")),
        stopped=stopped,
        processes=len(set(processes)),
        devices_per_process=processes.count(jax.process_index()),
    )
    return TimedRun(result, state)


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
