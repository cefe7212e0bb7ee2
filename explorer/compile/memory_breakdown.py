"""What fills a device's memory at the peak of the train step, buffer by buffer, and what each buffer is.

The engine is ``explorer.hlo.heap``: XLA's buffer assignment set against its schedule's live ranges, read from the
files every compile dumps (``xla_dump_to``), as XProf's Memory Viewer reads the same assignment. This module gives
each buffer its meaning in the train step and keeps what a result carries small (a compile result is cached as JSON
and sent over a pipe): the ``TOP_BUFFERS`` largest buffers live at the peak with an ``others`` remainder (the totals
still add up), the bytes held over the program down-sampled to ``CURVE_POINTS`` points (the peak kept), and the
buffers grouped by kind, by source line and by layer.

A buffer's kind, and how it is decided (``KIND_RULES``; the two marked as rules are read from the program's
structure, not told by XLA):

- ``parameter``, ``optimizer state``, ``input``: an entry parameter's allocation, by the argument it holds (the train
  state's structure: ``train_step.argument_kinds``). Exact.
- ``output``: an output XLA could not write over its parameter (a new state leaf not donated in place). Exact.
- ``constant``: XLA's constants and thread-local scratch. Exact.
- ``collective buffer``: made by a collective (all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute,
  either half of an asynchronous one). Exact (the opcode).
- ``saved activation``: made in the forward pass (``jvp(...)`` in JAX's op name) and read last by an instruction of the
  backward pass (``transpose(jvp(...))``): what the backward pass reads back. A rule.
- ``gradient``: made in the backward pass with a parameter's shape (whole, or as one device holds it; a scanned stack's
  gradient has the stacked parameter's). A rule (with gradient accumulation, the accumulated sums are made by the
  accumulation's add, outside both passes, and count as temporaries).
- ``temporary``: every other buffer of XLA's heap (the optimizer's update, a pass's own intermediates, recomputed
  activations under remat).
- ``host-offloaded``: in host memory (XLA's memory space 5), listed apart: not in the device's peak.

A buffer's line is the innermost frame of its instruction's stack in the user's code (``sources.user_frame``); its
layer is the Flax module path's first component that names one (``block_3``), and a scanned stack's buffer (its
leading dimension the trip count of the loop it is carried through) counts once per layer, its bytes shared equally.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any

from explorer.hlo import heap as heaps
from explorer.hlo.dumps import read_dump
from explorer.hlo.program import DTYPE_BYTES, array_dims
from explorer.hlo.sources import module_path, stack_frames, user_frame

TOP_BUFFERS = 40  # buffers live at the peak kept in a result, the largest; the rest are one "others" remainder
TOP_LINES = 15  # source lines kept, the most bytes first
CURVE_POINTS = 400  # points of the bytes held over the program kept (the highest of each span: the peak survives)
KINDS = (
    "parameter",
    "optimizer state",
    "gradient",
    "input",
    "saved activation",
    "temporary",
    "collective buffer",
    "output",
    "constant",
    "argument",
)
HOST_KIND = "host-offloaded"
KIND_RULES = {
    "parameter": "an entry parameter holding one of the model's parameters (the train state's structure)",
    "optimizer state": "an entry parameter holding the optimizer's state or step counter (the train state's structure)",
    "gradient": "rule: made in the backward pass with a parameter's shape (whole or one device's shard)",
    "input": "an entry parameter holding a batch input",
    "saved activation": "rule: made in the forward pass and read last by the backward pass (saved for it)",
    "temporary": "any other buffer of XLA's heap (the update, a pass's intermediates, recomputed activations)",
    "collective buffer": "made by a collective (all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute)",
    "output": "an output XLA could not write over its parameter (a state leaf not updated in place)",
    "constant": "XLA's constants and thread-local scratch",
    "argument": "an entry parameter the train step's structure does not name (another program's argument)",
    HOST_KIND: "in host memory (XLA's memory space 5), not in the device's peak",
}
_LAYER = re.compile(r"^(?P<name>.*?)_(?P<index>\d+)$")
_PLUMBING = ("eval_jaxpr", "rematted_computation")  # module-path parts JAX's transforms add, not the model's


@dataclasses.dataclass(frozen=True)
class PeakBuffer:
    """One buffer live at the peak, per device.

    ``bytes`` as XLA lays it out (padded to its tiles), ``unpadded_bytes`` its elements times their size (None for a
    tuple's table); ``shape`` without layout; ``kind`` (``KINDS``); ``name`` the argument's path for an entry
    parameter (``state.params['lm_head']['kernel']``), else XLA's instruction that made it; ``op_name`` JAX's name
    for that instruction; ``file``/``line``/``function`` the user's line (None: none, e.g. the optimizer's);
    ``module`` the Flax module path; ``layers`` the layers a scanned stack holds (1 otherwise); ``live`` the program
    positions its values span."""

    bytes: int
    unpadded_bytes: int | None
    shape: str
    kind: str
    name: str
    op_name: str = ""
    file: str | None = None
    line: int | None = None
    function: str | None = None
    module: str = ""
    layers: int = 1
    live: tuple[int, int] = (0, 0)

    @property
    def where(self) -> str:
        """``model.py:42 (Block.__call__)``, or "" without a line."""
        return f"{os.path.basename(self.file)}:{self.line} ({self.function})" if self.file else ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"live": list(self.live)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeakBuffer:
        return cls(**(data | {"live": tuple(data["live"])}))


@dataclasses.dataclass(frozen=True)
class Group:
    """Bytes at the peak under one heading (a kind, a source line, a layer), with how many buffers and by kind."""

    name: str
    bytes: int
    count: int
    kinds: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "count": self.count, "kinds": [list(k) for k in self.kinds]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Group:
        return cls(data["name"], data["bytes"], data["count"], tuple((k, b) for k, b in data.get("kinds", ())))


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """What fills one device's memory at the peak of the step (module docstring), per device.

    ``peak_bytes`` is the most bytes live at one program point (``peak_position`` of ``positions``, the instruction
    ``peak_instruction``); ``allocated_bytes`` XLA's own total (its memory-usage report's, the TPU verdict's figure):
    the live bytes plus ``fragmentation_bytes``. ``buffers`` are the largest live at the peak, ``others_bytes`` and
    ``others_count`` the rest: ``sum(buffers) + others_bytes == peak_bytes``. ``curve`` is (position, bytes held)
    down-sampled; ``backward`` the positions the backward pass spans (None: no backward pass). ``by_kind``, ``by_line``
    (None's name: no line of the model's code) and ``by_layer`` group every buffer live at the peak. ``host_bytes``
    is host memory (offloaded arrays), ``host_buffers`` the largest there at the peak."""

    positions: int
    peak_position: int
    peak_instruction: str
    peak_bytes: int
    allocated_bytes: int
    buffers: tuple[PeakBuffer, ...]
    others_bytes: int
    others_count: int
    curve: tuple[tuple[int, int], ...]
    backward: tuple[int, int] | None
    by_kind: tuple[Group, ...]
    by_line: tuple[Group, ...]
    by_layer: tuple[Group, ...]
    host_bytes: int = 0
    host_buffers: tuple[PeakBuffer, ...] = ()

    @property
    def fragmentation_bytes(self) -> int:
        """XLA's total less the bytes live at the peak: the gaps its heap's placement left."""
        return self.allocated_bytes - self.peak_bytes

    def kind_bytes(self, kind: str) -> int:
        """The bytes of one kind at the peak (0 for a kind with none)."""
        return next((g.bytes for g in self.by_kind if g.name == kind), 0)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON form (docs/cli.md, ``memory_breakdown``)."""
        return {
            "positions": self.positions,
            "peak_position": self.peak_position,
            "peak_instruction": self.peak_instruction,
            "peak_bytes": self.peak_bytes,
            "allocated_bytes": self.allocated_bytes,
            "fragmentation_bytes": self.fragmentation_bytes,
            "peak_buffers": [b.to_json() for b in self.buffers],
            "others_bytes": self.others_bytes,
            "others_count": self.others_count,
            "by_kind": [g.to_json() for g in self.by_kind],
            "by_line": [g.to_json() for g in self.by_line],
            "by_layer": [g.to_json() for g in self.by_layer],
            "curve": [list(p) for p in self.curve],
            "backward": None if self.backward is None else list(self.backward),
            "host_bytes": self.host_bytes,
            "host_buffers": [b.to_json() for b in self.host_buffers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> MemoryBreakdown | None:
        if data is None:
            return None
        return cls(
            positions=data["positions"],
            peak_position=data["peak_position"],
            peak_instruction=data["peak_instruction"],
            peak_bytes=data["peak_bytes"],
            allocated_bytes=data["allocated_bytes"],
            buffers=tuple(map(PeakBuffer.from_json, data["peak_buffers"])),
            others_bytes=data["others_bytes"],
            others_count=data["others_count"],
            curve=tuple((p, b) for p, b in data["curve"]),
            backward=None if data["backward"] is None else tuple(data["backward"]),
            by_kind=tuple(map(Group.from_json, data["by_kind"])),
            by_line=tuple(map(Group.from_json, data["by_line"])),
            by_layer=tuple(map(Group.from_json, data["by_layer"])),
            host_bytes=data.get("host_bytes", 0),
            host_buffers=tuple(map(PeakBuffer.from_json, data.get("host_buffers", ()))),
        )


def from_dump(folder: str, arguments: tuple[tuple[str, str, tuple[int, ...]], ...] = (), program: str = "") -> MemoryBreakdown | None:
    """The breakdown of the program XLA dumped into ``folder`` (``xla_dump_to``), its entry parameters named by
    ``arguments`` (``train_step.argument_kinds``); None where the dump lacks the files (an XLA that writes no live
    ranges)."""
    try:
        assignment = read_dump(folder, "after_optimizations-buffer-assignment.txt", program)
        ranges = read_dump(folder, "after_optimizations-live-range.txt", program)
        text = read_dump(folder, "after_optimizations.txt", program)
    except OSError:
        return None
    return breakdown(assignment, ranges, text, arguments)


def breakdown(
    buffer_assignment: str, live_range: str, hlo_text: str, arguments: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
) -> MemoryBreakdown:
    """The breakdown from the three dumped texts (``from_dump``)."""
    held = heaps.heap(buffer_assignment, live_range)
    facts = heaps.program_facts(hlo_text)
    runs = heaps.value_runs(list(held.allocations))
    backward = _span(held.sequence, facts, "backward")
    readers = tuple(facts.made.get(name) for name in held.sequence)  # the instruction at each program position
    names = _argument_names(facts, arguments)
    frames = stack_frames(hlo_text)
    shapes = _parameter_shapes(held, facts, names, arguments)
    described = [_described(b, facts, runs, names, frames, readers, shapes) for b in held.buffers]
    host = [dataclasses.replace(_described(b, facts, runs, names, frames, readers, shapes), kind=HOST_KIND) for b in held.host]
    ordered = sorted(described, key=lambda b: (-b.bytes, b.kind, b.name))
    kept = tuple(ordered[:TOP_BUFFERS])
    return MemoryBreakdown(
        positions=len(held.curve),
        peak_position=held.peak_position,
        peak_instruction=held.sequence[held.peak_position] if held.peak_position < len(held.sequence) else "(the program's end)",
        peak_bytes=held.peak_bytes,
        allocated_bytes=held.allocated_bytes,
        buffers=kept,
        others_bytes=sum(b.bytes for b in ordered[TOP_BUFFERS:]),
        others_count=max(len(ordered) - TOP_BUFFERS, 0),
        curve=heaps.downsample(held.curve, CURVE_POINTS),
        backward=backward,
        by_kind=_by_kind(ordered),
        by_line=_by_line(ordered),
        by_layer=_by_layer(ordered),
        host_bytes=held.host_allocated_bytes,
        host_buffers=tuple(sorted(host, key=lambda b: -b.bytes)[:TOP_BUFFERS]),
    )


def _span(sequence: tuple[str, ...], facts: heaps.ProgramFacts, phase: str) -> tuple[int, int] | None:
    """Where one pass runs in the program (None: it has no instruction): the 2nd to the 98th percentile of its
    computing instructions' positions (XLA schedules a few of a pass's instructions far from the rest, such as the
    embedding gradient's setup at the program's start; a copy or a loop passes values on and a hoisted constant keeps
    its op name: neither counts)."""
    found = [
        i
        for i, name in enumerate(sequence)
        if (made := facts.made.get(name)) is not None and made.phase == phase and not made.passes_on and made.op != "constant"
    ]
    if not found:
        return None
    return found[len(found) * 2 // 100], found[(len(found) * 98) // 100 if len(found) > 1 else 0]


def _argument_names(facts: heaps.ProgramFacts, arguments: tuple[tuple[str, str, tuple[int, ...]], ...]) -> dict[int, tuple[str, str]]:
    """Entry parameter number -> (path, kind): by the train step's arguments where their count is the program's
    parameters' (JAX kept every argument), else by the paths JAX wrote as the parameters' op names."""
    count = len(facts.parameter_names)
    if arguments and len(arguments) == count:
        return {n: (path, kind) for n, (path, kind, _) in enumerate(arguments)}
    return {n: (name, _kind_of_path(name)) for n, name in facts.parameter_names.items()}


def _parameter_shapes(held: heaps.Heap, facts: heaps.ProgramFacts, names: dict, arguments) -> frozenset[tuple[int, ...]]:
    """The shapes a gradient can have: each model parameter's, whole (``arguments``) and as one device holds it (its
    entry parameter in the program)."""
    shapes = {tuple(dims) for _, kind, dims in arguments if kind == "parameter"}
    for allocation in held.allocations:
        for value in allocation.values:
            number = _parameter_number(value, facts)
            if number is not None and names.get(number, ("", ""))[1] == "parameter":
                shapes.add(tuple(array_dims(_plain(value.shape)) or ()))
    return frozenset(shapes)


def _kind_of_path(path: str) -> str:
    """An argument's kind from the path JAX gave it, where the train step's own arguments could not be matched (a
    program other than the train step, or one whose parameters XLA renamed): "argument" where it does not say."""
    if path.startswith("inputs"):
        return "input"
    if path.startswith(("state.params", "state[0]")):
        return "parameter"
    if path.startswith(("state.opt_state", "state.step", "state[1]")):
        return "optimizer state"
    return "argument"


def _described(
    buffer: heaps.Buffer,
    facts: heaps.ProgramFacts,
    runs: dict,
    names: dict[int, tuple[str, str]],
    frames: dict,
    readers: tuple[heaps.Made | None, ...],
    gradient_shapes: frozenset[tuple[int, ...]] = frozenset(),
) -> PeakBuffer:
    """One buffer as a ``PeakBuffer``: its kind (module docstring), the instruction that made it and its line."""
    value, made = heaps.maker(buffer.values, facts, runs)
    role = _role(buffer, facts)
    if role == "parameter":
        number = next(n for v in buffer.values if (n := _parameter_number(v, facts)) is not None)
        path, kind = names.get(number, (f"parameter {number}", "argument"))
        shape = _plain(next(v.shape for v in buffer.values if _parameter_number(v, facts) == number))
        return PeakBuffer(buffer.size, _unpadded(shape), shape, kind, path, live=(buffer.start, buffer.end))
    origin = _combined_origin(value, made, facts)  # a combined collective's element: the op whose value it moves
    op_name, frame_id = origin.stores or (origin.op_name, origin.frame_id) if origin else ("", None)  # a stack: what it holds
    frame = user_frame(frames.get(frame_id, ())) if frame_id is not None else None
    shape = _plain(value.shape)
    stacked = heaps.stacked_over(buffer.values + runs.get(value.name, ()), array_dims(shape), facts)
    kind = (
        "output"
        if role == "output"
        else "constant"
        if role in ("constant", "thread-local")
        else _heap_kind(buffer, made, readers, tuple(array_dims(shape) or ()) in gradient_shapes)
    )
    return PeakBuffer(
        buffer.size,
        _unpadded(shape),
        shape,
        kind,
        value.name.removesuffix("{}"),
        op_name,
        frame.file if frame else None,
        frame.line if frame else None,
        frame.function if frame else None,
        _module(op_name),
        stacked or 1,
        (buffer.start, buffer.end),
    )


def _combined_origin(value: heaps.Value, made: heaps.Made | None, facts: heaps.ProgramFacts) -> heaps.Made | None:
    """What describes a buffer: its maker, except for element ``k`` of a collective XLA combined from several (one
    instruction, a tuple of results, the first op's metadata): the instruction making its operand ``k``."""
    index = value.name.partition("{")[2].rstrip("}")
    if made is None or not made.collective or not index.isdigit() or int(index) >= len(made.operands):
        return made
    operand = made.operands[int(index)].partition("#")[0]
    found = facts.made.get(operand)
    return found if found is not None and found.op_name else made


def _role(buffer: heaps.Buffer, facts: heaps.ProgramFacts) -> str:
    if not buffer.indefinite:
        return "heap"
    if any(_parameter_number(v, facts) is not None for v in buffer.values):
        return "parameter"
    made = [facts.made.get(v.instruction) for v in buffer.values]
    if any(m is not None and m.op == "constant" for m in made):
        return "constant"
    return "output" if buffer.values else "thread-local"


def _parameter_number(value: heaps.Value, facts: heaps.ProgramFacts) -> int | None:
    """The entry parameter number a value is (an entry computation's ``parameter(N)``), else None."""
    made = facts.made.get(value.instruction)
    if made is None or made.op != "parameter" or not made.operands or not made.operands[0].isdigit():
        return None
    number = int(made.operands[0])
    return number if made.computation == facts.entry else None


def _heap_kind(
    buffer: heaps.Buffer, made: heaps.Made | None, readers: tuple[heaps.Made | None, ...], parameter_shaped: bool = False
) -> str:
    """A heap buffer's kind (module docstring): by its maker, and by the pass of the instruction that reads it last (the
    one at the end of its values' run: a forward value read back by the backward pass is saved for it); a backward value
    with a parameter's shape is its gradient."""
    if made is None:
        return "temporary"
    if made.collective:
        return "collective buffer"
    last = readers[buffer.end] if buffer.end < len(readers) else None
    if made.phase == "forward" and last is not None and last.phase == "backward":
        return "saved activation"
    if made.phase == "backward" and parameter_shaped:
        return "gradient"
    return "temporary"


def _plain(shape: str) -> str:
    """``bf16[8,16]`` from ``bf16[8,16]{1,0:T(8,128)(2,1)}`` (a tuple's shape kept whole, its layouts dropped)."""
    return re.sub(r"\{[^{}]*\}", "", re.sub(r"\{[^{}]*\{[^{}]*\}[^{}]*\}", "", shape)).strip()


def _unpadded(shape: str) -> int | None:
    """Elements times their size (None for a tuple, whose buffer is a table of pointers)."""
    found = re.fullmatch(r"(?P<dtype>[a-z]+\d*[a-z0-9]*)\[(?P<dims>[\d,]*)\]", shape)
    if not found or found["dtype"] not in DTYPE_BYTES:
        return None
    return math.prod(int(d) for d in found["dims"].split(",") if d) * DTYPE_BYTES[found["dtype"]]


def _module(op_name: str) -> str:
    return "/".join(p for p in module_path(op_name).split("/") if p and p not in _PLUMBING)


def _grouped(buffers, key) -> list[Group]:
    found: dict[Any, list] = {}
    for buffer in buffers:
        for name, share in key(buffer):
            entry = found.setdefault(name, [0, 0, {}])
            entry[0] += share
            entry[1] += 1
            entry[2][buffer.kind] = entry[2].get(buffer.kind, 0) + share
    return [
        Group(name, total, count, tuple(sorted(kinds.items(), key=lambda k: -k[1])))
        for name, (total, count, kinds) in sorted(found.items(), key=lambda item: -item[1][0])
    ]


def _by_kind(buffers: list[PeakBuffer]) -> tuple[Group, ...]:
    groups = {g.name: g for g in _grouped(buffers, lambda b: [(b.kind, b.bytes)])}
    return tuple(groups[k] for k in KINDS if k in groups)


def _by_line(buffers: list[PeakBuffer]) -> tuple[Group, ...]:
    groups = _grouped(buffers, lambda b: [(f"{b.file}:{b.line} ({b.function})" if b.file else "", b.bytes)])
    lined = [g for g in groups if g.name][:TOP_LINES]
    rest = [g for g in groups if g not in lined]
    if rest:
        lined.append(Group("", sum(g.bytes for g in rest), sum(g.count for g in rest)))
    return tuple(lined)


def _by_layer(buffers: list[PeakBuffer]) -> tuple[Group, ...]:
    """Bytes per layer. A layer is a module whose name is numbered among siblings of the same stem at the same depth
    (``block_0`` to ``block_3``; a lone ``Dense_0`` or ``wi_0`` is a part of something, not a layer); a buffer made in
    one is that layer's. A scanned stack's buffer (``layers`` above 1) is shared equally by its layers, ``layer 0`` to
    ``layer N-1`` (the op that fills it often names no module: XLA fuses it into the scan's own update)."""
    numbered: dict[tuple[int, str], set[int]] = {}
    for buffer in buffers:
        for depth, part in enumerate(buffer.module.split("/") if buffer.module else ()):
            if found := _LAYER.match(part):
                numbered.setdefault((depth, found["name"]), set()).add(int(found["index"]))
    stems = {key for key, indexes in numbered.items() if len(indexes) > 1}

    def layers(buffer: PeakBuffer):
        parts = buffer.module.split("/") if buffer.module else []
        if buffer.layers > 1:
            share = buffer.bytes // buffer.layers
            return [(f"layer {i}", share) for i in range(buffer.layers)]
        for depth, part in enumerate(parts):
            if (found := _LAYER.match(part)) and (depth, found["name"]) in stems:
                return [("/".join(parts[: depth + 1]), buffer.bytes)]
        return []

    groups = _grouped(buffers, layers)
    return tuple(sorted(groups, key=lambda g: _layer_order(g.name)))


def _layer_order(name: str) -> tuple:
    found = re.match(r"^(?P<stem>.*?)(?:_(?P<a>\d+)| (?P<b>\d+))$", name)
    return (found["stem"], int(found["a"] or found["b"])) if found else (name, 0)
