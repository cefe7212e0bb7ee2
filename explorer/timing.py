"""Time the layout's compiled train step on the devices this process has.

Honest measurement: warm-up steps are excluded, each timed step is exactly one call
plus ``block_until_ready`` on the whole output, and progress callbacks run between
timed regions, never inside one. Compiling and the readers of XLA's numbers live in
``compiled.py``; the collectives parser in ``hlo.py``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from explorer.abstract import AbstractModel
from explorer.analysis import Report, analyze, model_of, spec_entry_json
from explorer.compiled import ActivationCheck, check_timeable, compile_step, flops_of, memory_of
from explorer.errors import ExplorerError
from explorer.hlo import collectives
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
            float(np.median(values)), float(np.percentile(values, 10)), float(np.percentile(values, 90)),
            float(values.min()), float(values.max()), tuple(float(s) for s in samples),
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

    def memory_notes(self) -> list[str]:
        """Why XLA's numbers differ from the analysis' estimate, as far as we can tell."""
        notes = []
        arguments = self.memory["argument_bytes"] - self.estimate["argument_bytes"]
        outputs = self.memory["output_bytes"] - self.estimate["output_bytes"]
        notes.append(
            "arguments match the analysis exactly (state + inputs)" if arguments == 0
            else f"arguments differ by {arguments:+,} B from state + inputs (padding or layout of small buffers)"
        )
        if outputs == 8 * self.state_leaves:
            notes.append(f"outputs exceed the state by {outputs:,} B: the output tuple's pointer table, 8 B for each of its {self.state_leaves} buffers")
        elif outputs:
            notes.append(f"outputs differ from the state by {outputs:+,} B")
        else:
            notes.append("outputs match the state exactly")
        notes.append(
            f"temporaries ({self.memory['temp_bytes']:,} B) are XLA's own: gradients, Adam's update and activations it keeps "
            f"for the backward pass, after buffer reuse; the analysis only lists declared activations "
            f"({self.estimate['declared_activation_bytes']:,} B)"
        )
        return notes

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
                {"path": a.path, "shape": list(a.shape), "chosen": [spec_entry_json(e) for e in a.chosen],
                 "declared": None if a.declared is None else [spec_entry_json(e) for e in a.declared], "differs": a.differs}
                for a in self.activations
            ],
            "memory_notes": self.memory_notes(),
            "stopped": self.stopped,
        }


# --- timing -------------------------------------------------------------------------------------

def example_inputs(model: AbstractModel, shardings: tuple[NamedSharding, ...], seed: int = 0) -> tuple:
    """Inputs of the right shape and sharding: normal floats, small non-negative integers (token ids)."""
    key = jax.random.key(seed)
    arrays = []
    for spec, sharding in zip(model.built.inputs, shardings):
        key, sub = jax.random.split(key)
        dtype = jnp.dtype(spec.dtype)
        value = (
            jax.random.randint(sub, spec.shape, 0, 2, dtype) if jnp.issubdtype(dtype, jnp.integer)
            else jax.random.normal(sub, spec.shape, dtype)
        )
        arrays.append(jax.device_put(value, sharding))
    return tuple(arrays)


def estimate_from(report: Report) -> dict[str, int]:
    t = report.totals
    return {
        "argument_bytes": t.param_bytes + t.opt_state_bytes + t.input_bytes,
        "output_bytes": t.param_bytes + t.opt_state_bytes,
        "declared_activation_bytes": t.activation_bytes,
    }


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
    samples, stopped = _timed_steps(compiled.step, state, inputs, steps, on_step, should_stop)
    program = collectives(compiled.step.as_text())
    return TimingResult(
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
        activations=compiled.activations,
        state_leaves=sum(1 for a in report.arrays if a.kind in ("param", "opt_state")),
        stopped=stopped,
    )


def _timed_steps(step, state, inputs, steps, on_step, should_stop) -> tuple[list[float], bool]:
    samples: list[float] = []
    for index in range(steps):
        start = time.perf_counter()
        state = step(state, *inputs)
        jax.block_until_ready(state)
        samples.append(time.perf_counter() - start)
        if on_step:
            on_step(index, samples[-1])
        if should_stop and should_stop():
            return samples, True
    return samples, False
