"""Why a pipeline won or lost (issue 43): the best pipelined candidate against the best one without a pipeline, by
what each spends where the other does not: the pipeline's bubble and sends between stages, the other's all-gathers
and reduce-scatters (and its traffic over the data-center network, on several slices).

Figures come from the compiled program where a candidate was compiled (``TargetCompile.bubble``, its collectives:
XLA's), else from stage 1 (the bubble as MaxText's formula's share of its calibrated estimate, its collectives),
labelled so. Collective seconds are each collective's time alone (a lower bound: the schedule may hide some under the
compute). Read by the text report, ``advise --json`` (``pipeline``), the Advisor page and a notebook
(``advisor.pipeline_text(search)``).
"""

from __future__ import annotations

from typing import Any

from explorer.advisor.candidates import Candidate, Search
from explorer.analysis.stage_plan import pipeline_of, stage_mesh_axes
from explorer.formats import human_seconds
from explorer.models.schedule import bubble_fraction
from explorer.predict.roofline import collective_seconds

GATHERS = ("all-gather", "reduce-scatter")


def pipelined(c: Candidate) -> bool:
    """A candidate whose model runs a pipeline (``stage_plan.pipeline_of``)."""
    return pipeline_of(c.layout) is not None


def _across_slices(c: Candidate) -> bool:
    dcn = c.layout.mesh.dcn or ()
    return any(size > 1 for axis, size in zip(c.layout.mesh.axes, dcn) if axis in stage_mesh_axes(c.layout))


def _collectives(c: Candidate, chip) -> list[tuple[str, float, bool]]:
    """(op, seconds, over the DCN) of every collective: XLA's where compiled, else stage 1's."""
    if c.verified and c.compiled is not None and not c.extrapolated:
        return [(k.op, k.seconds, k.link == "dcn") for k in c.compiled.collectives]
    return [(k.op, collective_seconds(k, chip), k.slices > 1) for _, k in c.collectives]


def _source(c: Candidate) -> str:
    return "compiled" if c.verified else "estimate"


def pipeline_explanation(search: Search) -> dict[str, Any] | None:
    """The best pipeline and the best layout without one (each the best ranked that fits), and what each spends where
    the other does not; None when the search has no pipelined candidate that fits, or no other."""
    fitting = [c for c in search.ranked() if c.fits]
    pipe = next((c for c in fitting if pipelined(c)), None)
    plain = next((c for c in fitting if not pipelined(c)), None)
    if pipe is None or plain is None:
        return None
    options = pipe.layout.model.options
    stages, micro, repeats = options["pipeline_stages"], options.get("pipeline_microbatches", 1), options.get("pipeline_repeats", 1)
    formula = bubble_fraction(stages, micro, repeats)
    bubble = pipe.compiled.bubble if pipe.verified and pipe.compiled is not None and not pipe.extrapolated else None
    bubble_s, share = (bubble.bubble_s, bubble.share) if bubble else (formula * pipe.ranked_s, formula)
    axes = set(stage_mesh_axes(pipe.layout))
    if pipe.verified and pipe.compiled is not None and not pipe.extrapolated:
        sends_s = sum(k.seconds for k in pipe.compiled.pipeline_sends(tuple(axes)))
    else:
        sends_s = sum(collective_seconds(k, search.target.chip) for _, k in pipe.collectives if k.op == "collective-permute")
    theirs = _collectives(plain, search.target.chip)
    return {
        "won": search.ranked().index(pipe) < search.ranked().index(plain),
        "pipeline": pipe.layout.name,
        "pipeline_source": _source(pipe),
        "stages": stages,
        "microbatches": micro,
        "repeats": repeats,
        "across_slices": _across_slices(pipe),
        "pipeline_predicted_s": pipe.ranked_s,
        "bubble_s": bubble_s,
        "bubble_share": share,
        "bubble_formula": formula,
        "sends_s": sends_s,
        "other": plain.layout.name,
        "other_source": _source(plain),
        "other_predicted_s": plain.ranked_s,
        "other_gathers_s": sum(s for op, s, _ in theirs if op in GATHERS),
        "other_dcn_s": sum(s for _, s, dcn in theirs if dcn),
    }


def pipeline_text(search: Search) -> str | None:
    """``pipeline_explanation`` in words (None where there is nothing to compare)."""
    e = pipeline_explanation(search)
    if e is None:
        return None
    where = "across the slices" if e["across_slices"] else "inside a slice"
    text = (
        f"Pipeline {'won' if e['won'] else 'lost'}: the best pipeline, {e['pipeline']} ({e['stages']} stages {where}, "
        f"{e['microbatches']} microbatches), predicts {human_seconds(e['pipeline_predicted_s'])} ({e['pipeline_source']}), of which its bubble "
        f"is {human_seconds(e['bubble_s'])} ({e['bubble_share']:.0%} of its step, an estimate; MaxText's formula for one pass: "
        f"{e['bubble_formula']:.0%}) and its sends between stages {human_seconds(e['sends_s'])}; the best layout without one, {e['other']}, "
        f"predicts {human_seconds(e['other_predicted_s'])} ({e['other_source']}), its all-gathers and reduce-scatters {human_seconds(e['other_gathers_s'])}"
        + (f", its collectives over the data-center network {human_seconds(e['other_dcn_s'])}" if e["other_dcn_s"] else "")
        + " (collectives: each one's time alone, a lower bound)."
    )
    spent, saved = e["bubble_s"] + e["sends_s"], max(e["other_gathers_s"], e["other_dcn_s"])
    if e["won"] and spent < saved:
        text += " The bubble and the sends cost less than the gathers the pipeline saves."
    elif not e["won"] and spent > saved:
        text += " The bubble and the sends cost more than the gathers a pipeline would save."
    else:
        text += " The difference is elsewhere in the step (compute, memory traffic), not the bubble against the gathers."
    return text
