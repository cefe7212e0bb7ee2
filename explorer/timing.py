"""Compile and time the layout's jitted train step on the devices this process has.

The step is the Flax guide's: ``jax.jit(init_fn, out_shardings=...)`` builds the
TrainState, and ``train_step`` (grad of the model's loss, ``apply_gradients``) is
jitted with in and out shardings, traced under the mesh and ``nn.logical_axis_rules``.
Shardings come from the analysis. What XLA compiled is read back from the compiled
program: ``memory_analysis()``, ``cost_analysis()`` and the collectives in ``as_text()``.

Honest measurement: warm-up steps are excluded, each timed step is exactly one call
plus ``block_until_ready`` on the whole output, and progress callbacks run between
timed regions, never inside one.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import math
import os
import re
import threading
import time
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from explorer.abstract import AbstractModel, abstract_model, init_fn
from explorer.analysis import Report, analyze, jax_mesh, spec_entry_json, state_shardings
from explorer.errors import ExplorerError
from explorer.layout import Layout

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
MEMORY_FRACTION = 0.6  # refuse a state whose estimated host footprint exceeds this share of available memory
CACHE_SIZE = 4
DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
}


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
    """Refuse layouts that cannot be timed here, with the numbers."""
    if report.mesh.abstract:
        raise ExplorerError(
            "mesh.shape", list(report.mesh.shape),
            f"needs {report.mesh.size:,} devices and this process has {jax.device_count()}: "
            "it can be analysed as a planned mesh but not timed",
        )
    needed, available = host_footprint_bytes(report), available_memory_bytes()
    if needed > MEMORY_FRACTION * available:
        raise ExplorerError(
            "model", report.layout.model.name,
            f"would need about {needed / 2**30:,.1f} GiB on the host to time ({report.mesh.size} simulated devices); "
            f"{available / 2**30:,.1f} GiB are available and the limit is {MEMORY_FRACTION:.0%} of that",
        )


# --- compiling ------------------------------------------------------------------------------

_cache: collections.OrderedDict[str, CompiledStep] = collections.OrderedDict()
_cache_lock = threading.Lock()


def layout_key(layout: Layout) -> str:
    """Identity of what gets compiled: everything but the layout's name."""
    data = layout.to_dict()
    data.pop("name")
    return json.dumps(data, sort_keys=True)


def _make_train_step(model: AbstractModel):
    built = model.built

    def train_step(state, *inputs):
        def loss_fn(params):
            return built.loss(built.module.apply({"params": params}, *inputs), *inputs)

        grads = jax.grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads)

    return train_step


def compile_step(layout: Layout, report: Report | None = None) -> tuple[CompiledStep, bool]:
    """The compiled init and step for ``layout``, from the bounded cache when possible."""
    key = layout_key(layout)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key], True
    compiled = _compile(layout, report or analyze(layout))
    with _cache_lock:
        _cache[key] = compiled
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled, False


def _input_shardings(report: Report, mesh) -> tuple[NamedSharding, ...]:
    return tuple(NamedSharding(mesh, PartitionSpec(*a.spec)) for a in report.arrays if a.kind == "input")


def _compile(layout: Layout, report: Report) -> CompiledStep:
    check_timeable(report)
    model = abstract_model(layout.model)
    mesh = jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes))
    shardings = state_shardings(report, model)
    inputs_sharding = _input_shardings(report, mesh)
    abstract_inputs = tuple(
        jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=s) for i, s in zip(model.built.inputs, inputs_sharding)
    )
    init = functools.partial(init_fn, model=model.built.module, optimizer=model.optimizer)
    start = time.perf_counter()
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        replicated = NamedSharding(mesh, PartitionSpec())
        init_compiled = jax.jit(init, in_shardings=(replicated, *inputs_sharding), out_shardings=shardings).lower(
            jax.random.key(0), *abstract_inputs
        ).compile()
        abstract_state = jax.tree_util.tree_map(_with_sharding, shardings, model.state_shapes)
        step_compiled = jax.jit(
            _make_train_step(model), in_shardings=(shardings, *inputs_sharding), out_shardings=shardings
        ).lower(abstract_state, *abstract_inputs).compile()
        compile_s = time.perf_counter() - start
        activations = _chosen_activation_shardings(model, report, abstract_state.params, abstract_inputs, shardings.params)
    return CompiledStep(init_compiled, step_compiled, inputs_sharding, compile_s, activations)


