"""What fills a device's memory over a compiled program: XLA's buffer assignment set against its schedule.

Every compile writes, with ``xla_dump_to`` (``dumps``), the buffer assignment (each allocation with its values, their
offset and size: ``allocation 2: size 3670016, preallocated-temp:`` then ``value: <38 fusion.4 @0> (size=524288,
offset=3145728): f32[256,512]{1,0}``) and XLA's live ranges over the scheduled program (``HloLiveRange``: the
instruction sequence, then ``fusion.4{}:2-3`` per value, program positions, both ends included). This module reads
both into one ``Heap``, the engine of the memory breakdown, as XProf's Memory Viewer does from the same assignment
(``hlo_proto_to_memory_visualization_utils.cc`` in openxla/xprof: the heap simulator's trace replayed, buffers with
an indefinite lifetime added to every point):

- allocations of an indefinite lifetime (entry parameters, outputs that may be live out, constants, thread-local
  buffers) hold their whole size from the first point to the last;
- the heap (the other allocations, XLA's ``preallocated-temp``) holds, at each program point, the buffers whose values
  are live there: values sharing memory (the same allocation, offset and size, live at once: an in-place update, a
  loop's carried value, a bitcast) are one buffer, counted once;
- the peak is the point where the sum is highest (the first such point), and the buffers live there are what fills it.

XLA's own figure, the memory-usage report's total for a memory space (``Total bytes``, what the TPU compiler holds
against the HBM it allows), is the sum of the space's allocation sizes: the heap's allocation is its high-water mark,
which holds the live buffers and the gaps the placement left between them. ``Heap.fragmentation_bytes`` is that
difference at the peak; the live buffers plus it are XLA's figure to the byte.

Device memory is color 0 (TPU and GPU HBM, a CPU's RAM); color 5 is host memory (where host offload puts arrays), read
the same way (``Heap.host``); TPU's other colors (1 VMEM, 2 SMEM, ...) are on-chip scratch and left out.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from explorer.hlo.instructions import parse_instruction
from explorer.hlo.loops import trip_count
from explorer.hlo.program import COLLECTIVES, callees, parsed

DEVICE_COLOR = 0
HOST_COLOR = 5  # XLA's host memory space (TPU layouts write it S(5)): where host offload puts arrays
# Instructions that pass a value on without computing it: a buffer they name is described by the one that made it.
PASS_THROUGH = frozenset(
    {
        "parameter",
        "while",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "copy",
        "copy-start",
        "copy-done",
        "conditional",
        "call",
        "opt-barrier",
        "optimization-barrier",
        "domain",
        "after-all",
        "AllocateBuffer",  # a TPU custom call (``custom_call_target="AllocateBuffer"``): memory a loop then fills
    }
)

_ALLOCATION = re.compile(r"^allocation (?P<index>\d+): size (?P<size>\d+),(?: color (?P<color>\d+),)? (?P<rest>.*):$")
_VALUE = re.compile(
    r"^ value: <(?P<id>\d+) (?P<name>\S+?)(?P<index>\{[\d,]*\})?(?: \(phi\))? @\d+> \(size=(?P<size>\d+),offset=(?P<offset>\d+)\): (?P<shape>.*)$"
)
_PARAMETER = re.compile(r"\bparameter (\d+)\b")
_SEQUENCE = re.compile(r"^\s+(\d+):(\S+)$", re.M)
_RANGE = re.compile(r"^\s+(\S+\{[\d,]*\}):(\d+)-(\d+)$", re.M)


@dataclasses.dataclass(frozen=True)
class Value:
    """One value as XLA places it: ``name`` as the live-range file writes it (the instruction and its shape index,
    ``while.3{5}``), its allocation, offset and size (padded, as laid out), its shape with layout, and the program
    positions it is live at (``start`` to ``end``, both included; None where the live-range file does not list it)."""

    name: str
    allocation: int
    offset: int
    size: int
    shape: str
    start: int | None = None
    end: int | None = None

    @property
    def instruction(self) -> str:
        """The instruction that defines it (``while.3`` of ``while.3{5}``)."""
        return self.name.partition("{")[0]


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One of XLA's allocations: its index, size and memory color, what it is (``parameter`` with the entry parameter's
    number, ``output``, ``constant``, ``thread-local`` or ``heap``) and the values it holds."""

    index: int
    size: int
    color: int
    role: str
    parameter: int | None
    live_out: bool
    values: tuple[Value, ...]

    @property
    def indefinite(self) -> bool:
        """Held from the first program point to the last (XProf's "indefinite lifetime"): everything but the heap."""
        return self.role != "heap"


