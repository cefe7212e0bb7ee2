"""A prediction of the step time, kernel by kernel, from the optimized program and the device's rates.

``roofline`` gives a lower bound: all of the step's flops at the peak, all of its bytes at full
bandwidth, perfectly overlapped. A step is slower: its kernels run one after another, each bound by
its own flops or its own bytes, each at the rate its element type gets, each with a launch. This
module adds those up, for the program XLA built (``compiled.as_text()``):

- **Kernels.** Every instruction of the entry computation and of the control-flow computations it
  runs (loop bodies and conditions, conditional branches, calls) that launches work: a fusion (or an
  async ``fusion-start``), a library call (cuBLAS gemm), a copy and a collective. Bitcasts, tuples,
  parameters and constants are free.
- **Flops.** 2 x output elements x contracted size for every dot or convolution inside the kernel
  (a Triton gemm fusion's, a cuBLAS call's), at the matmul rate of the dot's operand type
  (``step_rates``: bf16 and f32 apart, times the share of it a training step's matmuls were measured to
  get), each matmul's tiles paying a fixed cost besides their steps along the contracted dimension K
  (``step_rates.MATMUL_FIXED_K``: the flops count (K + 256) / K times). Elementwise flops are left out (memory bounds those kernels).
- **Bytes.** What the kernel reads and writes, as XLA's own GPU cost analysis counts them
  (``gpu_hlo_cost_analysis``): each operand once, except one the fusion only slices (a layer of a
  stacked, scanned weight: the slice is read, not the stack) or only updates in place (the buffer of a
  ``dynamic-update-slice``: nothing read); each output once, except an in-place update (the update
  is written, not the buffer).
- **A kernel's time** is XLA's GPU performance model's: compute + memory - 0.95 x min(compute,
  memory) (``kMemoryComputeParallelism``), plus the launch cost (``step_rates``).
- **The step** adds the host's dispatch of it and its wait for the result, once (``step_rates``).
- **Loops.** A computation's kernels count as often as it runs: a loop body times its trip count
  (``hlo.parsed``: XLA's ``known_trip_count``, or the ``scan`` condition's bound).
- **Collectives** take ``roofline``'s time (torus or two-level NVLink/network), spread over the
  program's collective instructions by their bytes (each instruction gets its op's seconds per byte),
  plus a NCCL launch on GPUs. A synchronous one adds its time; an async pair (``-start`` ...
  ``-done``) adds only what the kernels XLA scheduled between its start and its done do not hide. A collective across
  TPU slices is its MegaScale ``send``s: the DCN's seconds over their bytes, at the generation's DCN share
  (``step_rates.DCN_EVIDENCE``, set from a published two-slice run), not hidden.

On a TPU the same rules run on its program: arrays its layout places in the core's VMEM (``S(1)``) move no HBM
bytes, its async copies and slices (DMAs) move theirs, and ``with_prediction`` never lets the prediction fall
below the bound (whose bytes are ``cost_analysis()``'s).

What XLA's models gave: the per-kernel max-with-overlap formula, the launch costs and the bytes
rules are XLA's GPU performance model and cost analysis (``xla/service/gpu/model/
gpu_performance_model_base.cc``, ``gpu_hlo_cost_analysis.cc``); the start/done overlap is how its
latency-hiding scheduler's estimators (``analytical_latency_estimator``, ``sol_latency_estimator``)
see async collectives. What is not modelled: tile shapes and wave quantisation (beyond K, a matmul
gets the large-matmul rate whatever its shape), caches (every byte goes to HBM), kernels running
concurrently on several streams, host work beyond one dispatch per step, the autotuner's choices (a
deviceless compile has none), and collectives' latency beyond the launch (``docs/step-time.md``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable

from explorer.hlo import program as hlo
from explorer.hlo.instructions import Instruction, tuple_element
from explorer.predict.roofline import Estimate
from explorer.predict.step_rates import MATMUL_FIXED_K, Rates, rates
from explorer.hardware.accelerators import Chip, Gpu
from explorer.predict.collective_costs import collective_seconds_per_byte, dcn_sends

SCOPE = "validated on one real H200 and against published MaxText runs on TPU v5e, v5p, v4, v6e and TPU7x only: docs/step-time.md"  # said wherever a prediction is shown
OVERLAP = 0.95  # XLA's kMemoryComputeParallelism: how much of the shorter of compute and memory hides under the longer
FREE = frozenset(
    {
        "parameter",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "constant",
        "while",
        "conditional",
        "call",
        "after-all",
        "add-dependency",
        "opt-barrier",
        "partition-id",
        "replica-id",
        "fusion-done",
        "copy-done",
        "async-done",
        "async-start",  # its wrapped computation's kernels are counted there (``hlo.Program``'s control walk)
        "async-update",
        "iota",
    }
)
COPIES = frozenset({"copy", "copy-start"})
BITCASTS = frozenset({"ConcatBitcast"})  # TPU custom calls that move nothing
HOST_SLICES = frozenset(
    {"dynamic-update-slice", "dynamic-update-slice-start", "dynamic-slice", "dynamic-slice-start"}
)  # into or out of S(5)
SLICES = frozenset({"slice", "dynamic-slice", "slice-start"})  # unfused slices (a TPU's async ones: DMAs) read what they keep
_ARRAY_LAYOUT = re.compile(r"([a-z]+\d*[a-z0-9]*\[[\d,]*\])(\{[^}]*\})?")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel of the program: per run, its flops and bytes and predicted seconds (launch included)."""

    name: str
    kind: str  # matmul | memory | copy | collective | host (host offload's transfers)
    runs: int  # per step (a loop body's kernel: its trip count)
    flops: float
    bytes: float
    dtype: str | None  # a matmul's operand element type
    seconds: float


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The predicted step: seconds per step on one device, and what they are made of (each per step)."""

    step_s: float
    matmul_s: float  # matmul kernels (their launches included)
    memory_s: float  # every other kernel
    collective_s: float  # collectives not hidden under the kernels XLA scheduled beside them
    dispatch_s: float  # the host's dispatch of the step and its wait for the result
    launches: int  # kernels per step
    validated: str
    host_s: float = 0.0  # host offload's transfers not hidden under the kernels XLA scheduled beside them
    launch_s: float = 0.0  # the kernels' launches (in the buckets above): a kernel's on a GPU, a NCCL collective's; 0 on a TPU

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def parts(self) -> dict[str, float]:
        """What ``Estimate.prediction_parts`` keeps: the buckets that add up to ``step_s``, the launches in them."""
        return {
            "kernels_s": self.step_s,
            "dispatch_s": self.dispatch_s,
            "matmul_s": self.matmul_s,
            "memory_s": self.memory_s,
            "collective_s": self.collective_s,
            "host_s": self.host_s,
            "launches": self.launches,
            "launch_s": self.launch_s,
        }


def hbm_bytes(shape: str) -> int:
    """Bytes of the arrays of ``shape`` that live in HBM: a TPU array whose layout puts it in another memory space
    (``S(1)``: the core's VMEM) moves no HBM bytes.

    >>> hbm_bytes("(f32[4,1024]{1,0:T(4,128)S(1)}, f32[8]{0})")
    32
    """
    return sum(hlo.shape_bytes(part[1]) for part in _ARRAY_LAYOUT.finditer(shape) if not re.search(r"S\([1-9]", part[2] or ""))


def kernels(hlo_text: str, chip: Chip | Gpu, collective_rates: dict[str, float] | None = None) -> list[Kernel]:
    """Every kernel of the program with its predicted time per run (see the module docstring).

    ``collective_rates`` gives seconds per result byte for each collective op (``roofline``'s
    times over the program's bytes: ``collective_seconds_per_byte``); without it collectives cost
    their launch only.
    """
    program, device = hlo.read_program(hlo_text), rates(chip)
    found = []
    for computation in program.control:
        runs = program.runs.get(computation, 1)
        for instruction in program.computations[computation]:
            kernel = _kernel(instruction, program, computation, runs, device, collective_rates or {})
            if kernel is not None:
                found.append(kernel)
    return found


def _kernel(instruction: Instruction, program: hlo.Program, computation: str, runs: int, device: Rates, per_byte: dict[str, float]):
    op = instruction.op
    if op in FREE or op.endswith("-done"):
        return None
    collective = op.removesuffix("-start")
    if op == "send" and instruction.name in dcn_sends(program.text):  # a collective's part across TPU slices (MegaScale)
        send = dcn_sends(program.text)[instruction.name]
        return Kernel(instruction.name, "collective", runs, 0.0, send.bytes, None, send.bytes * per_byte.get(f"dcn:{send.op}", 0.0))
    if collective in hlo.COLLECTIVES:
        size = hlo.shape_bytes(tuple_element(instruction.shape, 1) if op.endswith("-start") else instruction.shape)
        seconds = size * per_byte.get(collective, 0.0) + device.collective_launch_s
        return Kernel(instruction.name, "collective", runs, 0.0, size, None, seconds)
    if op in COPIES and any(hlo.on_host(tuple_element(instruction.shape, i)) for i in (0, 1)):
        return _host_transfer(instruction, runs, device)
    if op in HOST_SLICES and hlo.on_host(instruction.shape):
        return _host_slice(instruction, program, computation, runs, device)
    if op in COPIES or op in SLICES:
        return _timed(instruction.name, "copy", runs, 0.0, _copied(instruction, program, computation), None, device)
    if op == "custom-call":
        if any(f'custom_call_target="{name}"' in instruction.attributes for name in BITCASTS):
            return None
        if 'custom_call_target="tpu_custom_call"' in instruction.attributes:
            return _pallas_kernel(instruction, program, computation, runs, device)
        work = hlo.instruction_matmul_work(instruction, _shape_of(program.symbols[computation]))
        if work is None:
            moved = _operand_bytes(instruction, program, computation) + hbm_bytes(instruction.shape)
            return _timed(instruction.name, "memory", runs, 0.0, moved, None, device)
        lhs = program.symbols[computation].get(instruction.operands[0])
        costed = _costed_flops(work[0], tuple_element(instruction.shape, 0))
        return _timed(instruction.name, "matmul", runs, work[0], work[1], hlo.element_type(lhs.shape) if lhs else None, device, costed)
    called = (
        next((name for role, name in hlo.callees(instruction.attributes) if role in ("calls", "to_apply")), None)
        if op in ("fusion", "fusion-start")
        else None
    )
    if called is None or called not in program.computations:  # an unfused op: reads its operands, writes its result
        moved = _operand_bytes(instruction, program, computation) + hbm_bytes(instruction.shape)
        return _timed(instruction.name, "memory", runs, 0.0, moved, None, device)
    flops, costed, dtype = _fused_matmul(called, program)
    moved = _fused_bytes(called, program)
    return _timed(instruction.name, "matmul" if flops else "memory", runs, flops, moved, dtype, device, costed)


def _host_transfer(instruction: Instruction, runs: int, device: Rates) -> Kernel:
    """Host offload's copy to or from host memory (``S(5)``): its host-side array at the host link's rate. An async one
    (``copy-start``) runs beside the kernels XLA scheduled before its ``copy-done`` (``predict``)."""
    shape = instruction.shape
    moved = float(
        next((hlo.shape_bytes(tuple_element(shape, i)) for i in (0, 1) if hlo.on_host(tuple_element(shape, i))), hlo.shape_bytes(shape))
    )
    return _host_kernel(instruction, runs, moved, device)


def _host_kernel(instruction: Instruction, runs: int, moved: float, device: Rates) -> Kernel:
    """A transfer of ``moved`` bytes to or from host memory, at the host link's rate."""
    return Kernel(instruction.name, "host", runs, 0.0, moved, None, moved / device.host_bandwidth)


def _host_slice(instruction: Instruction, program: hlo.Program, computation: str, runs: int, device: Rates) -> Kernel:
    """Host offload as the TPU compiler writes a scanned layer's: each iteration writes its slice of a stacked buffer in
    host memory (``dynamic-update-slice`` into ``S(5)``) and the backward pass reads it back (``dynamic-slice`` from
    it): the slice, not the stack, at the host link's rate. An async one (``-start``) runs beside the kernels XLA
    scheduled before its ``-done``."""
    if instruction.op.startswith("dynamic-update-slice"):
        update = program.symbols[computation].get(instruction.operands[1]) if len(instruction.operands) > 1 else None
        moved = float(hlo.shape_bytes(update.shape)) if update is not None else 0.0
    else:
        moved = float(hlo.shape_bytes(tuple_element(instruction.shape, 1) if instruction.op.endswith("-start") else instruction.shape))
    return _host_kernel(instruction, runs, moved, device)


def _pallas_kernel(instruction: Instruction, program: hlo.Program, computation: str, runs: int, device: Rates) -> Kernel:
    """A Pallas/Mosaic kernel (a TPU ``tpu_custom_call``, e.g. splash attention): its flops and bytes from the cost
    estimate the call carries (``pl.pallas_call(cost_estimate=...)``), else from its shapes: its operands and results'
    bytes, and, for an attention kernel (its first two operands ``q[..., Sq, D]`` and ``k[..., Sk, D]``), the flops of
    ``q @ k.T`` and of the weights times ``v``: 4 x (q's elements) x Sk, an estimate (causal masking's skipped blocks and
    a backward kernel's extra products are not seen)."""
    symbols = program.symbols[computation]
    operands = [symbols[o].shape for o in instruction.operands if o in symbols]
    dtype = hlo.element_type(operands[0]) if operands else None
    estimate = hlo.kernel_cost_estimate(instruction.attributes)
    if estimate is not None:
        flops, moved = estimate
    else:
        moved = float(_operand_bytes(instruction, program, computation) + hbm_bytes(instruction.shape))
        flops = _attention_flops(operands)
    return _timed(instruction.name, "matmul" if flops else "memory", runs, flops, moved, dtype, device)


def _attention_flops(operands: list[str]) -> float:
    """4 x q's elements x Sk where the first two operands are ``q[..., Sq, D]`` and ``k[..., Sk, D]`` with the same
    leading dimensions (an attention kernel's q and k); else 0.

    >>> _attention_flops(["bf16[2,8,1024,128]{3,2,1,0}", "bf16[2,8,512,128]{3,2,1,0}", "bf16[2,8,512,128]{3,2,1,0}"])
    4294967296.0
    """
    if len(operands) < 3:
        return 0.0
    q, k = (hlo.array_dims(shape) for shape in operands[:2])
    if not q or not k or len(q) != len(k) or len(q) < 3 or q[:-2] != k[:-2] or q[-1] != k[-1]:
        return 0.0
    return 4.0 * math.prod(q) * k[-2]


def _timed(
    name: str, kind: str, runs: int, flops: float, moved: float, dtype: str | None, device: Rates, costed: float | None = None
) -> Kernel:
    """A kernel's time: its compute (``costed`` flops, the matmuls' with their tiles' fixed cost; else ``flops``) and its
    memory, combined as XLA's GPU model combines them, and its launch."""
    compute = (costed or flops) / device.matmul_rate(dtype) if flops else 0.0
    memory = moved / device.hbm_bandwidth
    seconds = compute + memory - OVERLAP * min(compute, memory) + device.launch_s
    return Kernel(name, kind, runs, flops, moved, dtype, seconds)


def _shape_of(symbols: dict[str, Instruction]):
    """An operand's result shape by its name (None where the computation does not define it)."""
    return lambda name: symbols[name].shape if name in symbols else None


def _operand_bytes(instruction: Instruction, program: hlo.Program, computation: str) -> int:
    symbols = program.symbols[computation]
    return sum(hbm_bytes(symbols[o].shape) for o in instruction.operands if o in symbols)


def _copied(instruction: Instruction, program: hlo.Program, computation: str) -> float:
    """HBM bytes a copy or slice moves: it reads its result's worth of its source and writes its result (an async
    one's result is a tuple: the destination, then the source, for a copy; the source, then the slice, for a slice)."""
    shape, op = instruction.shape, instruction.op
    if op == "copy-start":
        return float(hbm_bytes(tuple_element(shape, 0)) + hbm_bytes(tuple_element(shape, 1)))
    result = tuple_element(shape, 1) if op == "slice-start" else shape
    source = program.symbols[computation].get(instruction.operands[0]) if instruction.operands else None
    read = hlo.shape_bytes(result) if source is None or hbm_bytes(source.shape) else 0
    return float(read + hbm_bytes(result))


def _fused_matmul(called: str, program: hlo.Program) -> tuple[float, float, str | None]:
    """The flops of the dots and convolutions inside a fused computation (nested fusions too), the flops they cost
    (``_costed_flops``), and their operand type."""
    flops, costed, dtype = 0.0, 0.0, None
    symbols = program.symbols[called]
    for instruction in program.computations[called]:
        if instruction.op in ("dot", "convolution"):
            work = hlo.instruction_matmul_work(instruction, _shape_of(symbols))
            if work:
                flops += work[0]
                costed += _costed_flops(work[0], instruction.shape)
                lhs = symbols.get(instruction.operands[0])
                dtype = dtype or (hlo.element_type(lhs.shape) if lhs else None)
        elif instruction.op == "fusion":
            nested = next((name for role, name in hlo.callees(instruction.attributes) if role in ("calls", "to_apply")), None)
            if nested in program.computations and nested != called:
                more, more_costed, kind = _fused_matmul(nested, program)
                flops, costed, dtype = flops + more, costed + more_costed, dtype or kind
    return flops, costed, dtype


def _costed_flops(flops: float, result: str) -> float:
    """A matmul's flops with its tiles' fixed cost: each output tile runs K / 64 steps and pays about ``MATMUL_FIXED_K``
    / 64 more (``step_rates``), so a matmul contracting K costs flops x (K + MATMUL_FIXED_K) / K."""
    elements = hlo.shape_bytes(result) / max(hlo.DTYPE_BYTES.get(hlo.element_type(result) or "f32", 4), 1)
    contracted = flops / (2 * elements) if elements else 0.0
    return flops * (contracted + MATMUL_FIXED_K) / contracted if contracted > 0 else flops


def _fused_bytes(called: str, program: hlo.Program) -> float:
    """Bytes a fusion reads and writes: each parameter once unless only sliced or updated in place; each output once."""
    instructions = program.computations[called]
    users = _users(called, program)
    read = sum(_read(p, users, program) for p in instructions if p.op == "parameter")
    root = next((i for i in instructions if i.root), None)
    return read + (_written(root, program.symbols[called]) if root else 0.0)


def _users(called: str, program: hlo.Program) -> dict[str, list[Instruction]]:
    """Each value of a computation and the instructions that use it."""
    users: dict[str, list[Instruction]] = {}
    for instruction in program.computations[called]:
        for operand in instruction.operands:
            users.setdefault(operand, []).append(instruction)
    return users


def _read(value: Instruction, users: dict[str, list[Instruction]], program: hlo.Program | None = None) -> float:
    """Bytes read of ``value``: a slice's worth where it is only sliced, nothing where it is only updated in place; what a
    nested fusion reads of it is what its computation reads of the matching parameter (a layer's slice of a stacked
    weight, sliced inside a nested loop fusion)."""
    full = float(hbm_bytes(value.shape))
    total = 0.0
    for user in users.get(value.name, ()):
        if user.op == "bitcast" or _relaid_in_place(user, value):
            total += _read(user, users, program)
        elif user.op == "fusion" and program is not None and (nested := _nested_parameter(user, value, program)) is not None:
            total += _read(nested[0], nested[1], program)
        elif user.op in ("dynamic-slice", "slice", "gather") and user.operands[0] == value.name:
            total += hbm_bytes(user.shape) if full else 0
        elif user.op == "dynamic-update-slice" and user.operands[0] == value.name:
            continue
        else:
            return full
    return min(total, full)


def _nested_parameter(fusion: Instruction, value: Instruction, program: hlo.Program):
    """The parameter of a nested fusion's computation that ``value`` is passed as (its one use among the operands), with
    that computation's users; None where it is passed more than once or the computation is not known."""
    if fusion.operands.count(value.name) != 1:
        return None
    called = next((name for role, name in hlo.callees(fusion.attributes) if role == "calls"), None)
    if called not in program.computations:
        return None
    index = fusion.operands.index(value.name)
    parameter = next((i for i in program.computations[called] if i.op == "parameter" and i.operands[:1] == (str(index),)), None)
    return None if parameter is None else (parameter, _users(called, program))


def _relaid_in_place(user: Instruction, value: Instruction) -> bool:
    """``user`` is a nested fusion that changes only the tiling of ``value`` in place (its output aliases its one operand,
    ``output_to_operand_aliasing={{}: (0, {})}``): TPU7x programs (libtpu 0.0.50) relay a stacked bf16 weight or buffer
    from ``T(16,128)`` to ``T(8,128)`` tiles this way before slicing it or updating it in place. Its users decide what is
    read, as a bitcast's do: a layer's slice of a stack, not the stack (which counted an 80-layer stack per layer)."""
    return (
        user.op == "fusion"
        and user.operands[:1] == (value.name,)
        and len(user.operands) == 1
        and "output_to_operand_aliasing={{}: (0, {})}" in user.attributes
        and hlo.array_dims(user.shape) == hlo.array_dims(value.shape)
    )


def _written(root: Instruction, symbols: dict[str, Instruction]) -> float:
    """Bytes a fusion's root writes: an in-place update writes the update only."""
    if root.op == "tuple":
        return sum(_written(symbols[o], symbols) for o in root.operands if o in symbols)
    if root.op == "bitcast" and root.operands and root.operands[0] in symbols:
        return _written(symbols[root.operands[0]], symbols)
    if root.op == "dynamic-update-slice" and len(root.operands) > 1 and root.operands[1] in symbols:
        return float(hbm_bytes(symbols[root.operands[1]].shape))
    return float(hbm_bytes(root.shape))


def predict(hlo_text: str, chip: Chip | Gpu, collectives: Iterable = ()) -> Prediction:
    """The predicted seconds per step of the program on one device of ``chip`` (see the module docstring).

    ``collectives`` are the program's costed collectives (``compile_result.CollectiveCost``: op, bytes, seconds).
    """
    program, device = hlo.read_program(hlo_text), rates(chip)
    per_byte = collective_seconds_per_byte(collectives, program, device)
    totals = {"matmul": 0.0, "memory": 0.0, "collective": 0.0, "host": 0.0}
    own, launches, launch_s = _seconds_by_computation(program, device, per_byte)
    for seconds in own.values():
        for bucket, value in seconds.items():
            totals[bucket] += value
    step = math.fsum(totals.values()) + device.dispatch_s
    return Prediction(
        step,
        totals["matmul"],
        totals["memory"],
        totals["collective"],
        device.dispatch_s,
        launches,
        device.validated,
        totals["host"],
        launch_s,
    )


def _seconds_by_computation(
    program: hlo.Program, device: Rates, per_byte: dict[str, float]
) -> tuple[dict[str, dict[str, float]], int, float]:
    """Each control computation's own kernels' seconds per step, by bucket (``_computation_seconds``: a loop or call
    between an async collective's start and done hides it for the seconds that callee and all it runs take), and the
    program's launches and their cost. One pass: every computation's whole time is kept for the callers that ask."""
    own: dict[str, dict[str, float]] = {}
    whole: dict[str, float] = {}
    launches = [0, 0.0]

    def step_seconds(computation: str) -> float:
        """A control computation's seconds per step, with every computation it runs as control flow."""
        if computation not in whole:
            whole[computation] = 0.0  # a cycle (none in XLA's programs) counts as nothing, not forever
            own[computation] = _computation_seconds(program, computation, device, per_byte, launches, step_seconds)
            called = {callee for instruction in program.computations[computation] for callee in program.control_callees(instruction)}
            whole[computation] = math.fsum(own[computation].values()) + math.fsum(map(step_seconds, called))
        return whole[computation]

    for computation in program.control:
        step_seconds(computation)
    return own, launches[0], launches[1]


def _computation_seconds(
    program: hlo.Program,
    computation: str,
    device: Rates,
    per_byte: dict[str, float],
    launches: list,
    step_seconds: Callable[[str], float],
) -> dict[str, float]:
    """The seconds per step of one control computation's kernels (times its runs), by bucket; adds its launches to
    ``launches[0]`` and their cost to ``launches[1]`` (where given). An async collective adds what the kernels between
    its start and its done do not hide, a loop or call between them included: ``step_seconds(callee)``, a callee's
    seconds per step, over this computation's runs, is one run of it. (The TPU compiler starts a windowed einsum's last
    collective-permute before the layer's next windowed loops and waits for it after them.)"""
    runs = program.runs.get(computation, 1)
    totals = {"matmul": 0.0, "memory": 0.0, "collective": 0.0, "host": 0.0}
    pending: dict[str, list] = {}  # an async collective's or host transfer's name -> [seconds, kernel time since, bucket]
    for instruction in program.computations[computation]:
        if instruction.op.endswith("-done") and instruction.operands and instruction.operands[0] in pending:
            cost, hidden, bucket = pending.pop(instruction.operands[0])
            totals[bucket] += runs * max(cost - hidden, 0.0)
            continue
        if pending:
            called = program.control_callees(instruction)
            if called:
                for entry in pending.values():
                    entry[1] += math.fsum(step_seconds(callee) for callee in called) / runs
        kernel = _kernel(instruction, program, computation, runs, device, per_byte)
        if kernel is None:
            continue
        launches[0] += runs
        if len(launches) > 1:
            launches[1] += runs * (
                0.0 if kernel.kind == "host" else device.collective_launch_s if kernel.kind == "collective" else device.launch_s
            )
        if kernel.kind in ("collective", "host") and instruction.op.endswith("-start"):
            pending[instruction.name] = [kernel.seconds, 0.0, kernel.kind]
            continue
        bucket = kernel.kind if kernel.kind in ("matmul", "collective", "host") else "memory"
        totals[bucket] += runs * kernel.seconds
        for entry in pending.values():
            entry[1] += kernel.seconds
    for cost, _, bucket in pending.values():  # a start whose done this text does not show
        totals[bucket] += runs * cost
    return totals


@dataclasses.dataclass(frozen=True)
class Bubble:
    """A pipeline's bubble in the predicted step: the program's pipeline loops (those that run the pipeline's trip
    count, forward and backward) and the share of their predicted time in which a stage has no microbatch.

    Every iteration computes every stage (an idle one on a placeholder), so the loops' time holds the bubble:
    ``bubble_s = loop_s * (stages - 1) / iterations`` (MaxText's count), ``share`` of the predicted step. An estimate,
    as the step it is a share of."""

    loops: int  # the loops that run ``iterations`` times per run of the computation holding them
    stages: int
    iterations: int
    loop_s: float  # their predicted seconds per step (every computation they run)
    bubble_s: float
    step_s: float
    share: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def pipeline_bubble(
    hlo_text: str, chip: Chip | Gpu, stages: int, iterations: int, collectives: Iterable = (), step_s: float | None = None
) -> Bubble:
    """The bubble of a pipeline of ``stages`` stages whose loop runs ``iterations`` times (``schedule.iterations``), as
    the program runs it: its loops found by their trip count (the runs of a loop body per run of the computation
    holding the loop), their kernels predicted as ``predict`` predicts them. ``step_s``: the predicted step it is a share
    of (``with_prediction``'s, never below the bound), else ``predict``'s. No such loop: a bubble of 0 in 0 loops."""
    program, device = hlo.read_program(hlo_text), rates(chip)
    per_byte = collective_seconds_per_byte(collectives, program, device)
    control = set(program.control)
    loops: list[str] = []  # the pipeline loops' bodies and conditions
    found = 0
    for computation in program.control:
        for instruction in program.computations[computation]:
            if instruction.op != "while":
                continue
            roles = dict(hlo.callees(instruction.attributes))
            body = roles.get("body")
            if body and program.runs.get(body, 0) == iterations * program.runs.get(computation, 1):
                loops += [name for name in (body, roles.get("condition")) if name]
                found += 1
    inside, stack = set(), list(loops)
    while stack:  # the loops' bodies and every control computation they run (the blocks' own scans among them)
        name = stack.pop()
        if name in inside or name not in control:
            continue
        inside.add(name)
        stack += [callee for i in program.computations[name] for callee in program.control_callees(i)]
    own, _, _ = _seconds_by_computation(program, device, per_byte)
    loop_s = math.fsum(math.fsum(own[c].values()) for c in inside)
    step_s = step_s or predict(hlo_text, chip, collectives).step_s
    bubble_s = loop_s * (stages - 1) / iterations if iterations else 0.0
    return Bubble(found, stages, iterations, loop_s, bubble_s, step_s, bubble_s / step_s if step_s else 0.0)


def with_prediction(estimate: Estimate, hlo_text: str, chip: Chip | Gpu, collectives: Iterable = ()) -> Estimate:
    """``estimate`` (the roofline's bound) with the program's predicted step beside it; unchanged without a program text.

    Never below the bound: where the kernels add up to less (a TPU program's work the text does not show, which XLA's
    ``cost_analysis()`` counts in the bound's bytes), the bound is the prediction."""
    if not hlo_text:
        return estimate
    prediction = predict(hlo_text, chip, collectives)
    fp8 = math.fsum(flops for dtype, flops in hlo.matmul_flops_by_dtype(hlo_text).items() if dtype.startswith("f8"))
    parts = prediction.parts() | {"fp8_flops": fp8}  # fp8 matmuls' flops per step: said beside the prediction (fp8_note)
    return dataclasses.replace(estimate, predicted_s=max(prediction.step_s, estimate.step_s), prediction_parts=parts)


def predict_totals(flops: float, bytes_accessed: float, collective_s: float, chip: Chip | Gpu, dtype: str = "bf16") -> float:
    """A step predicted without a program (the advisor's stage 1): its matmul flops at the rate ``dtype`` gets, its
    bytes at the HBM rate, its collectives, added: kernels run one after another, and without XLA's schedule no
    collective is known to hide under them. Per device, in seconds."""
    device = rates(chip)
    return flops / device.matmul_rate(dtype) + bytes_accessed / device.hbm_bandwidth + collective_s + device.dispatch_s
