"""Which line of the user's code each collective of a compiled program comes from.

XLA keeps the answer in the program's text (``compiled.as_text()``): every instruction carries
``metadata={op_name="jit(train_step)/transpose(jvp(Model))/Block_0/attn/dot_general" stack_frame_id=N}``,
and the module holds four tables (checked with jax 0.12.0.1, CPU and TPU compiles)::

    FileNames        1 "/home/me/model.py"
    FunctionNames    1 "Block.__call__"
    FileLocations    1 {file_name_id=1 function_name_id=1 line=42 end_line=42 column=8 end_column=8}
    StackFrames      1 {file_location_id=1 parent_frame_id=1}

Frames are numbered from 1; a frame's caller is frame ``parent_frame_id - 1`` (0: none), so frame N
is the innermost call of its chain. A collective's *source* is the innermost frame of that chain
outside JAX, Flax, optax, the standard library and the explorer (the explorer's built-in models,
``explorer/models/``, count as the user's code), with ``file`` as the metadata gives it; its
``module`` is the Flax path in ``op_name`` (``Block_0/attn``: the path after the transformed top
module, without transforms, inner ``jit``s or the primitive). XLA combines collectives (several
all-reduces into one of a tuple): such an instruction keeps one op's metadata, so it says
``combined`` and names the ops its operands come from (and an ``op_name`` of several ops, joined by
``;``, names them all). Counts and bytes are per device per step, an op in a loop body counted once
per iteration (``hlo.collective_ops``).

    >>> module_path("jit(train_step)/transpose(jvp(TransformerLM))/decoder/Embed_0/jit(_take)/gather")
    'decoder/Embed_0'
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import itertools
import os
import re
import sysconfig
from typing import Any, Iterable

from explorer.hlo import program as hlo
from explorer.hlo.instructions import Instruction, instructions, parse_instruction, program_lines

LIBRARIES = ("jax", "jaxlib", "flax", "optax")  # frames in these packages are never a collective's source
_EXPLORER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # explorer/, above hlo/
_USER_IN_EXPLORER = os.path.join(_EXPLORER, "models")  # the built-in models are the user's model code
_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_FIELDS = re.compile(r"(\w+)=(\d+)")
_METADATA = re.compile(r'metadata=\{[^}]*?op_name="(?P<op_name>[^"]*)"(?:[^}]*?stack_frame_id=(?P<frame>\d+))?')
_PASS_THROUGH = ("get-tuple-element", "copy", "copy-start", "copy-done", "bitcast", "convert", "reshape", "transpose")
# A collective XLA left without metadata moves its operand's value (on several slices, the in-slice part of a
# hierarchical all-reduce feeds the cross-slice send): the line is the operand's producer's.
_MOVES_ITS_OPERAND = tuple(f"{op}{suffix}" for op in hlo.COLLECTIVES for suffix in ("", "-start", "-done"))


@dataclasses.dataclass(frozen=True)
class Frame:
    """One frame of a stack: the file as the metadata names it, the line and the function (``Class.method``)."""

    file: str
    line: int
    function: str


@functools.lru_cache(maxsize=2)
def stack_frames(hlo_text: str) -> dict[int, tuple[Frame, ...]]:
    """Every stack frame id of the module -> its chain, innermost first (empty when the module has no tables).

    >>> text = '''FileNames
    ... 1 "/a/train.py"
    ... 2 "/a/model.py"
    ...
    ... FunctionNames
    ... 1 "step"
    ... 2 "Model.__call__"
    ...
    ... FileLocations
    ... 1 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=1 end_column=1}
    ... 2 {file_name_id=2 function_name_id=2 line=42 end_line=42 column=3 end_column=3}
    ...
    ... StackFrames
    ... 1 {file_location_id=1 parent_frame_id=1}
    ... 2 {file_location_id=2 parent_frame_id=2}
    ... '''
    >>> [(f.file, f.line) for f in stack_frames(text)[2]]
    [('/a/model.py', 42), ('/a/train.py', 9)]
    """
    files = {k: _unquote(v) for k, v in _table(hlo_text, "FileNames").items()}
    functions = {k: _unquote(v) for k, v in _table(hlo_text, "FunctionNames").items()}
    locations = {k: dict(_FIELDS.findall(v)) for k, v in _table(hlo_text, "FileLocations").items()}
    raw = {k: dict(_FIELDS.findall(v)) for k, v in _table(hlo_text, "StackFrames").items()}

    def frame(number: int) -> Frame:
        where = locations[int(raw[number]["file_location_id"])]
        return Frame(files[int(where["file_name_id"])], int(where["line"]), functions[int(where["function_name_id"])])

    chains: dict[int, tuple[Frame, ...]] = {}
    for number in sorted(raw):  # a caller is numbered before its callees
        parent = int(raw[number]["parent_frame_id"]) - 1
        chains[number] = (frame(number),) + (chains.get(parent, ()) if 0 < parent < number else ())
    return chains


def _table(hlo_text: str, name: str) -> dict[int, str]:
    """The rows of one of the module's tables (``FileNames``...): number -> the rest of the line."""
    header = re.search(r"^" + name + r"\n", hlo_text, re.M)
    if header is None:
        return {}
    rows = {}
    for line in hlo_text[header.end() :].splitlines():
        row = _TABLE_ROW.match(line)
        if not row:
            break
        rows[int(row[1])] = row[2]
    return rows


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