@dataclasses.dataclass(frozen=True)
class Buffer:
    """Memory held at the peak: a heap buffer (the values sharing it, the longest run of them that overlap in time),
    or a whole allocation of an indefinite lifetime (``values``: all it holds). ``start``/``end``: the program
    positions its values span (0 to the last for an indefinite one)."""

    allocation: int
    offset: int
    size: int
    values: tuple[Value, ...]
    start: int
    end: int
    indefinite: bool = False


@dataclasses.dataclass(frozen=True)
class Heap:
    """A program's device memory over its schedule (see the module docstring).

    ``sequence``: the instructions in program order (the live-range file's, loop bodies flattened once); ``curve``: the
    bytes held at each position (``len(sequence) + 1`` points: the last is the program's end); ``peak_position`` and
    ``peak_bytes``: its first maximum; ``allocated_bytes``: XLA's total of the device's allocations (its memory-usage
    report's ``Total bytes``); ``buffers``: what is held at the peak, largest first; ``host``: the same for host memory
    at that position, with ``host_allocated_bytes``; ``unranged``: heap values the live-range file does not list (left
    out of the curve; 0 on every program read so far)."""

    sequence: tuple[str, ...]
    curve: tuple[int, ...]
    peak_position: int
    peak_bytes: int
    allocated_bytes: int
    buffers: tuple[Buffer, ...]
    host: tuple[Buffer, ...] = ()
    host_allocated_bytes: int = 0
    unranged: int = 0
    allocations: tuple[Allocation, ...] = ()  # every allocation of every memory space, its values' live ranges set

    @property
    def fragmentation_bytes(self) -> int:
        """XLA's total less what is live at the peak: the gaps the heap's placement left below its high-water mark."""
        return self.allocated_bytes - self.peak_bytes


def read_allocations(buffer_assignment: str) -> list[Allocation]:
    """Every allocation of a buffer-assignment dump with its values (live ranges not yet set).

    >>> text = '''allocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}, maybe-live-out:
    ...  value: <3 p.1 @0> (size=64,offset=0): f32[16]{0}
    ... allocation 1: size 96, preallocated-temp:
    ...  value: <4 fusion.2{0} (phi) @0> (size=32,offset=64): f32[8]{0}'''
    >>> [(a.role, a.parameter, a.live_out, [v.name for v in a.values]) for a in read_allocations(text)]
    [('parameter', 0, True, ['p.1{}']), ('heap', None, False, ['fusion.2{0}'])]
    """
    found: list[tuple[dict, list[Value]]] = []
    for line in buffer_assignment.splitlines():
        head = _ALLOCATION.match(line)
        if head:
            rest = head["rest"]
            parameter = _PARAMETER.search(rest.split("shape |", 1)[0])
            live_out = "maybe-live-out" in rest
            role = (
                "parameter"
                if parameter
                else "output"
                if live_out
                else "constant"
                if "constant" in rest
                else "thread-local"
                if "thread-local" in rest
                else "heap"
            )
            found.append(
                (
                    dict(
                        index=int(head["index"]),
                        size=int(head["size"]),
                        color=int(head["color"] or 0),
                        role=role,
                        parameter=int(parameter[1]) if parameter else None,
                        live_out=live_out,
                    ),
                    [],
                )
            )
            continue
        value = _VALUE.match(line)
        if value and found:
            fields, values = found[-1]
            values.append(
                Value(value["name"] + (value["index"] or "{}"), fields["index"], int(value["offset"]), int(value["size"]), value["shape"])
            )
    return [Allocation(**fields, values=tuple(values)) for fields, values in found]


