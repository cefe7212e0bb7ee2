"""The per-value view of a layout with Explicit axes: every forward value with the sharding in its type.

Plain data in (``reading.TypedValue``), plain data out: grouped by where the value was computed
(module path or source line), filtered by a search, in JSON form. ``text.values_text`` prints it,
the Layout page shows it, ``analyze --values`` and ``analyze --json --values`` give it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from explorer import specs
from explorer.reading import TypedValue


@dataclasses.dataclass(frozen=True)
class ValueGroup:
    """The values computed at one place (``where``), in program order, and how many imply communication."""

    where: str
    values: tuple[TypedValue, ...]

    @property
    def communicating(self) -> int:
        return sum(1 for v in self.values if v.communication)

    @property
    def setting(self) -> int:
        return sum(1 for v in self.values if v.sets_sharding)


def spec_text(value: TypedValue) -> str:
    """``P('data', None, unreduced={'model'})``: the type's spec as JAX prints it (reduced axes likewise)."""
    return specs.spec_text(value.spec, unreduced=value.unreduced, reduced=value.reduced)


def matching(values: Sequence[TypedValue], query: str = "", *, communication_only: bool = False) -> tuple[TypedValue, ...]:
    """The values whose place, op, type or communication contains ``query`` (case-insensitive; every word must match).

    >>> v = TypedValue(0, "dot_general", (8, 64), "float32", ("data", "model"), (), (), "f32[8@data,64@model]",
    ...                "model.py:12", "Mlp.__call__", "", 1, True, "")
    >>> len(matching([v], "mlp dot")), len(matching([v], "reshard"))
    (1, 0)
    """
    words = query.lower().split()
    found = []
    for value in values:
        if communication_only and not value.communication:
            continue
        haystack = f"{value.where} {value.op} {value.type_text} {value.communication} {spec_text(value)}".lower()
        if all(word in haystack for word in words):
            found.append(value)
    return tuple(found)


def grouped(values: Sequence[TypedValue]) -> tuple[ValueGroup, ...]:
    """The values grouped by where they were computed, groups in order of first appearance."""
    groups: dict[str, list[TypedValue]] = {}
    for value in values:
        groups.setdefault(value.where, []).append(value)
    return tuple(ValueGroup(where, tuple(members)) for where, members in groups.items())


def value_to_dict(value: TypedValue) -> dict[str, Any]:
    return {
        "index": value.index,
        "op": value.op,
        "type": value.type_text,
        "shape": list(value.shape),
        "dtype": value.dtype,
        "spec": [list(e) if isinstance(e, tuple) else e for e in value.spec],
        "unreduced": list(value.unreduced),
        "reduced": list(value.reduced),
        "source": value.source,
        "function": value.function,
        "module": value.module,
        "runs_per_step": value.runs,
        "sets_sharding": value.sets_sharding,
        "communication": value.communication,
    }