@functools.cache
def _library_folders() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Where JAX, Flax and optax are installed here (an editable install outside site-packages too), and the stdlib."""
    packages = []
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        packages.extend(os.path.join(os.path.abspath(f), "") for f in ((spec and spec.submodule_search_locations) or []))
    stdlib = [os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "") for key in ("stdlib", "platstdlib")]
    return tuple(dict.fromkeys(packages)), tuple(dict.fromkeys(stdlib))


@functools.lru_cache(maxsize=4096)  # the reading asks for every frame of every traced equation
def is_library(file: str) -> bool:
    """Whether a frame in ``file`` is JAX's, Flax's, optax's, the standard library's or the explorer's (not a model's).

    Other installed packages count as the user's: a model library is model code.

    >>> is_library("/usr/lib/python3.13/site-packages/flax/linen/linear.py"), is_library("/home/me/model.py")
    (True, False)
    """
    path = file.replace("\\", "/")
    if path.startswith("<"):  # <frozen runpy>, <string>
        return True
    parts = path.split("/")
    if any(p in ("site-packages", "dist-packages") and parts[i + 1] in LIBRARIES for i, p in enumerate(parts[:-1])):
        return True
    absolute = os.path.abspath(path)
    if absolute.startswith(os.path.join(_EXPLORER, "")):
        return explorer_own(absolute)
    packages, stdlib = _library_folders()
    if any(absolute.startswith(folder) for folder in packages):
        return True
    installed = "/site-packages/" in path or "/dist-packages/" in path
    return not installed and any(absolute.startswith(folder) for folder in stdlib)


def user_frame(chain: Iterable[Frame]) -> Frame | None:
    """The innermost frame of ``chain`` (innermost first) in the user's code, or None.

    The walk stops at the explorer's own code (its train step, the code that hands the step to JAX): every frame past
    it is whoever called the explorer (a page, a test, a script), never the model. A value the optimizer computes
    has no line of the model's code. A function installed over JAX's own (``jax_shims``) is JAX's call, not the model's.
    """
    shims = jax_shims()
    for frame in chain:
        if explorer_own(frame.file):
            return None
        if not is_library(frame.file) and (os.path.abspath(frame.file), frame.function) not in shims:
            return frame
    return None


# JAX functions a model library may replace with a wrapper of its own at import.
SHIMMED = (("lax", "with_sharding_constraint"), ("lax", "top_k"), ("sharding", "reshard"))


def jax_shims() -> frozenset[tuple[str, str]]:
    """(file, qualified name) of each function another library has installed in place of one of JAX's (``SHIMMED``):
    MaxText's tunix adapter puts ``_compat_wsc`` over ``jax.lax.with_sharding_constraint`` on import. A frame in one is
    JAX's call as the model's code made it: the model's line and name are the frame that called it (read each time:
    a library may install one after the explorer started)."""
    import jax

    found = set()
    for module, name in SHIMMED:
        function = getattr(getattr(jax, module, None), name, None)
        code = getattr(function, "__code__", None)
        if code is not None and not (getattr(function, "__module__", None) or "").startswith(("jax", "jaxlib")):
            found.add((os.path.abspath(code.co_filename), code.co_qualname))
    return frozenset(found)


def explorer_own(file: str) -> bool:
    """The explorer's code, not a model of it (``explorer/models/`` is model code)."""
    absolute = os.path.abspath(file.replace("\\", "/"))
    return absolute.startswith(os.path.join(_EXPLORER, "")) and not absolute.startswith(os.path.join(_USER_IN_EXPLORER, ""))