def read_live_ranges(live_range: str) -> tuple[tuple[str, ...], dict[str, tuple[int, int]]]:
    """The schedule (instruction names by position) and each value's live range from an ``HloLiveRange`` dump.

    >>> sequence, ranges = read_live_ranges('''HloLiveRange (max 2):
    ...   InstructionSequence:
    ...     0:p.1
    ...     1:fusion.2
    ...   BufferLiveRange:
    ...     p.1{}:0-2
    ...     fusion.2{0}:1-2
    ...   Live ranges at 1 (peak):
    ...     fusion.2{0}: 32 bytes (cumulative: 32 bytes)''')
    >>> sequence, ranges
    (('p.1', 'fusion.2'), {'p.1{}': (0, 2), 'fusion.2{0}': (1, 2)})
    """
    head, _, rest = live_range.partition("BufferLiveRange:")
    body = rest.split("Live ranges at", 1)[0]
    positions = sorted((int(p), name) for p, name in _SEQUENCE.findall(head))
    return tuple(name for _, name in positions), {name: (int(a), int(b)) for name, a, b in _RANGE.findall(body)}


def heap(buffer_assignment: str, live_range: str) -> Heap:
    """The device's memory over the program and what holds it at the peak, from the two dumps (module docstring)."""
    sequence, ranges = read_live_ranges(live_range)
    allocations = [_ranged(a, ranges) for a in read_allocations(buffer_assignment)]
    points = len(sequence) + 1
    device = [a for a in allocations if a.color == DEVICE_COLOR]
    base = sum(a.size for a in device if a.indefinite)
    heap_values = [v for a in device if not a.indefinite for v in a.values]
    unranged = sum(v.start is None for v in heap_values)
    occupied = _occupancy([v for v in heap_values if v.start is not None], points)
    curve = tuple(base + held for held in occupied)
    peak = max(range(points), key=curve.__getitem__) if points else 0
    held = [_whole(a, points) for a in device if a.indefinite] + _live_buffers([a for a in device if not a.indefinite], peak)
    host = [a for a in allocations if a.color == HOST_COLOR]
    host_held = [_whole(a, points) for a in host if a.indefinite] + _live_buffers([a for a in host if not a.indefinite], peak)
    return Heap(
        sequence=sequence,
        curve=curve,
        peak_position=peak,
        peak_bytes=curve[peak] if curve else base,
        allocated_bytes=sum(a.size for a in device),
        buffers=tuple(sorted(held, key=lambda b: (-b.size, b.allocation, b.offset))),
        host=tuple(sorted(host_held, key=lambda b: (-b.size, b.allocation, b.offset))),
        host_allocated_bytes=sum(a.size for a in host),
        unranged=unranged,
        allocations=tuple(allocations),
    )


def _ranged(allocation: Allocation, ranges: dict[str, tuple[int, int]]) -> Allocation:
    values = tuple(dataclasses.replace(v, start=r[0], end=r[1]) if (r := ranges.get(v.name)) else v for v in allocation.values)
    return dataclasses.replace(allocation, values=values)


def _occupancy(values: list[Value], points: int) -> list[int]:
    """The heap's bytes held at each program point: each (allocation, offset, size) chunk once while any of its values
    is live (a sweep over the values' starts and ends)."""
    events: dict[int, list[tuple[int, tuple[int, int, int]]]] = {}
    for v in values:
        key = (v.allocation, v.offset, v.size)
        events.setdefault(v.start, []).append((1, key))
        events.setdefault(v.end + 1, []).append((-1, key))
    count: dict[tuple[int, int, int], int] = {}
    held, out = 0, []
    for point in range(points):
        for step, key in events.get(point, ()):
            before = count.get(key, 0)
            count[key] = before + step
            if before == 0 and step > 0:
                held += key[2]
            elif before == 1 and step < 0:
                held -= key[2]
        out.append(held)
    return out


