"""A search for people and programs: the JSON object (``search_to_dict``), the verdict, the ranked table's rows, the text report.

The page and the command line draw the same rows (``table_rows``); ``search_text`` is what
``python -m explorer advise`` prints, its table through ``formats.plain_table``.
"""

from __future__ import annotations

from typing import Any

from explorer.advisor.depth import NO_DEPTH_OPTION, SHORTCUT_DEPTHS
from explorer.advisor.estimate import STAGE1_NOTE
from explorer.advisor.explain import pipeline_explanation, pipeline_text
from explorer.advisor.candidates import Candidate, Search
from explorer.compile.compile_result import TargetCompile
from explorer.layout import Layout
from explorer.predict.roofline import collective_seconds
from explorer.predict.step_model import SCOPE
from explorer.compile.xla_results import memory_limit
from explorer.hardware.targets import Target, slice_split
from explorer.errors import ExplorerError
from explorer.models import MAXTEXT
from explorer.models.maxtext import parallelism_keys
from explorer.formats import human_bytes, human_seconds, plain_table, share
from explorer.compile.compile_result import memory_room
from explorer.formats import counted

PREDICTION_NOTE = (
    "the step model's prediction, what ranks, one scale for every row: XLA's program kernel by kernel where verified; else an "
    "estimate, stage 1's work added, calibrated on the compiled rows where there are any (each term scaled by XLA's over stage 1's, "
    f"then by the compiled predictions' over those; {SCOPE})"
)
TABLE_COLUMNS = (
    "rank",
    "layout",
    "fits",
    "predicted step",
    "step ≥",
    "XLA peak / device",
    "state / device",
    "bound",
    "MFU ceiling",
    "remat",
    "microbatches",
    "active params",
    "placement",
    "largest collective",
    "rules",
)  # the command line's table (the page shows every column)


def candidate_to_dict(rank_: int, c: Candidate, target: Target | None = None) -> dict[str, Any]:
    """One candidate as JSON (``advise --json``'s ``candidates``): its layout, figures and where each came from
    (stage 1's collectives with their seconds on ``target``'s links, when it is given)."""
    mesh = c.compiled.mesh if c.compiled else None
    return {
        "rank": rank_,
        "layout": c.layout.to_dict(),
        "own": c.own,
        "mesh": {
            "shape": list(c.layout.mesh.shape),
            "axes": list(c.layout.mesh.axes),
            "placement": [p.to_json() for p in mesh.placement] if mesh else None,
            "placement_method": mesh.placement_method if mesh else None,
            "links": [link.to_dict() for link in c.links],
        },
        "state_bytes": c.state_bytes,
        "verified": c.verified,
        "extrapolated": c.extrapolated,
        "fits": bool(c.fits),
        "peak_bytes": c.peak_bytes,
        "headroom_bytes": c.headroom_bytes,
        "step_s": c.step_s,
        "predicted_s": c.predicted_s,
        "ranked_s": c.ranked_s,
        "calibrated_predicted_s": c.calibrated_s,
        "agreement": c.agreement,
        "bound": c.bound,
        "mfu_ceiling": c.mfu_ceiling,
        "step_source": ("xla_extrapolated" if c.extrapolated else "xla_roofline") if c.verified else "stage1_estimate",
        "extrapolation": (
            _extrapolation_dict(c.compiled if c.extrapolated else c.extrapolation) if c.extrapolated or c.extrapolation else None
        ),
        "extrapolation_error": c.extrapolation_error,
        "estimate": {
            "compute_s": c.estimate.compute_s,
            "memory_s": c.estimate.memory_s,
            "collective_s": c.estimate.collective_s,
            "step_s": c.estimate.step_s,
            "predicted_s": c.estimate.predicted_s,
            "bound": c.estimate.bound,
            "note": STAGE1_NOTE,
            "collectives": [
                {
                    "what": label,
                    "op": k.op,
                    "bytes": k.bytes,
                    "mesh_axes": list(k.mesh_axes),
                    "group_size": k.group_size,
                    "ici_axes": k.ici_axes,
                    "hosts": k.hosts,
                    "seconds": seconds,
                }
                for (label, k), seconds in zip(c.collectives, _seconds(c, target))
            ],
        },
        "largest_collective": c.largest_collective,
        "active_params": c.active_params,
        "remat": c.remat,
        "microbatches": c.microbatches,
        "activation_bytes_estimate": c.activation_bytes,
        "xla_refused": c.refused,
        "compiled_on": c.compiled_on,
        "maxtext_keys": None if target is None else maxtext_keys(c.layout, target),
        "gradient_bytes_estimate": c.gradient_bytes,
        "change": c.change or None,
    }