def _with_sharding(sharding: NamedSharding, leaf: Any) -> Any:
    """A ShapeDtypeStruct carrying its sharding, inside its logical box when it has one."""
    if isinstance(leaf, nn.Partitioned):
        return leaf.replace_boxed(jax.ShapeDtypeStruct(leaf.value.shape, leaf.value.dtype, sharding=sharding))
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)


def _normal_spec(spec: Any, ndim: int) -> tuple[Any, ...]:
    """A spec padded to ``ndim`` entries, one-axis tuples as plain names: comparable."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else (tuple(e) if isinstance(e, (tuple, list)) else e) for e in spec]
    entries += [None] * (ndim - len(entries))
    return tuple(None if e == () else e for e in entries)


def _chosen_activation_shardings(model, report, abstract_params, abstract_inputs, param_shardings) -> tuple[ActivationCheck, ...]:
    """Compile the forward pass returning every module output and read XLA's chosen shardings."""
    built = model.built

    def forward(params, *inputs):
        return built.module.apply({"params": params}, *inputs, capture_intermediates=True, mutable=["intermediates"])

    compiled = jax.jit(forward, in_shardings=(param_shardings, *(a.sharding for a in abstract_inputs))).lower(
        abstract_params, *abstract_inputs
    ).compile()
    shapes = jax.eval_shape(forward, abstract_params, *abstract_inputs)
    intermediates = shapes[1]["intermediates"]
    chosen = compiled.output_shardings[1]["intermediates"]
    declared = _declared_by_module(report, type(built.module).__name__)
    checks = []
    for (path, leaf), sharding in zip(
        jax.tree_util.tree_leaves_with_path(intermediates), jax.tree_util.tree_leaves(chosen)
    ):
        module_path = _module_of(path) or type(built.module).__name__
        spec = _normal_spec(getattr(sharding, "spec", ()), leaf.ndim)
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
                declared[(top_module, info.shape)] = _normal_spec(info.spec, len(info.shape))
            continue
        module_path = info.path[len("activations/"):].rsplit("/", 1)[0]
        declared[(module_path, info.shape)] = _normal_spec(info.spec, len(info.shape))
    return declared


# --- reading the compiled program -----------------------------------------------------------

