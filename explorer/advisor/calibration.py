"""Stage 2's calibration: stage 1's estimate scaled by what XLA said of the candidates compiled so far.

This module's one job is correcting stage 1 with the compiles: per roofline term (``calibration``), the prediction
each uncompiled candidate is ranked on (``calibrated_prediction``, ``recalibrate``), the next one to compile
(``next_to_compile``), how far each compile was from its forecast (``agreement_line``), and the memory beside the state
that XLA's peaks showed over stage 1's estimate (``memory_factor``: what the memory search plans with).
"""

from __future__ import annotations

import dataclasses

from explorer.advisor.candidates import Candidate, Search, estimate_key, shortlist
from explorer.advisor.estimate import prediction_parts
from explorer.formats import human_seconds
from explorer.hardware.targets import Target
from explorer.predict.roofline import Estimate


def calibration(search: Search) -> dict[str, float]:
    """Per roofline term, XLA's over stage 1's for the candidates compiled so far: the lower median of the ratios,
    clipped (``_robust``; 1 before any). A program XLA refused (E1000) never calibrates: its figures are not a step's.

    Stage 1's terms are coarse in different ways for different models (measured in docs/benchmarks.md: on
    Llama-2-7B shapes XLA's bytes accessed were 3-13x the estimate's HBM traffic, on T5 4-22x), but
    the error of one term varies much less between layouts of one model than between terms. Scaling
    each term by what the compiled candidates showed ranks the rest by an estimate corrected on this
    model. The lower median, not a mean: the calibrated estimate stays optimistic (a lower bound,
    as the roofline is), so one layout that XLA handles badly (T5 with its length sharded: 22x) does
    not condemn the others; XLA ranks whatever is compiled. Collectives are also calibrated per mesh
    axis (``collective_s:AXIS``: XLA's collectives over the axis over stage 1's for it), or per group
    of axes where XLA ran a collective over several at once (``collective_s:fsdp+sequence``: the two
    together, never either alone; on T5, such a compile shared between its two axes put every FSDP
    collective at 9x stage 1's and kept the best FSDP layout from being compiled: docs/advisor.md). An
    *estimate* still, used to choose what to compile next, never shown as XLA's.
    """
    ratios: dict[str, list[float]] = {"compute_s": [], "memory_s": [], "collective_s": []}
    for c in search.candidates:
        if not _calibrates(c):
            continue
        for term in ("compute_s", "memory_s", "collective_s"):
            stage1, xla = getattr(c.estimate, term), getattr(c.compiled.estimate, term)
            if stage1 > 0 and xla > 0:
                ratios[term].append(xla / stage1)
        for group, (xla, stage1) in _collectives_by_group(c).items():
            if stage1 > 0:
                ratios.setdefault(f"collective_s:{'+'.join(group)}", []).append(xla / stage1)
    factors = {term: _robust(found) for term, found in ratios.items()}
    # The prediction adds what the roofline's terms do not show (kernels one after another, each at its own rate; the
    # collectives XLA's schedule hides under them): the compiled prediction over stage 1's terms scaled as above.
    schedule = []
    for c in search.candidates:
        if _calibrates(c) and c.compiled.estimate.predicted_s:
            scaled = _prediction(c, factors, search.target)
            if scaled:
                schedule.append(c.compiled.estimate.predicted_s / scaled)
    factors["predicted_s"] = _robust(schedule)
    return factors


def _calibrates(c: Candidate) -> bool:
    """A candidate compiled in full or extrapolated whose program XLA accepted: its figures are a step's."""
    return c.verified and c.compiled is not None and c.compiled.estimate is not None and not c.refused


CALIBRATION_CLIP = 32.0  # no factor beyond 32x either way: one compile's outlier cannot move an estimate by orders of magnitude