def _whole(allocation: Allocation, points: int) -> Buffer:
    return Buffer(allocation.index, 0, allocation.size, allocation.values, 0, max(points - 1, 0), indefinite=True)


def _live_buffers(allocations: list[Allocation], point: int) -> list[Buffer]:
    """The heap buffers live at ``point``: per (allocation, offset, size), the run of its values that overlap in time
    and include ``point`` (the same memory later reused by another value is another buffer)."""
    chunks: dict[tuple[int, int, int], list[Value]] = {}
    for allocation in allocations:
        for v in allocation.values:
            if v.start is not None:
                chunks.setdefault((v.allocation, v.offset, v.size), []).append(v)
    found = []
    for (index, offset, size), values in chunks.items():
        run = _run_at(sorted(values, key=lambda v: (v.start, v.end)), point)
        if run:
            found.append(Buffer(index, offset, size, tuple(run), min(v.start for v in run), max(v.end for v in run)))
    return found


def _run_at(values: list[Value], point: int) -> list[Value]:
    """The values (sorted by start) whose chain of overlapping live ranges contains ``point``; [] when none does."""
    run: list[Value] = []
    end = -1
    for v in values:
        if run and v.start > end:  # a gap: the memory was free, then held by another buffer
            if run[0].start <= point <= end:
                return run
            run = []
        run.append(v)
        end = max(end, v.end)
    return run if run and run[0].start <= point <= end else []


def downsample(curve: tuple[int, ...], points: int) -> tuple[tuple[int, int], ...]:
    """At most ``points`` (position, bytes) pairs of ``curve``: the highest point of each of that many equal spans, so
    the peak and every span's top survive.

    >>> downsample((1, 5, 2, 2, 9, 3), 3)
    ((1, 5), (2, 2), (4, 9))
    """
    if len(curve) <= points:
        return tuple(enumerate(curve))
    bounds = [round(i * len(curve) / points) for i in range(points + 1)]
    out = []
    for low, high in zip(bounds, bounds[1:]):
        top = max(range(low, high), key=curve.__getitem__)
        out.append((top, curve[top]))
    return tuple(out)


# --- what made each buffer: the program's facts a breakdown reads ------------------------------------------------


_OP_NAME = re.compile(r'metadata=\{[^}]*?op_name="(?P<op_name>[^"]*)"(?:[^}]*?stack_frame_id=(?P<frame>\d+))?')


@dataclasses.dataclass(frozen=True)
class Made:
    """What one instruction is, for the buffers it names: its opcode, JAX's op name (``jit(train_step)/jvp(Model)/
    block_0/mlp/dot_general``), its stack frame's id in the module's tables (None: none), the computation it is in,
    and the pass of the train step it belongs to (``phase``)."""

    op: str
    op_name: str
    frame_id: int | None
    computation: str
    operands: tuple[str, ...] = ()
    stores: tuple[str, int | None] | None = None  # a fusion that writes a slice into a stack: what it writes (op name, frame)

    @property
    def phase(self) -> str:
        """``forward``, ``backward`` (JAX's transposed VJP: ``transpose(jvp(...))`` in the op name) or ``other``
        (outside the differentiated function: the optimizer's update)."""
        return phase_of(self.op_name)

    @property
    def passes_on(self) -> bool:
        """Whether the instruction passes a value on rather than computing it (``PASS_THROUGH``)."""
        return self.op in PASS_THROUGH

    @property
    def collective(self) -> bool:
        """A collective (or one half of an asynchronous one): its buffer holds what moves between devices."""
        return self.op.removesuffix("-start").removesuffix("-done") in COLLECTIVES


