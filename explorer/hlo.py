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

from explorer.errors import ExplorerError

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
    "s4": 1, "u4": 1, "s2": 1, "u2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e4m3": 1,
    "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 1, "token": 0,
}


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
        if part["dtype"] not in DTYPE_BYTES:
            raise ExplorerError("HLO element type", part["dtype"], f"is unknown; known: {sorted(DTYPE_BYTES)}")
        total += math.prod(dims) * DTYPE_BYTES[part["dtype"]]
    return total




def used(ops: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Only the collectives that occur at least once."""
    return {op: stats for op, stats in ops.items() if stats["count"]}