def _robust(found: list[float]) -> float:
    """The lower median of the ratios (1 before any; optimistic, as the roofline is: of two, the smaller), clipped
    to [1/CALIBRATION_CLIP, CALIBRATION_CLIP]."""
    if not found:
        return 1.0
    middle = sorted(found)[(len(found) - 1) // 2]
    return min(max(middle, 1.0 / CALIBRATION_CLIP), CALIBRATION_CLIP)


def _collectives_by_group(c: Candidate) -> dict[tuple[str, ...], tuple[float, float]]:
    """XLA's collective seconds and stage 1's per group of mesh axes that XLA's collectives tie together: an axis alone,
    or the axes of collectives that ran over several at once (XLA gathering over fsdp x sequence in one op says
    something about the two together, nothing about either alone). Sorted axis names; only axes stage 1 costed or
    XLA's collectives ran over."""
    groups: list[set[str]] = [{axis} for axis in c.collective_by_axis]
    for k in c.compiled.collectives:
        axes = set(k.mesh_axes or ())
        joined = [g for g in groups if g & axes]
        groups = [g for g in groups if not g & axes] + [axes.union(*joined)]
    found = {}
    for group in groups:
        if not group:
            continue
        xla = sum(k.seconds for k in c.compiled.collectives if set(k.mesh_axes or ()) and set(k.mesh_axes) <= group)
        found[tuple(sorted(group))] = (xla, sum(c.collective_by_axis.get(axis, 0.0) for axis in group))
    return found


def calibrated(c: Candidate, factors: dict[str, float]) -> Estimate:
    """Stage 1's estimate with each term scaled by ``calibration``'s factor. Collectives per mesh axis: by the factor
    of the largest group of axes (``_collectives_by_group``) measured together that this candidate's own axes all
    cover (a candidate with fsdp and sequence takes what XLA did to the two together; one with fsdp alone does not),
    else the overall one."""
    own = set(c.collective_by_axis)
    groups = sorted(
        (tuple(key.removeprefix("collective_s:").split("+")) for key in factors if key.startswith("collective_s:")),
        key=lambda g: (-len(g), g),
    )
    collective = c.estimate.collective_s * factors["collective_s"] if not own else 0.0
    for axis, seconds in c.collective_by_axis.items():
        group = next((g for g in groups if axis in g and set(g) <= own), None)
        collective += seconds * (factors[f"collective_s:{'+'.join(group)}"] if group else factors["collective_s"])
    return Estimate(c.estimate.compute_s * factors["compute_s"], c.estimate.memory_s * factors["memory_s"], collective)


def _prediction(c: Candidate, factors: dict[str, float], target: Target) -> float | None:
    """Stage 1's predicted step (``estimate.prediction_parts``: matmuls, HBM bytes, collectives, the dispatch, added)
    with each part scaled by its roofline term's factor, before the schedule's factor; None without a prediction."""
    parts = prediction_parts(c.estimate, target.chip)
    if parts is None:
        return None
    matmul, memory, fixed = parts
    return matmul * factors["compute_s"] + memory * factors["memory_s"] + calibrated(c, factors).collective_s + fixed


def calibrated_prediction(c: Candidate, factors: dict[str, float], target: Target) -> float:
    """Stage 1's predicted step calibrated on the compiles so far: each part scaled by its term's factor
    (``calibration``), then by the schedule's (``predicted_s``: the compiled predictions over their candidates' scaled
    parts). An estimate, labelled so wherever shown; with no compile yet, stage 1's own prediction (without one, the
    calibrated bound)."""
    scaled = _prediction(c, factors, target)
    return calibrated(c, factors).step_s if scaled is None else scaled * factors.get("predicted_s", 1.0)


def agreement_line(c: Candidate | None) -> str | None:
    """What one compile said of stage 1's estimate (``Candidate.agreement``), in words; None where it gave no prediction."""
    found = c.agreement if c is not None else None
    if not found:
        return None
    text = f"predicted {human_seconds(found['compiled_predicted_s'])} compiled, {found['compiled_over_stage1']:.2f}x stage 1's estimate"
    if found["compiled_over_calibrated"]:
        text += f", {found['compiled_over_calibrated']:.2f}x its calibrated estimate"
    return text


def recalibrate(search: Search) -> None:
    """After a compile: the calibration, and every uncompiled candidate's calibrated prediction (``calibrated_s``, the
    scale ``rank`` orders it on; a compiled one keeps the one it was compiled on, its forecast)."""
    search.calibration = calibration(search)
    for index, c in enumerate(search.candidates):
        if not c.verified:
            search.candidates[index] = dataclasses.replace(c, calibrated_s=calibrated_prediction(c, search.calibration, search.target))


def next_to_compile(search: Search, tried: set[str] = frozenset()) -> Candidate | None:
    """The shortlisted candidate to compile next: the best by the estimate calibrated on what was compiled so far."""
    factors = calibration(search)
    pool = [c for c in shortlist(search) if not c.verified and not c.own and c.layout.name not in tried]  # the own layout has its own turn
    return min(pool, key=lambda c: (calibrated_prediction(c, factors, search.target),) + estimate_key(c), default=None)