def phase_of(op_name: str) -> str:
    """The train step's pass an op name belongs to.

    >>> [phase_of(n) for n in ("jit(s)/jvp(M)/dot_general", "jit(s)/transpose(jvp(M))/dot_general", "jit(s)/mul", "")]
    ['forward', 'backward', 'other', 'other']
    """
    first = op_name.split(";", 1)[0]
    return "backward" if "transpose(" in first else "forward" if "jvp(" in first else "other"


@dataclasses.dataclass(frozen=True)
class ProgramFacts:
    """What the breakdown reads from the optimized program's text: every instruction (``Made``), each loop's trip
    count (None: unknown), the entry parameters' names by number (JAX writes each argument's path as the parameter's
    op name: ``state.params['Dense_0']['kernel']``, ``inputs[0]``), and the entry's outputs in order."""

    made: dict[str, Made]
    trips: dict[str, int | None]
    parameter_names: dict[int, str]
    outputs: tuple[str, ...]
    entry: str = ""


@functools.lru_cache(maxsize=4)
def program_facts(hlo_text: str) -> ProgramFacts:
    """The facts of one program (cached: the breakdown and its tests read one program several times)."""
    computations, entry = parsed(hlo_text)[:2]
    made: dict[str, Made] = {}
    trips: dict[str, int | None] = {}
    names: dict[int, str] = {}
    outputs: tuple[str, ...] = ()
    calls: dict[str, str] = {}  # a fusion -> the computation it runs
    for computation, lines in computations.items():
        for line in lines:
            instruction = parse_instruction(line)
            if instruction is None:
                continue
            if instruction.op == "fusion":
                calls[instruction.name] = next((callee for role, callee in callees(instruction.attributes) if role == "calls"), "")
            metadata = _OP_NAME.search(instruction.attributes)
            op_name = metadata["op_name"] if metadata else ""
            frame = int(metadata["frame"]) if metadata and metadata["frame"] else None
            op = "AllocateBuffer" if 'custom_call_target="AllocateBuffer"' in instruction.attributes else instruction.op
            made[instruction.name] = Made(op, op_name, frame, computation or "", instruction.operands)
            if instruction.op == "while":
                trips[instruction.name] = trip_count(line, lines, computations)
            if computation != entry or computation is None:
                continue
            if instruction.op == "parameter" and instruction.operands and instruction.operands[0].isdigit():
                names[int(instruction.operands[0])] = op_name
            if instruction.root:
                outputs = instruction.operands if instruction.op == "tuple" else (instruction.name,)
    for name, found in made.items():
        if found.op == "fusion" and "dynamic_update" in found.op_name:
            made[name] = dataclasses.replace(found, stores=_stored(name, calls.get(name, ""), computations, made))
    return ProgramFacts(made, trips, names, outputs, entry or "")


def _stored(fusion: str, called: str, computations: dict, made: dict[str, Made]) -> tuple[str, int | None] | None:
    """What a fusion whose root writes a slice into a larger array (``dynamic-update-slice``: a scan stacking a layer's
    activation) writes: the op name and frame of the first instruction on the update's way into it that names one
    (inside the fusion, or the fusion's operand that feeds it), so the stack is described by the op that made its
    contents, not by the scan's update. None where it cannot be told."""
    if called not in computations:
        return None
    inside = {i.name: i for i in map(parse_instruction, computations[called]) if i is not None}
    root = next((i for i in inside.values() if i.root), None)
    if root is None or root.op != "dynamic-update-slice" or len(root.operands) < 2:
        return None
    name = root.operands[1]
    for _ in range(8):
        instruction = inside.get(name)
        if instruction is None:
            return None
        metadata = _OP_NAME.search(instruction.attributes)
        if metadata and "dynamic_update" not in metadata["op_name"]:
            return metadata["op_name"], int(metadata["frame"]) if metadata["frame"] else None
        if instruction.op == "parameter":
            outer = made.get(fusion)
            number = int(instruction.operands[0]) if instruction.operands and instruction.operands[0].isdigit() else -1
            producer = made.get(outer.operands[number].partition("#")[0]) if outer and 0 <= number < len(outer.operands) else None
            return (producer.op_name, producer.frame_id) if producer is not None and producer.op_name else None
        if not instruction.operands:
            return None
        name = instruction.operands[0]
    return None