def module_path(op_name: str) -> str:
    """The Flax module path in an ``op_name``: after the jitted function and the transformed top module, without
    transforms, inner ``jit``s or the primitive (``''``: the top module's own code, or outside any module)."""
    parts = op_names(op_name)[0].split("/") if op_name else [""]
    inner = parts[1:-1] if len(parts) > 1 and parts[0].startswith("jit(") else parts[:-1]
    return "/".join(p for p in inner if "(" not in p and p not in ("while", "body", "cond", "checkpoint", "remat"))


@dataclasses.dataclass(frozen=True)
class Value:
    """One array a collective moves (an operand's part of it, per device): the op that produced it and its shape."""

    op_name: str
    shape: str

    def to_json(self) -> dict[str, Any]:
        return {"op_name": self.op_name, "shape": self.shape}


@dataclasses.dataclass(frozen=True)
class Source:
    """One source line's share of a collective, per device per step (loop trip counts included).

    ``file`` (as the compiled program's metadata gives it), ``line`` and ``function`` are None where
    no frame of the stack is the user's (XLA's own collectives, or a program without stack frames).
    ``ops`` are the op names of the instructions (several for a ``combined`` one: XLA merged collectives
    of several ops into one instruction); ``values`` what they move.
    """

    file: str | None
    line: int | None
    function: str | None
    module: str
    count: int
    bytes: int
    combined: bool = False
    ops: tuple[str, ...] = ()
    values: tuple[Value, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "module": self.module,
            "count": self.count,
            "bytes": self.bytes,
            "combined": self.combined,
            "ops": list(self.ops),
            "values": [v.to_json() for v in self.values],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Source:
        return cls(
            data["file"],
            data["line"],
            data["function"],
            data["module"],
            data["count"],
            data["bytes"],
            data.get("combined", False),
            tuple(data.get("ops", ())),
            tuple(Value(**v) for v in data.get("values", ())),
        )

    @property
    def where(self) -> str:
        """``model.py:42 (Block.__call__)``, or what stands for no line."""
        if self.file is None:
            return "(no line of the model's code: XLA's own, or outside the model)"
        return f"{os.path.basename(self.file)}:{self.line} ({self.function})"


@dataclasses.dataclass(frozen=True)
class InstructionSource:
    """Where one collective instruction comes from: its user frame, Flax module, op names and the values it moves."""

    frame: Frame | None
    module: str
    ops: tuple[str, ...]
    combined: bool
    values: tuple[Value, ...]


def instruction_source(hlo_text: str, name: str) -> InstructionSource:
    """The source of the instruction called ``name`` (``all-reduce.3``) in the module's text."""
    lines = _instruction_lines(hlo_text)
    line = lines.get(name, "")
    op_name, frame_id = _metadata(line)
    instruction = parse_instruction(line)
    if frame_id is None and instruction and instruction.operands:
        # An async pair's metadata may sit on its start; on several TPU slices XLA drops a collective's own metadata:
        # it then comes from the value it moves (the operand's producer), which is the line that asked for it.
        op_name, frame_id = _producer_metadata(lines, instruction.operands[0])
    if frame_id is None and instruction and instruction.op == "send":
        # A MegaScale send of a parameter (an FSDP gather across slices) has no producer with a line: the line is
        # where the value its paired recv received is used, as XLA names a gather by the op that needed it.
        op_name, frame_id = _receiver_metadata(hlo_text, lines, line)
    chain = stack_frames(hlo_text).get(frame_id, ()) if frame_id is not None else ()
    own = op_names(op_name)
    values = _values(lines, instruction, op_name) if instruction else ()
    ops = tuple(dict.fromkeys(own + tuple(v.op_name for v in values if v.op_name)))
    modules = [module_path(o).split("/") for o in own] or [[""]]
    common = [names[0] for names in itertools.takewhile(lambda names: len(set(names)) == 1, zip(*modules))]
    return InstructionSource(user_frame(chain), "/".join(common), ops, len(ops) > 1 or len(values) > 1, values)


@functools.lru_cache(maxsize=2)
def _instruction_lines(hlo_text: str) -> dict[str, str]:
    """Every instruction's line by its name, for the whole module (kept for the program's collectives read one by one)."""
    return instructions(program_lines(hlo_text))


def _metadata(line: str) -> tuple[str, int | None]:
    found = _METADATA.search(line)
    if not found:
        return "", None
    return found["op_name"], int(found["frame"]) if found["frame"] else None


def op_names(op_name: str) -> tuple[str, ...]:
    """The ops an ``op_name`` names: several when XLA merged instructions, joined by ``;`` or written as a common
    prefix and ``(a:b:c)``.

    >>> op_names("jit(f)/transpose(jvp(M))/(A_0/dot_general:B_1/jit(_take)/gather)")
    ('jit(f)/transpose(jvp(M))/A_0/dot_general', 'jit(f)/transpose(jvp(M))/B_1/jit(_take)/gather')
    """
    names: list[str] = []
    for part in (p for p in op_name.split(";") if p):
        group = _trailing_group(part)
        if group is None:
            names.append(part)
            continue
        prefix, inside = part[:group], part[group + 1 : -1]
        names.extend(prefix + alternative for alternative in _split_top_level(inside, ":"))
    return tuple(dict.fromkeys(names))


def _trailing_group(part: str) -> int | None:
    """Where a trailing ``/(a:b)`` group opens (the index of its ``(``), or None."""
    if not part.endswith(")"):
        return None
    depth = 0
    for index in range(len(part) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(part[index], 0)
        if depth == 0:
            inside = part[index + 1 : -1]
            opened_a_path = index == 0 or part[index - 1] == "/"
            return index if opened_a_path and _split_top_level(inside, ":") != [inside] else None
    return None


def _split_top_level(text: str, separator: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    return parts + [text[start:]]


def _values(lines: dict[str, str], instruction: Instruction, op_name: str) -> tuple[Value, ...]:
    """What the instruction moves: each operand's producing op (followed through copies and tuple reads) and shape.

    A ``-done`` moves what its ``-start`` moves; the values are then the start's operands.
    """
    operands = instruction.operands
    if instruction.op.endswith("-done") and operands:
        start = parse_instruction(lines.get(operands[0], ""))
        operands = start.operands if start else ()
    values = []
    for operand in operands:
        producer = parse_instruction(lines.get(operand, ""))
        shape = producer.shape if producer else "?"
        produced_by = _producer_op_name(lines, operand)
        values.append(Value(produced_by or op_name, _plain_shape(shape)))
    return tuple(values)


_RENDEZVOUS = re.compile(r'_xla_host_transfer_rendezvous="([^"]+)"')


def _receiver_metadata(hlo_text: str, lines: dict[str, str], send_line: str) -> tuple[str, int | None]:
    """The metadata of the first instruction using what the recv paired with a MegaScale send (the same rendezvous
    key) received, through the recv-done and tuple reads (8 steps at most); empty where there is none."""
    key = _RENDEZVOUS.search(send_line)
    if key is None:
        return "", None
    frontier = list(_receivers(hlo_text).get(key[1], ()))
    users, seen = _users(hlo_text), set(frontier)
    for _ in range(8):
        following = []
        for name in frontier:
            for user in users.get(name, ()):
                if user in seen:
                    continue
                seen.add(user)
                op_name, frame_id = _metadata(lines.get(user, ""))
                if op_name:
                    return op_name, frame_id
                following.append(user)
        frontier = following
    return "", None


@functools.lru_cache(maxsize=2)
def _receivers(hlo_text: str) -> dict[str, tuple[str, ...]]:
    """The module's recv instructions by their MegaScale rendezvous key (read once, not once per send)."""
    found: dict[str, list[str]] = {}
    for name, line in _instruction_lines(hlo_text).items():
        instruction, key = parse_instruction(line), _RENDEZVOUS.search(line)
        if instruction and key and instruction.op == "recv":
            found.setdefault(key[1], []).append(name)
    return {key: tuple(names) for key, names in found.items()}


@functools.lru_cache(maxsize=2)
def _users(hlo_text: str) -> dict[str, tuple[str, ...]]:
    """Every instruction's users by its name, for the whole module."""
    found: dict[str, list[str]] = {}
    for name, line in _instruction_lines(hlo_text).items():
        instruction = parse_instruction(line)
        for operand in instruction.operands if instruction else ():
            found.setdefault(operand, []).append(name)
    return {name: tuple(users) for name, users in found.items()}


def _producer_op_name(lines: dict[str, str], name: str) -> str:
    """The op name of the instruction producing ``name``, through copies, bitcasts and tuple reads (8 steps at most)."""
    return _producer_metadata(lines, name)[0]


def _producer_metadata(lines: dict[str, str], name: str) -> tuple[str, int | None]:
    """The metadata (op name, stack frame) of the instruction producing ``name``, through copies, bitcasts, tuple reads
    and collectives without metadata of their own (8 steps at most): a MegaScale send moves a bitcast of an in-slice
    reduce-scatter of the fusion that computed the value."""
    for _ in range(8):
        line = lines.get(name, "")
        op_name, frame_id = _metadata(line)
        if op_name:
            return op_name, frame_id
        instruction = parse_instruction(line)
        if not instruction or instruction.op not in _PASS_THROUGH + _MOVES_ITS_OPERAND or not instruction.operands:
            return "", None
        name = instruction.operands[0]
    return "", None


def _plain_shape(shape: str) -> str:
    """``bf16[8,16]`` from ``bf16[8,16]{1,0:T(8,128)(2,1)}`` (the layout dropped)."""
    return re.sub(r"\{[^{}]*\}", "", re.sub(r"\{[^{}]*\{[^{}]*\}[^{}]*\}", "", shape))


def line_sources(hlo_text: str, ops: Iterable[hlo.CollectiveOp]) -> tuple[Source, ...]:
    """``ops`` (instructions of ``hlo_text``) summed per source line and module, the most bytes first."""
    totals: dict[tuple, list] = {}
    for op in ops:
        found = instruction_source(hlo_text, op.name)
        frame = found.frame
        key = (frame.file, frame.line, frame.function) if frame else (None, None, None)
        entry = totals.setdefault(key + (found.module,), [0, 0, False, {}, {}])
        entry[0] += op.runs
        entry[1] += op.runs * op.bytes
        entry[2] = entry[2] or found.combined
        entry[3].update(dict.fromkeys(found.ops))
        entry[4].update(dict.fromkeys(found.values))
    sources = [
        Source(file, line, function, module, count, size, combined, tuple(ops_), tuple(values))
        for (file, line, function, module), (count, size, combined, ops_, values) in totals.items()
    ]
    return tuple(sorted(sources, key=lambda s: (-s.bytes, -s.count, s.file or "", s.line or 0, s.module)))


# --- one row per source line, across the program's collectives ---------------------------------


@dataclasses.dataclass(frozen=True)
class Traced:
    """One kind of collective over some mesh axes (per device per step) and the lines it comes from; ``seconds`` is the
    roofline's time for all of it where a target costed it (an estimate), else None."""

    op: str
    mesh_axes: tuple[str, ...]
    count: int
    bytes: int
    sources: tuple[Source, ...]
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "mesh_axes": list(self.mesh_axes),
            "count": self.count,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "sources": [s.to_json() for s in self.sources],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Traced:
        return cls(
            data["op"],
            tuple(data["mesh_axes"]),
            data["count"],
            data["bytes"],
            tuple(Source.from_json(s) for s in data["sources"]),
            data.get("seconds"),
        )


@dataclasses.dataclass(frozen=True)
class LineRow:
    """Everything one line of the user's code makes the program communicate, per device per step.

    ``collectives`` are (op, mesh axes, count, bytes) of each kind it causes; ``seconds`` their roofline time
    shared out by bytes (an estimate; None without a target); ``modules`` the Flax modules it ran in.
    """

    file: str | None
    line: int | None
    function: str | None
    count: int
    bytes: int
    seconds: float | None
    collectives: tuple[tuple[str, tuple[str, ...], int, int], ...]
    modules: tuple[str, ...]
    combined: bool
    ops: tuple[str, ...]
    values: tuple[Value, ...]

    @property
    def where(self) -> str:
        return Source(self.file, self.line, self.function, "", 0, 0).where

    @property
    def kinds(self) -> str:
        """``all-reduce over model x4; all-gather over data x2``."""
        return "; ".join(f"{op} over {'x'.join(axes) or '-'} x{count}" for op, axes, count, _ in self.collectives)


def by_line(traced: Iterable[Traced]) -> list[LineRow]:
    """One row per source line, the most time first where every collective was costed, else the most bytes."""
    rows: dict[tuple, dict] = {}
    costed = True
    for entry in traced:
        costed = costed and entry.seconds is not None
        for source in entry.sources:
            row = rows.setdefault(
                (source.file, source.line, source.function),
                {"count": 0, "bytes": 0, "seconds": 0.0, "kinds": {}, "modules": {}, "combined": False, "ops": {}, "values": {}},
            )
            row["count"] += source.count
            row["bytes"] += source.bytes
            if entry.seconds is not None and entry.bytes:
                row["seconds"] += entry.seconds * source.bytes / entry.bytes
            kind = row["kinds"].setdefault((entry.op, entry.mesh_axes), [0, 0])
            kind[0] += source.count
            kind[1] += source.bytes
            row["modules"].update(dict.fromkeys([source.module]))
            row["combined"] = row["combined"] or source.combined
            row["ops"].update(dict.fromkeys(source.ops))
            row["values"].update(dict.fromkeys(source.values))
    out = [
        LineRow(
            file,
            line,
            function,
            r["count"],
            r["bytes"],
            r["seconds"] if costed else None,
            tuple((op, axes, n, b) for (op, axes), (n, b) in r["kinds"].items()),
            tuple(r["modules"]),
            r["combined"],
            tuple(r["ops"]),
            tuple(r["values"]),
        )
        for (file, line, function), r in rows.items()
    ]
    return sorted(out, key=lambda r: (-(r.seconds or 0.0), -r.bytes, -r.count, r.file or "", r.line or 0))