def _seconds(c: Candidate, target: Target | None) -> list[float | None]:
    """Stage 1's seconds for each of ``c``'s collectives on ``target`` (``roofline.collective_seconds``), None without one."""
    return [collective_seconds(k, target.chip) if target else None for _, k in c.collectives]


def _extrapolation_dict(result: TargetCompile) -> dict[str, Any]:
    """An extrapolated result's figures: from which depths, to which, and what they gave."""
    estimate = result.estimate
    return {
        **result.extrapolated.to_json(),
        "peak_bytes": result.judged_peak_bytes,
        "fits": result.fits,
        "flops": result.flops,
        "bytes_accessed": result.bytes_accessed,
        "collective_bytes": sum(c.bytes for c in result.collectives),
        "step_s": estimate.step_s if estimate else None,
        "predicted_s": estimate.predicted_s if estimate else None,
        "bound": estimate.bound if estimate else None,
    }


def maxtext_keys(layout: Layout, target: Target) -> list[str] | None:
    """A MaxText config's candidate as the MaxText keys that make its mesh on ``target``: every axis's
    ``ici_*_parallelism`` (inside a slice) and ``dcn_*_parallelism`` (the slices it spans; all 1 on one slice, so none
    of base.yml's -1 defaults fills in). None for another model, or a mesh whose axes are not MaxText's."""
    if layout.model.name != MAXTEXT:
        return None
    shape, axes = tuple(layout.mesh.shape), tuple(layout.mesh.axes)
    try:
        dcn = slice_split(target, shape, axes, layout.mesh.dcn)
        ici = {axis: size // share for axis, size, share in zip(axes, shape, dcn)}
        return parallelism_keys(ici, dict(zip(axes, dcn)))
    except ExplorerError:
        return None


def maxtext_advice_text(search: Search) -> str | None:
    """The advice for a MaxText config, as the keys to set (``--maxtext``'s own spelling), and whether its rules differ
    from the config's own (then the YAML export writes them)."""
    ranked = search.ranked()
    keys = maxtext_keys(ranked[0].layout, search.target) if ranked else None
    if keys is None:
        return None
    own = next((c for c in search.candidates if c.own), None)
    rules = "" if own is None or own.layout.rules == ranked[0].layout.rules else " and its logical_axis_rules (Share: MaxText YAML)"
    return f"MaxText keys to set{rules}: " + " ".join(keys)


def search_to_dict(search: Search) -> dict[str, Any]:
    """The whole search as one JSON object (``advise --json``), candidates in rank order."""
    ranked = search.ranked()
    smallest = search.smallest_state()
    hbm = search.limit_bytes
    out = {
        "target": search.target.to_dict(),
        "memory_limit": memory_limit(search.target).to_json(),
        "searched": search.searched,
        "refused": search.refused,
        "refused_examples": search.refused_examples,
        "compiles": search.compiles,
        "cached_compiles": search.cached_compiles,
        "full_compiles": search.full_compiles,
        "calibration": search.calibration or None,
        "agreement": agreement(search),
        "pipeline": pipeline_explanation(search),
        "depth_shortcut": None
        if search.depth is None
        else {
            "used": search.depth.usable,
            "options": list(search.depth.options),
            "depth": search.depth.full or None,
            "depths": list(SHORTCUT_DEPTHS) if search.depth.usable else None,
            "why_not": search.depth.why or None,
        },
        "stage1_s": search.stage1_s,
        "elapsed_s": search.elapsed_s,
        "stopped": search.stopped,
        "failures": search.failures,
        "candidates": [candidate_to_dict(i, c, search.target) for i, c in enumerate(ranked, 1)],
        "fits_none": not any(c.fits for c in ranked),
        "smallest_state": None if smallest is None else {"bytes": smallest.state_bytes, "layout": smallest.layout.name, "hbm_bytes": hbm},
        "roles": dict(search.roles),
        "guessed_roles": dict(search.guessed_roles),
        "scanned": search.scanned,
        "refused_by_xla": sum(c.refused for c in ranked),
        "advice": None if search.advice() is None else search.advice().layout.name,
        "unfinished": search.unfinished or None,
        "memory_search": list(search.memory_steps),
        "elsewhere": [{"target": e.target.name, **candidate_to_dict(0, e.candidate, e.target)} for e in search.elsewhere],
    }
    return out


def agreement(search: Search) -> dict[str, Any] | None:
    """How stage 1 agreed with the compiled predictions (``Candidate.agreement``), over every compile XLA accepted: the
    range of compiled / stage 1, and of compiled / stage 1 calibrated on the compiles before it (the forecast that
    chose what to compile; the first compile has none). None before any compile."""
    found = [c.agreement for c in search.candidates if c.agreement]
    if not found:
        return None
    raw = [a["compiled_over_stage1"] for a in found if a["compiled_over_stage1"]]
    forecast = [a["compiled_over_calibrated"] for a in found if a["compiled_over_calibrated"]]
    return {
        "compiles": len(found),
        "compiled_over_stage1": [min(raw), max(raw)] if raw else None,
        "calibrated_compiles": len(forecast),
        "compiled_over_calibrated": [min(forecast), max(forecast)] if forecast else None,
    }


def agreement_text(search: Search) -> str | None:
    """``agreement`` in one sentence (None before any compile)."""
    found = agreement(search)
    if found is None:
        return None
    span = lambda pair: f"{pair[0]:.2f}x" if f"{pair[0]:.2f}" == f"{pair[1]:.2f}" else f"{pair[0]:.2f}-{pair[1]:.2f}x"
    text = (
        f"stage 1's estimate against the compiled prediction, on {found['compiles']} compile(s): the compiled one is "
        f"{span(found['compiled_over_stage1'])} stage 1's"
    )
    if found["compiled_over_calibrated"]:
        text += (
            f", {span(found['compiled_over_calibrated'])} stage 1's calibrated on the compiles before it "
            f"({found['calibrated_compiles']} compile(s): the forecast that chose them)"
        )
    return text


def predicted_text(c: Candidate) -> str:
    """The predicted step as the table shows it: the compiled prediction, or an estimate labelled so (calibrated on the
    compiles so far, as ``PREDICTION_NOTE`` says under the table; stage 1's own before any: narrow enough for its column)."""
    if c.verified:
        return human_seconds(c.predicted_s) + (" (extrapolated)" if c.extrapolated else "")
    return f"{human_seconds(c.ranked_s)} (estimate)"


def limit_text(target: Target) -> str:
    """The memory a device's peak is judged against, in words, as the compile's verdict says it (``compile_result.memory_room``)."""
    return memory_room(target, memory_limit(target))


def target_text(target: Target) -> str:
    """What the target is, where it matters: a GPU cluster's hosts and the two levels its collectives ride."""
    if not target.is_gpu:
        wraps = [axis for axis, wrap in zip("xyz", target.wraparound) if wrap]
        shape = "x".join(map(str, target.shape))
        if not wraps:
            links = f"a {shape} grid of chips without wraparound links: every collective moves data one way (a line, not a ring)"
        else:
            where = "every axis" if len(wraps) == len(target.wraparound) else " and ".join(wraps) + " only"
            links = (
                f"a {shape} torus with wraparound links on {where}: a mesh axis that goes around a whole torus axis with them "
                "moves data both ways, any other one way"
            )
        if target.multislice:  # each slice's torus as above; the slices joined by the DCN
            return (
                f"{target.name}: {target.num_slices} TPU slices of {target.slice_chips} {target.chip.device_kind} chips "
                f"({counted(target.devices, 'device')}) joined by the data-center network ({target.dcn.bandwidth / 1e9:g} GB/s per chip), "
                f"each {links}"
            )
        return f"{target.name}: a TPU slice of {counted(target.chips, target.chip.device_kind + ' chip')} ({counted(target.devices, 'device')}), {links}"
    gpu = target.chip
    return (
        f"{target.name}: a GPU cluster of {counted(target.hosts, 'host')} x {target.gpus_per_host} "
        f"{gpu.device_kind} ({counted(target.devices, 'GPU')}); a mesh axis inside a host rides NVLink ({gpu.nvlink_bandwidth / 1e9:.0f} GB/s "
        f"one way per GPU), one that spans hosts the network ({gpu.network_bandwidth / 1e9:.0f} GB/s per GPU); tensor is placed "
        "inside a host"
    )


def verdict_text(search: Search) -> str:
    """The advice in words: always a layout XLA compiled in full for the target that fits (``Search.advice``), said to be
    the best so far where uncompiled layouts are estimated faster; else that nothing compiled fits, the closest, and the
    smallest larger slice where the best one fits (compiled there); else, before any compile, stage 1's best."""
    ranked = search.ranked()
    target = search.target.name
    if not ranked:
        return f"No candidate could be analyzed for {target} ({search.refused} refused)."
    best = search.advice()
    if best is not None:
        text = (
            f"Advice for {target}: {best.layout.name} — step ≥ {human_seconds(best.step_s)} (the lower bound), predicted "
            f"{human_seconds(best.predicted_s)} ({best.bound}-bound, XLA-verified: compiled for {target}), XLA's peak "
            f"{human_bytes(best.peak_bytes)} of {limit_text(search.target)}."
        )
        if best.change:
            text += f" It changes {best.change}."
        ahead = search.ahead_of_advice()
        if ahead:
            names = ", ".join(c.layout.name for c in ahead[:3]) + (", …" if len(ahead) > 3 else "")
            text += (
                f" The best compiled so far: the search is unfinished, {counted(len(ahead), 'layout')} not compiled in full "
                f"{'is' if len(ahead) == 1 else 'are'} estimated faster ({names}); compiling more candidates would settle it."
            )
        return text
    closest = search.closest()
    if closest is not None and closest.verified:
        text = (
            f"Nothing fits on {target}: of the layouts compiled, the closest is {closest.layout.name}, XLA's peak "
            f"{human_bytes(closest.peak_bytes)}{' (extrapolated)' if closest.extrapolated else ''} of {limit_text(search.target)}."
        )
    elif closest is not None and closest.state_bytes > search.limit_bytes:
        text = (
            f"No layout fits {target}: the smallest state per device found is {human_bytes(closest.state_bytes)} "
            f"({closest.layout.name}), against {limit_text(search.target)}."
        )
    else:
        return (
            f"No advice for {target} yet: no layout was compiled (stage 1 only). Stage 1 ranks {ranked[0].layout.name} first, "
            f"predicted {human_seconds(ranked[0].ranked_s)} (an estimate, not compiled)."
        )
    return text + elsewhere_text(search) + (f" The search is unfinished: {search.unfinished}." if search.unfinished else "")


def elsewhere_text(search: Search) -> str:
    """Where nothing fits on the target: the larger slices the best layout was compiled on, and where it fits."""
    fitting = next((e for e in search.elsewhere if e.candidate.fits), None)
    missed = [e for e in search.elsewhere if not e.candidate.fits]
    text = ""
    if missed:
        text += (
            " It does not fit on "
            + " or ".join(
                f"{e.target.name} ({e.candidate.layout.name}, XLA's peak {human_bytes(e.candidate.peak_bytes or 0)})" for e in missed
            )
            + " either."
        )
    if fitting is not None:
        c = fitting.candidate
        text += (
            f" The smallest slice of {fitting.target.chip.device_kind} where it fits: {fitting.target.name}, as {c.layout.name} "
            f"(compiled there: XLA's peak {human_bytes(c.peak_bytes)} of {limit_text(fitting.target)}, predicted {human_seconds(c.predicted_s)})."
        )
    return text


def rules_text(layout: Layout) -> str:
    """The rules on one line, whole: ``batch:data; embed:-; hidden:tensor``."""
    return "; ".join(f"{r.logical}:{'-' if r.mesh is None else ','.join(r.mesh_axes)}" for r in layout.rules)


RULES_WIDTH = 60  # the rules column's text, at most (a MaxText config's rules are ~3,000 characters whole: issue 55)


def rules_short(layout: Layout, width: int = RULES_WIDTH) -> str:
    """The rules in a table's cell: only those that place something (a mesh axis of more than one device), grouped by
    the axes they name (``batch → data,fsdp; heads, mlp, vocab → tensor``), as many names as fit in ``width``, the
    rest counted (``+12``); "everything replicated" where none places anything. The whole: ``rules_text``.

    >>> from explorer.layout import seed_layout
    >>> rules_short(seed_layout())
    'batch → data; hidden → model'
    """
    sizes = dict(zip(layout.mesh.axes, layout.mesh.shape))
    groups: dict[tuple[str, ...], list[str]] = {}
    for rule in layout.rules:
        placed = tuple(axis for axis in rule.mesh_axes if sizes.get(axis, 1) > 1)
        if placed:
            groups.setdefault(placed, []).append(rule.logical)
    if not groups:
        return "everything replicated"
    order = {axis: i for i, axis in enumerate(layout.mesh.axes)}
    keys = sorted(groups, key=lambda axes: [order[a] for a in axes])
    room = max(width // len(keys) - 6, 8)  # each group's names get a share of the width
    parts = []
    for axes in keys:
        names, shown = sorted(groups[axes], key=lambda n: (len(n), n)), []
        for name in names:
            if shown and len(", ".join(shown + [name])) > room:
                break
            shown.append(name)
        rest = f" (+{len(names) - len(shown)})" if len(names) > len(shown) else ""
        parts.append(f"{', '.join(shown)}{rest} → {','.join(axes)}")
    return "; ".join(parts)


def fits_text(c: Candidate) -> str:
    """The fits column: XLA's verdict where compiled; before a compile, whether the exact state alone fits."""
    if c.verified:
        return ("yes" if c.fits else "no") + (" (extrapolated)" if c.extrapolated else "")
    return "not compiled (its state fits)" if c.fits else "no: its state alone is over"


def table_rows(search: Search, whole_rules: bool = False) -> list[dict[str, Any]]:
    """The ranked table as plain rows (the page and the command line draw it); the rules short (``rules_short``) unless
    ``whole_rules``."""
    rows = []
    for i, c in enumerate(search.ranked(), 1):
        label = " (extrapolated)" if c.extrapolated else ""
        rows.append(
            {
                "rank": i,
                "layout": c.layout.name + (" (yours)" if c.own else ""),
                "fits": fits_text(c),
                "predicted step": predicted_text(c),
                "step ≥": human_seconds(c.step_s) + (label if c.verified else " (estimate)"),
                "XLA peak / device": human_bytes(c.peak_bytes) + label if c.peak_bytes is not None else "not compiled",
                "state / device": human_bytes(c.state_bytes),
                "bound": c.bound,
                "MFU ceiling": share(c.mfu_ceiling),
                "verified": ("XLA, extrapolated in depth" if c.extrapolated else "XLA") if c.verified else "estimate",
                "extrapolated figures": extrapolation_text(c),
                "mesh": " x ".join(f"{a} {s}" for a, s in zip(c.layout.mesh.axes, c.layout.mesh.shape)),
                "rules": rules_text(c.layout) if whole_rules else rules_short(c.layout),
                "largest collective": c.largest_collective,
                "remat": c.remat or "-",
                "microbatches": str(c.microbatches),
                "active params": _count(c.active_params) if c.active_params else "-",
                "placement": "; ".join(link.short for link in c.links if link.size > 1) or "-",
            }
        )
    return rows


def _count(n: int) -> str:
    """A parameter count, short: 6.74B, 125M, 24.7K."""
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def extrapolation_text(c: Candidate) -> str:
    """The extrapolated figures beside the full compile's (their ratio), for a candidate compiled both ways."""
    if c.extrapolated:
        depths = c.compiled.extrapolated.depths
        return f"extrapolated from depths {depths[0]} and {depths[1]}"
    error = c.extrapolation_error
    if not error:
        return ""
    figures = _extrapolation_dict(c.extrapolation)
    step = figures["step_s"]
    return (
        f"extrapolated: peak {human_bytes(figures['peak_bytes'])} ({error['peak_bytes']:.4f}x the full compile's), "
        f"step ≥ {human_seconds(step)} ({error['step_s']:.4f}x)"
        if step and error["step_s"]
        else f"extrapolated: peak {human_bytes(figures['peak_bytes'])} ({error['peak_bytes']:.4f}x the full compile's)"
    )


def search_text(search: Search, whole_rules: bool = False) -> str:
    """What ``python -m explorer advise`` prints: the verdict, what was searched and compiled, the ranked table (its
    rules short unless ``whole_rules``: ``advise --rules``)."""
    lines = [
        verdict_text(search),
        *([maxtext_advice_text(search)] if maxtext_advice_text(search) else []),
        target_text(search.target),
        f"searched {search.searched} candidate(s), {search.refused} refused by the analysis, {search.compiles} compiled "
        f"({search.cached_compiles} from the disk cache); stage 1 {search.stage1_s:.1f} s, whole search {search.elapsed_s:.1f} s",
    ]
    if search.depth is not None:
        lines.append(
            f"depth shortcut: each candidate estimated to fit compiled at depths {' and '.join(map(str, SHORTCUT_DEPTHS))} of "
            f"{', '.join(search.depth.options)} and extrapolated to {search.depth.full} (the others in full); the best then "
            f"compiled in full ({search.full_compiles} full compile(s))"
            if search.depth.usable
            else f"depth shortcut not used: {search.depth.why}"
            + (" (name it with --depth-option NAME)" if search.depth.why.startswith(NO_DEPTH_OPTION) else "")
        )
    lines += [f"compile failed: {failure}" for failure in search.failures]
    lines += [f"memory search: {step}" for step in search.memory_steps]
    if agreement_text(search):
        lines.append(agreement_text(search))
    if pipeline_text(search):
        lines.append(pipeline_text(search))
    if search.guessed_roles:
        lines.append(guessed_text(search) + " (change one with --role NAME=ROLE)")
    rows = table_rows(search, whole_rules)
    columns = TABLE_COLUMNS + (("extrapolated figures",) if any(row["extrapolated figures"] for row in rows) else ())
    lines.append(plain_table(rows, columns))
    lines.append(f"predicted step: {PREDICTION_NOTE}; step ≥: XLA's roofline lower bound where verified; else an estimate ({STAGE1_NOTE}).")
    if not whole_rules:
        lines.append(f"rules: {RULES_NOTE}; --rules writes them whole.")
    return "\n".join(lines)


RULES_NOTE = "each candidate's rules that place something (on a mesh axis of more than one device), by the axes they name"


def guessed_text(search: Search) -> str:
    """The logical names no convention lists, with the role read from each one's spelling (None: no such name)."""
    return (
        f"{counted(len(search.guessed_roles), 'logical name')} no convention lists, each given the role its spelling "
        "suggests: " + ", ".join(f"{name} as {role}" for name, role in sorted(search.guessed_roles.items()))
    )