def value_runs(allocations: list[Allocation]) -> dict[str, tuple[Value, ...]]:
    """Every value's run: the values sharing its memory (allocation, offset and size) whose live ranges overlap its
    own, chained (a loop's carried value and the body values it stands for; an in-place update and what it updates)."""
    chunks: dict[tuple[int, int, int], list[Value]] = {}
    for allocation in allocations:
        for v in allocation.values:
            chunks.setdefault((v.allocation, v.offset, v.size), []).append(v)
    runs: dict[str, tuple[Value, ...]] = {}
    for values in chunks.values():
        ordered = sorted(values, key=lambda v: (v.start if v.start is not None else -1, v.end if v.end is not None else -1))
        run: list[Value] = []
        end = -1
        for v in ordered + [None]:
            if v is None or (run and v.start is not None and v.start > end):
                runs.update({member.name: tuple(run) for member in run})
                run, end = [], -1
            if v is not None:
                run.append(v)
                end = max(end, v.end if v.end is not None else end)
    return runs


def maker(values: tuple[Value, ...], facts: ProgramFacts, runs: dict[str, tuple[Value, ...]] | None = None) -> tuple[Value, Made | None]:
    """The value whose instruction made a buffer's contents, and that instruction: the first (in program order) that
    computes rather than passes a value on (a loop's stacked output is described by the fusion in its body that
    writes it, not by the loop). Where every value passes one on (a copy, a loop's element), the value it passes on is
    followed, through ``runs`` (``value_runs``), up to 8 steps; else the first value.

    >>> facts = ProgramFacts({"w.1": Made("while", "jit(f)/jvp(M)/while", None, "main"),
    ...                       "f.2": Made("fusion", "jit(f)/jvp(M)/while/body/dot_general", 3, "body")}, {}, {}, ())
    >>> value, made = maker((Value("w.1{2}", 1, 0, 8, "f32[2]"), Value("f.2{}", 1, 0, 8, "f32[2]")), facts)
    >>> value.name, made.op
    ('f.2{}', 'fusion')
    """
    for _ in range(8):
        ordered = sorted(values, key=lambda v: (v.start if v.start is not None else -1, v.name))
        for value in ordered:
            made = facts.made.get(value.instruction)
            if made is not None and not made.passes_on:
                return value, made
        moved = _moved(ordered, facts)
        if runs is None or moved is None or moved not in runs:
            break
        values = runs[moved]
    first = sorted(values, key=lambda v: (v.start if v.start is not None else -1, v.name))[0]
    return first, facts.made.get(first.instruction)


def _moved(values: list[Value], facts: ProgramFacts) -> str | None:
    """The value a run of pass-through values moves: a copy's or bitcast's operand (``while.3#34`` is element 34 of
    ``while.3``), as the live-range file names it; None for none."""
    for value in values:
        made = facts.made.get(value.instruction)
        if made is None or made.op in ("parameter", "while", "tuple", "AllocateBuffer") or not made.operands:
            continue
        operand, _, element = made.operands[0].partition("#")
        return f"{operand}{{{element}}}" if element else f"{operand}{{}}"
    return None


def stacked_over(values: tuple[Value, ...], shape_dims: list[int] | None, facts: ProgramFacts) -> int | None:
    """The trip count of the loop a buffer is stacked over (one slice per iteration: a scanned layer stack's saved
    activations or gradients), or None: one of its ``values`` (its own, and those of the run its maker was found in)
    is a loop's whose trip count is known, and its leading dimension is that count."""
    if not shape_dims:
        return None
    for value in values:
        trips = facts.trips.get(value.instruction)
        if trips and trips > 1 and shape_dims[0] == trips:
            return trips
    return None
