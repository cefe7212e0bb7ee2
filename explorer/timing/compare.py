"""Comparing layouts: which arrays are sharded differently, and a fair timing race."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Sequence

from explorer.analysis.analyzer import analyze
from explorer.analysis.report import Report
from explorer.compile.compiled import check_timeable
from explorer.layout import Layout
from explorer.timing.timing import time_layout


@dataclasses.dataclass(frozen=True)
class SpecDifference:
    """One array whose spec (or presence) differs between the layouts compared."""

    path: str
    kind: str
    specs: tuple[str, ...]  # one per layout, 'absent' where the array does not exist
    shard_shapes: tuple[str, ...]


def spec_differences(reports: Sequence[Report]) -> list[SpecDifference]:
    """Only the arrays whose spec is not the same in every layout, in first-seen order."""
    by_path: dict[str, list] = {}
    kinds: dict[str, str] = {}
    for index, report in enumerate(reports):
        for info in report.arrays:
            by_path.setdefault(info.path, [None] * len(reports))[index] = info
            kinds.setdefault(info.path, info.kind)
    differences = []
    for path, infos in by_path.items():
        specs = tuple(info.spec_text() if info else "absent" for info in infos)
        if len(set(specs)) > 1:
            shards = tuple(str(tuple(info.shard_shape)) if info else "—" for info in infos)
            differences.append(SpecDifference(path, kinds[path], specs, shards))
    return differences


@dataclasses.dataclass(frozen=True)
class RaceResult:
    """Round medians of each layout's step time, timed in alternation, and ratios to the first."""

    names: tuple[str, ...]
    round_medians: tuple[tuple[float, ...], ...]  # [layout][round]
    steps: int

    def ratios(self, index: int) -> list[float]:
        """Per-round ratio of layout ``index`` to layout 0 (same round, so machine noise largely cancels)."""
        return [a / b for a, b in zip(self.round_medians[index], self.round_medians[0])]

    def summary(self, index: int) -> dict[str, float]:
        ratios = sorted(self.ratios(index))
        return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}


def race(
    layouts: Sequence[Layout],
    rounds: int = 5,
    steps: int = 10,
    warmup: int = 2,
    on_round: Callable[[int, "RaceResult"], None] | None = None,
    on_phase: Callable[[int, int, str], None] | None = None,
) -> RaceResult:
    """Time the layouts A B C A B C ... for ``rounds`` rounds of ``steps`` steps each.

    ``on_phase(round, layout index, phase)`` reports each timing's stage ("compiling",
    "warming up", "timing", ...) and ``on_round(round, result so far)`` each finished round,
    so a caller can show the true stage and keep the rounds done if it stops the race.
    Every layout passes the first timing gate before anything is compiled, so an
    untimeable one refuses the race at once rather than after the others ran.
    """
    for layout in layouts:
        check_timeable(analyze(layout))
    medians: list[list[float]] = [[] for _ in layouts]
    result = RaceResult(tuple(l.name for l in layouts), (), steps)
    for round_index in range(rounds):
        for index, layout in enumerate(layouts):
            phase = None if on_phase is None else (lambda name, r=round_index, i=index: on_phase(r, i, name))
            medians[index].append(time_layout(layout, steps=steps, warmup=warmup, on_phase=phase).step_s.median)
        result = RaceResult(result.names, tuple(tuple(m) for m in medians), steps)
        if on_round:
            on_round(round_index, result)
    return result