_COLLECTIVE_LINE = re.compile(
    r"=\s*(?P<shape>\(.*?\)|\S+)\s+(?P<op>" + "|".join(COLLECTIVES) + r")(?P<phase>-start|-done)?\("
)
_ARRAY_SHAPE = re.compile(r"(?P<dtype>[a-z]+\d*[a-z0-9]*)\[(?P<dims>[\d,]*)\]")
_COMPUTATION_HEADER = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*->.*\{\s*$")
_CALLEE = re.compile(
    r"\b(?P<role>calls|to_apply|condition|body|true_computation|false_computation)=%?(?P<name>[\w.\-]+)"
    r"|\b(?:branch_computations|called_computations)=\{(?P<names>[^}]*)\}"
)
_WHILE = re.compile(r"\swhile\(")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"\}')


@dataclasses.dataclass(frozen=True)
class ProgramCollectives:
    """The collectives a compiled program runs in one call.

    ``ops`` maps each collective to its count and per-device bytes, weighted by how many
    times the computation holding it runs: an op in the body of a loop with a known trip
    count of n (``nn.scan`` over n layers) counts n times. ``loops_without_trip_count``
    is the number of loops XLA could not bound; ops in their bodies count once per entry
    into the loop, so the totals are then a lower bound.
    """

    ops: dict[str, dict[str, int]]
    loops_without_trip_count: int


def collectives(hlo_text: str) -> ProgramCollectives:
    """Count and per-device bytes of each collective in an HLO module's text.

    Bytes are the size of the op's result on one device (a tuple's parts added up).
    Asynchronous pairs count once, at their ``-done``.
    """
    computations, entry = _split_computations(hlo_text)
    runs, unbounded = _times_each_computation_runs(computations, entry)
    found = {op: {"count": 0, "bytes": 0} for op in COLLECTIVES}
    for name, lines in computations.items():
        for line in lines:
            match = _COLLECTIVE_LINE.search(line)
            if not match or match["phase"] == "-start":
                continue
            found[match["op"]]["count"] += runs[name]
            found[match["op"]]["bytes"] += runs[name] * _shape_bytes(match["shape"])
    return ProgramCollectives(found, unbounded)


def _split_computations(hlo_text: str) -> tuple[dict[str | None, list[str]], str | None]:
    """The instruction lines of each computation (lines outside any go under None), and the entry's name."""
    computations: dict[str | None, list[str]] = {None: []}
    current, entry = None, None
    for line in hlo_text.splitlines():
        header = _COMPUTATION_HEADER.match(line)
        if header:
            current = header["name"]
            computations[current] = []
            entry = current if header["entry"] else entry
        elif line.startswith("}"):
            current = None
        else:
            computations[current].append(line)
    return computations, entry


def _times_each_computation_runs(computations: dict[str | None, list[str]], entry: str | None) -> tuple[dict[str | None, int], int]:
    """How many times each computation runs in one call of the entry, and how many loops have no known trip count.

    Without an entry (a fragment of a module) every computation counts as running once.
    """
    if entry is None:
        return {name: 1 for name in computations}, 0
    callers: dict[str, list[tuple[str | None, int]]] = {}
    unbounded = 0
    for caller, lines in computations.items():
        for line in lines:
            is_loop = _WHILE.search(line) is not None
            trip = _TRIP_COUNT.search(line) if is_loop else None
            unbounded += is_loop and trip is None
            for match in _CALLEE.finditer(line):
                names = [match["name"]] if match["name"] else [n.strip().lstrip("%") for n in match["names"].split(",") if n.strip()]
                times = 1
                if trip is not None and match["role"] == "body":
                    times = int(trip["n"])
                elif trip is not None and match["role"] == "condition":
                    times = int(trip["n"]) + 1
                for name in names:
                    callers.setdefault(name, []).append((caller, times))

    @functools.cache
    def runs(name: str | None) -> int:
        if name == entry or name is None:
            return 1
        return sum(runs(caller) * times for caller, times in callers.get(name, ()))

    return {name: runs(name) for name in computations}, unbounded


def _shape_bytes(shape: str) -> int:
    total = 0
    for part in _ARRAY_SHAPE.finditer(shape):
        dims = [int(d) for d in part["dims"].split(",") if d]
        total += math.prod(dims) * DTYPE_BYTES.get(part["dtype"], 4)
    return total


def memory_of(compiled) -> dict[str, int]:
    stats = compiled.memory_analysis()
    return {
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "alias_bytes": int(stats.alias_size_in_bytes),
        "generated_code_bytes": int(stats.generated_code_size_in_bytes),
    }


def flops_of(compiled) -> float:
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older JAX returned one dict per program
        cost = cost[0] if cost else {}
    return float((cost or {}).get("flops", 0.0))


# --- one timing at a time ---------------------------------------------------------------------

class Turnstile:
    """First come, first served: one timing runs at a time in this process; the rest wait in order."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._waiting: list[int] = []
        self._next_ticket = 0
        self._busy = False

    def position(self, ticket: int) -> int:
        """How many timings are ahead of this ticket (the running one included)."""
        with self._condition:
            return self._waiting.index(ticket) + (1 if self._busy else 0)

    def queue_length(self) -> int:
        with self._condition:
            return len(self._waiting) + (1 if self._busy else 0)

    def enter(self, on_wait: Callable[[int], None] | None = None, poll_s: float = 0.25) -> None:
        with self._condition:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._waiting.append(ticket)
        try:
            while True:
                with self._condition:
                    if not self._busy and self._waiting[0] == ticket:
                        self._waiting.pop(0)
                        self._busy = True
                        return
                    ahead = self._waiting.index(ticket) + (1 if self._busy else 0)
                if on_wait:
                    on_wait(ahead)
                with self._condition:
                    self._condition.wait(poll_s)
        except BaseException:
            with self._condition:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                self._condition.notify_all()
            raise

    def leave(self) -> None:
        with self._condition:
            self._busy = False
            self._condition.notify_all()


TURNSTILE = Turnstile()


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
    model = abstract_model(layout.model)
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
