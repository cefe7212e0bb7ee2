"""The collectives in a compiled program's HLO text, weighted by how often each runs.

An op in a loop body with a known trip count of n (``nn.scan`` over n layers) counts
n times. Byte sizes come from the HLO element types; an element type this module does
not know raises ``ExplorerError`` instead of being guessed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Callable

from explorer.hlo.instructions import Instruction, convolution_flops, instructions, parse_instruction, program_lines
from explorer.hlo.loops import trip_count
from explorer.errors import ExplorerError

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "s4": 1,
    "u4": 1,
    "s2": 1,
    "u2": 1,
    "f8e4m3fnuz": 1,
    "f8e5m2fnuz": 1,
    "f8e4m3b11fnuz": 1,
    "f8e4m3": 1,
    "f8e3m4": 1,
    "f8e8m0fnu": 1,
    "f4e2m1fn": 1,
    "token": 0,
}


_COLLECTIVE_LINE = re.compile(r"\s(?:" + "|".join(COLLECTIVES) + r")(?:-start|-done)?\(")  # which lines to parse at all
_ARRAY_SHAPE = re.compile(r"(?P<dtype>[a-z]+\d*[a-z0-9]*)\[(?P<dims>[\d,]*)\]")
_COMPUTATION_HEADER = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*->.*\{\s*$")
_CALLEE = re.compile(
    r"\b(?P<role>calls|to_apply|condition|body|true_computation|false_computation)=%?(?P<name>[\w.\-]+)"
    r"|\b(?P<roles>branch_computations|called_computations)=\{(?P<names>[^}]*)\}"
)
_CALLEE_WORDS = ("calls=", "to_apply=", "condition=", "body=", "_computation=", "_computations=")
_WHILE = re.compile(r"\swhile\(")


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
    computations, entry, runs, _, unbounded = parsed(hlo_text)
    found = {op: {"count": 0, "bytes": 0} for op in COLLECTIVES}
    for name, lines in computations.items():
        for instruction in _collectives(lines):
            if not instruction.op.endswith("-start"):
                found[instruction.op.removesuffix("-done")]["count"] += runs[name]
                found[instruction.op.removesuffix("-done")]["bytes"] += runs[name] * shape_bytes(instruction.shape)
    return ProgramCollectives(found, unbounded)


@functools.lru_cache(maxsize=2)
def parsed(hlo_text: str):
    """Computations, entry, runs per computation (with trip counts, and bodies once), loops without a trip count.

    Cached: the readers of one program (a large model's text is megabytes) share one parse.
    """
    computations, entry = _split_computations(hlo_text)
    (runs, once), unbounded = _times_each_computation_runs(computations, entry)
    return computations, entry, runs, once, unbounded


def _split_computations(hlo_text: str) -> tuple[dict[str | None, list[str]], str | None]:
    """The instruction lines of each computation (lines outside any go under None), and the entry's name."""
    computations: dict[str | None, list[str]] = {None: []}
    current, entry = None, None
    for line in program_lines(hlo_text):
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


def _times_each_computation_runs(
    computations: dict[str | None, list[str]],
    entry: str | None,
) -> tuple[tuple[dict[str | None, int], dict[str | None, int]], int]:
    """How many times each computation runs in one call of the entry, the same with every loop body counted once per
    entry into its loop (as XLA's ``cost_analysis()`` counts it), and how many loops have no known trip count: one
    walk over the lines for both counts.

    Without an entry (a fragment of a module) every computation counts as running once.
    """
    if entry is None:
        return ({name: 1 for name in computations}, {name: 1 for name in computations}), 0
    callers: dict[str, list[tuple[str | None, int]]] = {}  # callee -> (caller, times it runs per call of the caller)
    unbounded = 0
    for caller, lines in computations.items():
        for line in lines:
            named = callees(line)
            if not named:
                continue
            is_loop = _WHILE.search(line) is not None
            trip = trip_count(line, lines, computations) if is_loop else None
            unbounded += is_loop and trip is None
            for role, name in named:
                times = 1
                if trip is not None and role == "body":
                    times = trip
                elif trip is not None and role == "condition":
                    times = trip + 1
                callers.setdefault(name, []).append((caller, times))

    def counts(once: bool) -> dict[str | None, int]:
        @functools.cache
        def runs(name: str | None) -> int:
            if name == entry or name is None:
                return 1
            return sum(runs(caller) * (1 if once else times) for caller, times in callers.get(name, ()))

        return {name: runs(name) for name in computations}

    return (counts(once=False), counts(once=True)), unbounded


CONTROL_ROLES = frozenset({"condition", "body", "true_computation", "false_computation", "branch_computations"})


def callees(text: str) -> list[tuple[str, str]]:
    """Every computation an instruction's line (or its attributes) names, as (role, name): the one walk over callees
    that the loop counts and the step model's control flow share. Roles: ``calls``, ``to_apply``, ``condition``,
    ``body``, ``true_computation``, ``false_computation``, ``branch_computations``, ``called_computations``.

    >>> callees("%w = (s32[]) while(%t), condition=%cond.1, body=%body.2")
    [('condition', 'cond.1'), ('body', 'body.2')]
    >>> callees("%c = f32[] conditional(%p, %a, %b), branch_computations={%b0, %b1}")
    [('branch_computations', 'b0'), ('branch_computations', 'b1')]
    """
    found = []
    if not any(word in text for word in _CALLEE_WORDS):  # most lines name none: a substring test is ~50x a regex scan
        return found
    for match in _CALLEE.finditer(text):
        if match["name"]:
            found.append((match["role"], match["name"]))
        else:
            found.extend((match["roles"], name.strip().lstrip("%")) for name in match["names"].split(",") if name.strip())
    return found


def element_type(shape: str) -> str | None:
    """The element type of the first array in ``shape`` (``bf16`` of ``bf16[8,128]{1,0}``), or None."""
    match = _ARRAY_SHAPE.search(shape)
    return match["dtype"] if match else None


def shape_bytes(shape: str) -> int:
    total = 0
    for part in _ARRAY_SHAPE.finditer(shape):
        dims = [int(d) for d in part["dims"].split(",") if d]
        if part["dtype"] not in DTYPE_BYTES:
            raise ExplorerError("HLO element type", part["dtype"], f"is unknown; known: {sorted(DTYPE_BYTES)}")
        total += math.prod(dims) * DTYPE_BYTES[part["dtype"]]
    return total


def used(ops: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Only the collectives that occur at least once."""
    return {op: stats for op, stats in ops.items() if stats["count"]}


# --- per instruction: who takes part, and the work loops repeat ----------------------------


@dataclasses.dataclass(frozen=True)
class CollectiveOp:
    """One collective instruction: how often it runs per call, its result bytes per run, its groups.

    ``groups`` are the replica groups as logical device ids (positions in the
    program's device assignment, i.e. the mesh's devices in mesh order), or None
    when XLA wrote them in a form this module does not read. A collective-permute's
    groups are its source -> target pairs.
    """

    op: str
    runs: int
    bytes: int
    groups: tuple[tuple[int, ...], ...] | None
    name: str = ""  # the instruction's name in the module (``all-reduce.3``): where ``explorer.hlo.sources`` finds its line

    @property
    def group_size(self) -> int:
        return max((len(g) for g in self.groups), default=1) if self.groups else 1


def collective_ops(hlo_text: str, devices: int) -> list[CollectiveOp]:
    """Every collective instruction with its runs per call (loop trip counts included) and replica groups.

    ``devices`` is the program's device count (for ``replica_groups={}``: one group of all).
    """
    computations, _, runs, _, _ = parsed(hlo_text)
    found = []
    for name, lines in computations.items():
        for instruction in _collectives(lines):
            if instruction.op.endswith("-start"):
                continue
            op, line = instruction.op.removesuffix("-done"), instruction.attributes
            groups = _source_target_pairs(line) if op == "collective-permute" else replica_groups(line, devices)
            if instruction.op.endswith("-done") and groups is None:
                groups = _groups_of_start(instruction, lines, devices, op)
            found.append(CollectiveOp(op, runs[name], shape_bytes(instruction.shape), groups, instruction.name))
    return found


def _collectives(lines: list[str]) -> list[Instruction]:
    """The collective instructions among ``lines`` (their ``-start`` and ``-done`` too)."""
    parsed_lines = (parse_instruction(line) for line in lines if _COLLECTIVE_LINE.search(line))
    return [i for i in parsed_lines if i is not None and i.op.removesuffix("-start").removesuffix("-done") in COLLECTIVES]


def _groups_of_start(done: Instruction, lines: list[str], devices: int, op: str):
    """An async ``-done`` names its ``-start``; the groups are written on the start."""
    start = instructions(lines).get(done.operands[0], "") if done.operands else ""
    return _source_target_pairs(start) if op == "collective-permute" else replica_groups(start, devices)


def replica_groups(line: str, devices: int) -> tuple[tuple[int, ...], ...] | None:
    """The replica groups of an HLO instruction in any of XLA's syntaxes, as tuples of device ids.

    Example::

        >>> replica_groups("all-reduce(x), replica_groups={{0,2},{1,3}}", 4)
        ((0, 2), (1, 3))
        >>> replica_groups("all-gather(x), replica_groups=[2,2]<=[2,2]T(1,0)", 4)
        ((0, 2), (1, 3))
        >>> replica_groups("all-reduce(x), replica_groups=mesh['a'=2,'b'=2] {'a'}", 4)
        ((0, 2), (1, 3))
    """
    import numpy as np

    explicit = re.search(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}", line)
    if explicit:
        groups = tuple(tuple(int(i) for i in g.split(",") if i.strip()) for g in re.findall(r"\{([\d,\s]*)\}", explicit[1]))
        return groups or (tuple(range(devices)),)
    iota = re.search(r"replica_groups=\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?", line)
    if iota:
        shape = [int(d) for d in iota["shape"].split(",")]
        dims = [int(d) for d in iota["dims"].split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if iota["perm"]:
            ids = ids.transpose([int(p) for p in iota["perm"].split(",")])
        return tuple(tuple(int(i) for i in row) for row in ids.reshape(shape[0], -1))
    mesh = re.search(r"replica_groups=mesh\[(?P<axes>[^\]]*)\]\s*\{(?P<over>[^}]*)\}", line)
    if mesh:
        axes = re.findall(r"'([^']+)'=(\d+)", mesh["axes"])
        over = re.findall(r"'([^']+)'(?!:)", mesh["over"])
        names = [a for a, _ in axes]
        if ":" in mesh["over"] or any(o not in names for o in over):
            return None  # sub-axes ('a':(1)2): not read
        ids = np.arange(math.prod(int(n) for _, n in axes)).reshape([int(n) for _, n in axes])
        kept = [names.index(o) for o in over]
        rest = [i for i in range(len(names)) if i not in kept]
        size = math.prod(int(axes[i][1]) for i in kept)
        return tuple(tuple(int(i) for i in row) for row in ids.transpose(rest + kept).reshape(-1, size))
    return None


def _source_target_pairs(line: str) -> tuple[tuple[int, ...], ...] | None:
    pairs = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line)
    if not pairs:
        return None
    return tuple(tuple(int(i) for i in p.split(",")) for p in re.findall(r"\{(\d+,\d+)\}", pairs[1]))


@dataclasses.dataclass(frozen=True)
class LoopWork:
    """Matmul work that loops repeat beyond what ``cost_analysis()`` counts (it counts a loop body once).

    ``flops`` are 2 x M x N x K of every dot and convolution, ``bytes`` their
    operands and result, each times (runs with trip counts - runs with bodies once).
    """

    flops: float
    bytes: float


def loop_work(hlo_text: str) -> LoopWork:
    """The dot/convolution flops and bytes in loop bodies' iterations after the first."""
    computations, _, runs, once, _ = parsed(hlo_text)
    flops = moved = 0.0
    for name, lines in computations.items():
        extra = runs[name] - once[name]
        if extra <= 0 or name is None:
            continue
        symbols = instructions(lines)
        for line in lines:
            work = line_matmul_work(line, symbols)
            if work:
                flops += extra * work[0]
                moved += extra * work[1]
    return LoopWork(flops, moved)


_MATMUL = re.compile(r"\s(?:dot|convolution|custom-call)\(")  # which lines to parse at all (most are neither)
_GEMM_TARGET = re.compile(r'custom_call_target="__cublas\$(?:lt\$matmul|gemm)"')


def line_matmul_work(line: str, symbols: dict[str, str]) -> tuple[float, float, str] | None:
    """(flops, bytes, the left operand's element type) of a dot or convolution line, or of a cuBLAS gemm custom
    call (the GPU compiler's dots it hands to cuBLAS): 2 x output elements x contracted size."""
    instruction = parse_instruction(line) if _MATMUL.search(line) else None
    return instruction_matmul_work(instruction, lambda name: _result_shape(symbols.get(name, ""))) if instruction else None


def instruction_matmul_work(instruction: Instruction, shape_of: Callable[[str], str | None]) -> tuple[float, float, str] | None:
    """``line_matmul_work`` of a parsed instruction, its operands' shapes looked up by ``shape_of(name)``."""
    if len(instruction.operands) < 2:
        return None
    if instruction.op == "custom-call":
        return _gemm_call_work(instruction, shape_of)
    if instruction.op not in ("dot", "convolution"):
        return None
    out_dims = array_dims(instruction.shape)
    lhs_shape, rhs_shape = shape_of(instruction.operands[0]), shape_of(instruction.operands[1])
    if out_dims is None or lhs_shape is None or rhs_shape is None:
        return None
    lhs_dims = array_dims(lhs_shape)
    if instruction.op == "dot":
        contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", instruction.attributes)
        axes = [int(a) for a in contracting[1].split(",") if a] if contracting else []
        flops = 2.0 * math.prod(out_dims) * math.prod(lhs_dims[a] for a in axes if a < len(lhs_dims))
    else:
        flops = convolution_flops(instruction.attributes, lhs_dims, array_dims(rhs_shape) or [], out_dims)
    return flops, float(shape_bytes(instruction.shape) + shape_bytes(lhs_shape) + shape_bytes(rhs_shape)), element_type(lhs_shape) or "?"


def _gemm_call_work(instruction: Instruction, shape_of: Callable[[str], str | None]) -> tuple[float, float, str] | None:
    """A cuBLAS gemm custom call: its result is the first array of its shape (a workspace may follow), its
    contracted dimensions are in ``backend_config``'s ``dot_dimension_numbers``."""
    contracting = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', instruction.attributes)
    if not _GEMM_TARGET.search(instruction.attributes) or not contracting:
        return None
    out = _ARRAY_SHAPE.search(instruction.shape)
    lhs_shape, rhs_shape = shape_of(instruction.operands[0]), shape_of(instruction.operands[1])
    if out is None or lhs_shape is None or rhs_shape is None:
        return None
    lhs_dims = array_dims(lhs_shape)
    axes = [int(a) for a in re.findall(r"\d+", contracting[1])]
    contracted = math.prod(lhs_dims[a] for a in axes if a < len(lhs_dims))
    out_dims = [int(d) for d in out["dims"].split(",") if d]
    moved = float(shape_bytes(out[0]) + shape_bytes(lhs_shape) + shape_bytes(rhs_shape))
    return 2.0 * math.prod(out_dims) * contracted, moved, element_type(lhs_shape) or "?"


def array_dims(shape: str) -> list[int] | None:
    """The dimensions of the first array in ``shape`` (None where it holds none)."""
    match = _ARRAY_SHAPE.search(shape)
    return [int(d) for d in match["dims"].split(",") if d] if match else None


def _result_shape(line: str) -> str | None:
    instruction = parse_instruction(line)
    return instruction.shape if instruction else None


@dataclasses.dataclass(frozen=True)
class ParameterLayout:
    """One entry parameter as the compiled program lays it out in memory."""

    shape: str  # e.g. ``s32[]{:T(128)}``
    bytes: int  # elements x element size
    padded_bytes: int  # after rounding the tiled dimensions up to the tile


def entry_parameters(hlo_text: str) -> list[ParameterLayout]:
    """The entry computation's parameters with their tiled sizes (TPU pads small arrays to whole tiles).

    Example: a scalar ``s32[]{:T(128)}`` occupies one tile of 128 elements, 512 bytes.

        >>> [p.padded_bytes for p in entry_parameters("entry_computation_layout={(s32[]{:T(128)}, f32[4,1024]{1,0:T(4,128)})->s32[]}")]
        [512, 16384]
    """
    layout = re.search(r"entry_computation_layout=\{\((?P<params>.*?)\)->", hlo_text)
    if not layout:
        return []
    found = []
    for part in re.finditer(r"(?P<dtype>[a-z]+\d*[a-z0-9]*)\[(?P<dims>[\d,]*)\](?:\{(?P<layout>[^}]*)\})?", layout["params"]):
        if part["dtype"] not in DTYPE_BYTES:
            raise ExplorerError("HLO element type", part["dtype"], f"is unknown; known: {sorted(DTYPE_BYTES)}")
        dims = [int(d) for d in part["dims"].split(",") if d]
        size = DTYPE_BYTES[part["dtype"]]
        found.append(ParameterLayout(part[0], math.prod(dims) * size, _padded_elements(dims, part["layout"] or "") * size))
    return found


def _padded_elements(dims: list[int], layout: str) -> int:
    """Elements after the first tile ``T(a,b,...)`` rounds the most-minor dimensions up."""
    minor_to_major, _, rest = layout.partition(":")
    order = [int(d) for d in minor_to_major.split(",") if d.strip()] or list(range(len(dims) - 1, -1, -1))
    physical = [dims[d] for d in reversed(order)]  # major to minor
    tile = re.search(r"T\(([\d,]+)\)", rest)
    if tile:
        sizes = [int(t) for t in tile[1].split(",")]
        physical = [1] * max(len(sizes) - len(physical), 0) + physical
        for offset, t in enumerate(reversed(sizes), start=1):
            physical[-offset] = -(-physical[-offset] // t) * t
    return math.prod(physical)


def matmul_work(hlo_text: str) -> LoopWork:
    """Every dot/convolution's flops and bytes, times how often its computation runs per step.

    The lower bound on a program's work that its optimized HLO text alone gives: used where XLA
    has no ``cost_analysis()`` to offer (a program that does not fit the chip, read from XLA's
    dump), and where it misses library calls (on a GPU: cuBLAS and Triton matmuls). Elementwise
    work is left out, so it is at most ``cost_analysis()``'s flops (a test checks both on a
    program that fits).
    """
    flops = moved = 0.0
    for runs, work in _matmuls(hlo_text):
        flops += runs * work[0]
        moved += runs * work[1]
    return LoopWork(flops, moved)


def matmul_flops_by_dtype(hlo_text: str) -> dict[str, float]:
    """``matmul_work``'s flops split by the element type of each matmul's left operand (``bf16``, ``f32``, ...):
    what decides the rate a device runs them at."""
    found: dict[str, float] = {}
    for runs, work in _matmuls(hlo_text):
        found[work[2]] = found.get(work[2], 0.0) + runs * work[0]
    return found


def _matmuls(hlo_text: str):
    """(runs per step, (flops, bytes, left operand's element type)) of every dot, convolution and gemm call."""
    computations, _, runs, _, _ = parsed(hlo_text)
    for name, lines in computations.items():
        if name is None or runs.get(name, 0) <= 0:
            continue
        symbols = instructions(lines)
        for line in lines:
            work = line_matmul_work(line, symbols)
            if work:
                yield runs[name], work


_COST_ESTIMATE = re.compile(r'"cost_estimate":\{(?P<fields>[^{}]*)\}')
HOST_MEMORY_SPACE = re.compile(r"S\(5\)")  # a TPU layout's memory space 5: pinned host memory (host offload's destination)


def kernel_cost_estimate(line: str) -> tuple[float, float] | None:
    """A Pallas/Mosaic kernel's own cost estimate (flops, bytes accessed), as ``pl.pallas_call(..., cost_estimate=
    pl.CostEstimate(...))`` writes it into the TPU custom call's ``backend_config``; None where the call carries none.

    >>> kernel_cost_estimate('custom-call(%q), custom_call_target="tpu_custom_call", backend_config={"cost_estimate":'
    ...                      '{"flops":"1200","transcendentals":"7","bytes_accessed":"640"}}')
    (1200.0, 640.0)
    """
    found = _COST_ESTIMATE.search(line)
    if not found:
        return None
    fields = dict(re.findall(r'"(\w+)":"?(\d+)"?', found["fields"]))
    if "flops" not in fields or "bytes_accessed" not in fields:
        return None
    return float(fields["flops"]), float(fields["bytes_accessed"])


def on_host(shape: str) -> bool:
    """Whether an array's layout places it in host memory (``S(5)``, where host offload puts activations).

    >>> on_host("bf16[1024]{0:T(1024)S(5)}"), on_host("bf16[1024]{0:T(1024)}")
    (True, False)
    """
    return bool(HOST_MEMORY_SPACE.search(shape))


@functools.lru_cache(maxsize=2)
def read_program(hlo_text: str) -> "Program":
    """``Program(hlo_text)``, cached as ``parsed`` is: the readers of one compile (its prediction, its kernels, its
    pipeline's bubble) share one parse of each line, as does a refit predicting one recorded program many times
    (tests/explorer/predict/test_tpu_published.py: 80 predictions of two programs). A ``Program`` is not changed after
    it is made."""
    return Program(hlo_text)


class Program:
    """The program's computations as ``Instruction`` records, how many times each runs per step (``parsed``), and
    which of them run as control flow (the entry, loop bodies and conditions, branches, calls, async wrappers: the
    computations whose instructions are kernels; a fusion's computation is inside its kernel)."""

    def __init__(self, hlo_text: str):
        computations, entry, runs, _, _ = parsed(hlo_text)
        self.text = hlo_text
        self.runs = runs
        self.entry = entry
        self.computations = {
            name: [i for i in map(parse_instruction, lines) if i is not None] for name, lines in computations.items() if name is not None
        }
        self.symbols = {name: {i.name: i for i in instructions} for name, instructions in self.computations.items()}
        self.control = self._control(entry)

    def _control(self, entry: str | None) -> list[str]:
        """The entry and every computation it runs as control flow (not fused): loop bodies, branches, calls, and the
        computations async wrappers (``async-start``) run."""
        found, todo = [], [entry] if entry else list(self.computations)
        while todo:
            name = todo.pop()
            if name in found or name not in self.computations:
                continue
            found.append(name)
            for instruction in self.computations[name]:
                todo.extend(self.control_callees(instruction))
        return found

    def control_callees(self, instruction: Instruction) -> list[str]:
        """The computations of this program ``instruction`` runs as control flow: a loop's body and condition, a branch, a
        call, an async wrapper's computation (not a fusion's, which is inside its kernel)."""
        return [
            callee
            for role, callee in callees(instruction.attributes)
            if callee in self.computations
            and (role in CONTROL_ROLES or (role in ("calls", "to_apply") and instruction.op in ("call", "async-start")))
        ]
