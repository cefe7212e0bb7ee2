"""The search's stages: stage 1 over every candidate, stage 2 and its calibration, ``advise`` (both).

This module's one job is running the stages that fill a ``Search``; the record itself, the shortlist and the
ranking are ``explorer.advisor.candidates``', the race of the best three ``explorer.advisor.race``'s.

Two stages, as a person would do it, but over every candidate:

1. **Stage 1, no compile** (``stage1``). Every candidate (the model's own layout, and one per
   factorization of the target's devices over the named axes, with rules written from the model's
   logical names by role: ``explorer.advisor.space``) is analysed: the state per device is exact
   (the analysis), layouts JAX would refuse are dropped and counted, and an analytic roofline
   estimates the step (``explorer.advisor.estimate``). The shortlist is the candidates whose
   state fits the device's memory (``limit_bytes``: a TPU device's HBM, JAX's share of a GPU's), best
   estimate first. Each collective is costed on the links its mesh axis lies on (``explorer.hardware.placement``:
   a TPU slice's torus rings and lines, a GPU cluster's NVLink and network).
2. **Stage 2, XLA-verified** (``stage2``). Up to ``compiles`` shortlisted candidates (and the
   model's own layout) are compiled for the target through ``target_compile.compile_target`` (its
   child process, disk cache and Stop): XLA's peak per device and the fits verdict, flops,
   collectives and the roofline from the compiled program. The first is stage 1's best; each next
   one is the best by stage 1's terms scaled by XLA's over stage 1's on what was compiled so far
   (``calibration``), so one compile corrects the estimate's blind spots for this model.
   Candidates XLA says fit are ranked by that step bound (``rank``); the ones that do not fit are
   reported with by how much. The depth shortcut (``stage2(shortcut=True)``,
   ``explorer.advisor.depth``) compiles each at two small depths and extrapolates linearly in depth.

A ``Search`` is the record both stages write as they go; the best three can then be raced on this
process's own devices (``race.race_top``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from explorer.advisor.candidates import Candidate, Search, estimate_key, limit_bytes, shortlist
from explorer.advisor.depth import SHORTCUT_DEPTHS, Depth, at_depth, depth_of, extrapolate
from explorer.advisor.estimate import (
    REMAT_POLICIES,
    STACK_NAMES,
    activation_bytes,
    active_params,
    prediction_parts,
    report_roles,
    stage1_estimate,
)
from explorer.advisor.space import REMAT_ALIASES, candidate_layouts, chosen_roles, guessed_roles
from explorer.analysis.analyzer import analyze, model_for_layouts
from explorer.analysis.report import Report
from explorer.analysis.report import ERROR_CODES, Finding
from explorer.reading import names_of
from explorer.errors import ExplorerError
from explorer.formats import human_seconds
from explorer.layout import Layout, parse_layout
from explorer.hardware.placement import mesh_links, prefetch
from explorer.specs import spec_axes
from explorer.predict.roofline import Estimate
from explorer.compile.compile_result import TargetCompile
from explorer.compile.compile_pool import POOL, jobs_text
from explorer.compile.target_compile import Stopped
from explorer.hardware.targets import Target, parse_target


def stage1(
    layout: Layout, target: Target | str, roles: dict[str, str] | None = None, search: Search | None = None, pipelines: bool | None = None
) -> Search:
    """Analyse every candidate: exact state per device, refusals counted, an estimated step each.

    The model is traced once for every candidate (``analysis.model_for_layouts``) and each generated
    candidate is read from it without a forward trace under its own mesh and rules
    (``analyze(..., received=False)``): their rules are the advisor's, applied to the names the
    probe read. The user's own layout gets the full analysis (its rules may be resolved by the
    model's own code), as does every candidate of a model whose code refused the probe or resolved
    names the probe could not tell apart (``AbstractModel.asked_names``).
    """
    target = parse_target(target) if isinstance(target, str) else target
    search = search or Search(target)
    start = time.perf_counter()
    layouts = candidate_layouts(layout, target, roles, pipelines)  # pipelines: space.candidate_layouts (None: on several slices)
    if not layout.mesh.explicit:
        search.roles = chosen_roles(layout, roles)
        search.guessed_roles = {n: search.roles[n] for n in guessed_roles(sorted(search.roles)) if n not in (roles or {})}
    models = {}  # one trace per model configuration (a pipeline's options make another model: ``space.pipeline_meshes``)
    for config in dict.fromkeys(c.model.key() for c in layouts[1:]):
        models[config] = None if layout.mesh.explicit else _shared([c for c in layouts[1:] if c.model.key() == config])
    placed = [c.mesh for c in layouts if c.mesh.size == target.devices]
    prefetch(target, [m.shape for m in placed], [m.dcn for m in placed])  # one child places every mesh (TPU)
    limit = limit_bytes(target)
    # Names the model's code resolved itself (MaxText's maybe_shard_with_logical) reach no constraint under the probe:
    # each candidate's activations are then read under its own mesh and rules
    unnamed = {config: shared is not None and bool(shared.asked_names - names_of(shared.arrays)) for config, shared in models.items()}
    for index, candidate in enumerate(layouts):
        own = index == 0
        shared = models.get(candidate.model.key())
        if candidate.mesh.size != target.devices:
            search.refused += 1
            search.refused_examples.append(f"{candidate.name}: its mesh has {candidate.mesh.size} devices, the target {target.devices}")
            continue
        search.searched += 1
        try:  # a model that names mesh axes by hand (the NNX guide's P('data', 'model')) refuses other axis names
            report = (
                analyze(candidate) if own or shared is None else analyze(candidate, model=shared, received=unnamed[candidate.model.key()])
            )
        except ExplorerError as error:
            search.refused += 1
            if len(search.refused_examples) < 5:
                search.refused_examples.append(f"{candidate.name}: {error}")
            continue
        errors = _errors(report)
        if errors:
            search.refused += 1
            if len(search.refused_examples) < 5:
                search.refused_examples.append(f"{candidate.name}: {errors[0].message}")
            continue
        search.scanned = search.scanned or scanned(report)
        state = report.totals.state_bytes
        chosen = report_roles(report, roles)
        active = active_params(report, chosen)
        try:
            links = mesh_links(target, candidate.mesh.shape, candidate.mesh.axes, candidate.mesh.dcn)
        except ExplorerError as error:  # several slices: a split of the mesh over them that they cannot hold
            search.refused += 1
            if len(search.refused_examples) < 5:
                search.refused_examples.append(f"{candidate.name}: {error}")
            continue
        for variant, remat, microbatches in memory_variants(candidate, report, chosen, target, own):
            estimate, largest, by_axis, collectives = stage1_estimate(report, target, roles, remat_cost(remat), microbatches, links)
            search.candidates.append(
                Candidate(
                    variant,
                    state,
                    estimate,
                    largest,
                    own=own,
                    fits=state <= limit,
                    collective_by_axis=by_axis,
                    active_params=active,
                    remat=remat,
                    microbatches=microbatches,
                    activation_bytes=activation_bytes(report, chosen, remat_cost(remat), microbatches),
                    links=links,
                    collectives=collectives,
                )
            )
    search.stage1_s = time.perf_counter() - start
    search.elapsed_s = search.stage1_s
    return search


def _shared(layouts: list[Layout]):
    """One abstract model read for every candidate of one model configuration (``model_for_layouts``); None where the
    model's code refuses some of the names: each candidate is then read (and refused) on its own."""
    try:
        shared = model_for_layouts(layouts)
    except ExplorerError:
        return None
    return None if shared.probe_error else shared


def scanned(report: Report) -> bool:
    """Whether the trace shows a scan over the layer stack: an activation declared once and run more than once per
    step (a loop body), or a parameter with a stacked-layer dimension (``STACK_NAMES``). Read from the trace, not from
    an option's name (MaxText's ``scan_layers``, T5X's ``scan_layers``, this project's ``scan``)."""
    for a in report.arrays:
        if a.kind == "activation" and a.runs_per_step > 1:
            return True
        if a.kind == "param" and a.logical_axes and any(isinstance(n, str) and n in STACK_NAMES for n in a.logical_axes):
            return True
    return False


REMAT_OPTIONS = {"remat": dict(zip(REMAT_POLICIES, REMAT_POLICIES)), **REMAT_ALIASES}  # option -> {value tried: policy costed}


def remat_cost(value: str | None) -> str:
    """The policy stage 1 costs a remat option's value as (``estimate.REMAT_POLICIES``; an unknown one as none)."""
    return next((table[value] for table in REMAT_OPTIONS.values() if value in table), "none")


MICROBATCH_OPTIONS = ("microbatches",)  # gradient accumulation steps (explorer.compile.train_step reads it)
MICROBATCH_CHOICES = (1, 2, 4, 8, 16)
FITS_MARGIN = 0.9  # an estimated peak (state + activations) above this share of the memory limit is not taken as fitting


def memory_variants(
    layout: Layout, report: Report, roles: dict[str, str], target: Target, own: bool
) -> list[tuple[Layout, str | None, int]]:
    """Memory as a search dimension: the layout with the cheapest remat policy and microbatch count whose estimated
    peak (exact state plus stage 1's activations, ``activation_bytes``) fits, in the order no remat, the dots
    policies, full remat, then full remat with 2, 4, 8, 16 microbatches (each costs compute or collectives; the
    first that fits is the fastest that fits). Where nothing fits, or the model exposes no such option, or this
    is the user's own layout: the layout as it is."""
    options = dict(layout.model.options)
    remat_option = next((n for n in REMAT_OPTIONS if n in options), None)
    micro_option = next((n for n in MICROBATCH_OPTIONS if n in options), None)
    here_remat = options.get(remat_option) if remat_option else None
    here_micro = int(options.get(micro_option, 1)) if micro_option else 1
    plain = [(layout, here_remat, here_micro)]
    if own or (remat_option is None and micro_option is None):
        return plain
    hbm = limit_bytes(target) * FITS_MARGIN
    state = report.totals.state_bytes
    batch = _batch_split(report, roles)
    ladder = [(r, 1) for r in (REMAT_OPTIONS[remat_option] if remat_option else (None,))]
    if micro_option and int(options.get("pipeline_stages", 1)) == 1:  # a pipeline's batch is its own microbatches' to split
        ladder += [(ladder[-1][0], m) for m in MICROBATCH_CHOICES[1:] if batch[0] % (m * batch[1]) == 0]
    for remat, micro in ladder:
        if state + activation_bytes(report, roles, remat_cost(remat), micro) <= hbm:
            if (remat, micro) == (here_remat or ("none" if remat_option else None), here_micro):
                return plain  # what the layout already has (a candidate that fits without remat gets none, not yours)
            data = layout.to_dict()
            data["name"] = layout.name + (f"+remat_{remat}" if remat not in (None, "none") else "") + (f"+mb{micro}" if micro > 1 else "")
            if remat_option:
                data["model"]["options"][remat_option] = remat
            if micro_option:
                data["model"]["options"][micro_option] = micro
            return [(parse_layout(data), remat, micro)]
    return plain


def _batch_split(report: Report, roles: dict[str, str]) -> tuple[int, int]:
    """The largest input's batch size and the number of shards its batch dimension(s) are split into."""
    best = (1, 1)
    mesh = dict(zip(report.layout.mesh.axes, report.layout.mesh.shape))
    for a in report.arrays:
        if a.kind != "input" or not a.logical_axes:
            continue
        for size, name, entry in zip(a.shape, a.logical_axes, a.spec):
            if isinstance(name, str) and roles.get(name) in ("batch", "batch_no_expert"):
                split = 1
                for axis in spec_axes(entry):
                    split *= mesh.get(axis, 1)
                best = max(best, (size, split))
    return best


def _errors(report: Report) -> list[Finding]:
    """The findings that mean JAX would refuse the layout."""
    return [w for w in report.warnings if w.code in ERROR_CODES]


# --- stage 2 ---------------------------------------------------------------------------------------


def stage2(
    search: Search,
    compiles: int = 4,
    on_progress: Callable[[str, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    shortcut: bool | None = None,
    depth_option: str | None = None,
    full_compiles: int = 2,
    session: str = "local",
) -> Search:
    """Compile up to ``compiles`` shortlisted candidates and the user's own layout; XLA's figures replace the estimate.

    The first is stage 1's best; each next one the best by the estimate calibrated on what XLA said
    so far (``next_to_compile``); then the user's own layout, where the shortlist's turns did not reach it.

    ``shortcut`` (the depth shortcut): compile each at two small depths (``SHORTCUT_DEPTHS``) and
    extrapolate to the model's depth (``extrapolate``, labelled ``extrapolated``), then compile the
    best-ranked in full (up to ``full_compiles`` times, while the top row is extrapolated) and keep
    both figures and their ratio. None: on where it saves time, for a model with a depth option
    whose layers are not scanned (a scanned model compiles in about the same time at any depth,
    measured in docs/advisor.md). ``depth_option`` names the model's depth option when no known name is.
    Stop (``should_stop()`` True) kills the running compile and keeps what was compiled.

    Compiles run in the server's pool (``compile_pool.POOL``, as ``session``): with N workers each round compiles the
    next N picks together (``_round``), and the own layout joins the last round where there is room.
    """
    start = time.perf_counter() - search.elapsed_s
    budget = max(compiles, 0)
    own = next((c for c in search.candidates if c.own), None)
    total = min(budget, len(shortlist(search))) + int(own is not None and budget > 0)  # at most: the own layout may be among the picks
    first = next(iter(shortlist(search)), own)
    progress = on_progress or (lambda *_: None)
    depth = None
    if first is not None and budget > 0 and (shortcut or shortcut is None):
        depth = search.depth = depth_plan(search, first.layout, shortcut, depth_option)
    use = depth is not None and depth.usable
    tried: set[str] = set()
    left, own_turn, number = budget, budget > 0, 0
    try:
        while True:
            picks = _round(search, tried, POOL.workers, left)
            left -= len(picks)
            if own_turn and (left == 0 or not picks) and len(picks) < POOL.workers:  # the own layout, where the picks did not reach it
                own_turn = False
                picks += [c for c in search.candidates if c.own and c.layout.name not in tried]
            if not picks:
                break
            tried.update(c.layout.name for c in picks)
            names = ", ".join(c.layout.name for c in picks)
            numbers = f"{number + 1}" if len(picks) == 1 else f"{number + 1}-{number + len(picks)}"
            number += len(picks)
            search.stage = f"stage 2: compiling {numbers} of at most {total} ({names})"
            layouts = [at_depth(c.layout, depth, layers) for c in picks for layers in SHORTCUT_DEPTHS] if use else [c.layout for c in picks]
            if use:
                search.stage += f" at depths {' and '.join(map(str, SHORTCUT_DEPTHS))}"
            found = _compile(search, layouts, progress, should_stop, session)
            width = len(SHORTCUT_DEPTHS) if use else 1
            for index, candidate in enumerate(picks):
                results = found[index * width : (index + 1) * width]
                if None in results:
                    continue
                results, places = [r for r, _ in results], sorted({p for _, p in results})
                if use:
                    result = extrapolate(results[0], results[1], SHORTCUT_DEPTHS, depth.full, search.target, depth.options)
                    _replace(search, candidate, verified(candidate, result, extrapolated=True, compiled_on=", ".join(places)))
                else:
                    _replace(search, candidate, verified(candidate, results[0], compiled_on=places[0]))
            recalibrate(search)
            search.elapsed_s = time.perf_counter() - start
            for candidate in picks:  # what each compile of the round said of stage 1's estimate
                said = agreement_line(next((c for c in search.candidates if c.layout.name == candidate.layout.name), None))
                if said:
                    progress(f"{search.stage}: {candidate.layout.name}: {said}", search.elapsed_s)
            if search.stopped:
                raise Stopped
        for number in range(1, full_compiles + 1 if use else 1):
            top = next(iter(search.ranked()), None)
            if top is None or not top.extrapolated:
                break
            search.stage = (
                f"stage 2: compiling the best extrapolated candidate in full ({top.layout.name}, {number} of at most {full_compiles})"
            )
            (found,) = _compile(search, [top.layout], progress, should_stop, session)
            if search.stopped:
                raise Stopped
            if found is None:
                break
            search.full_compiles += 1
            _replace(search, top, dataclasses.replace(verified(top, found[0], compiled_on=found[1]), extrapolation=top.compiled))
            search.elapsed_s = time.perf_counter() - start
    except Stopped:
        search.stopped = True
    search.stage = "stopped" if search.stopped else "done"
    search.elapsed_s = time.perf_counter() - start
    return search


def _round(search: Search, tried: set[str], workers: int, left: int) -> list[Candidate]:
    """The next candidates to compile together: up to ``workers`` (and ``left``), each the best by the estimate calibrated
    on what was compiled before this round (``next_to_compile``); with one worker, one at a time as the search was first
    written. A round's picks do not see each other's results: with N workers the Nth pick is chosen as the sequential
    search would have chosen it without the N-1 results before it."""
    picks: list[Candidate] = []
    while len(picks) < min(workers, left):
        candidate = next_to_compile(search, tried | {c.layout.name for c in picks})
        if candidate is None:
            break
        picks.append(candidate)
    return picks


def depth_plan(search: Search, layout: Layout, shortcut: bool | None = None, depth_option: str | None = None) -> Depth:
    """The depth shortcut for ``layout``: its depth option(s), or why not. Automatic (``shortcut`` None): not for a
    model the trace shows scanned over its layers (``search.scanned``, whatever its option is called)."""
    depth = depth_of(layout, depth_option)
    if shortcut is None and depth.usable and search.scanned:
        return Depth(
            why="the model's layers are scanned (read from the trace): a compile takes about as long at any "
            "depth, so each candidate is compiled in full"
        )
    return depth


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


def _compile(
    search: Search,
    layouts: list[Layout],
    progress: Callable[[str, float], None],
    should_stop: Callable[[], bool] | None,
    session: str,
) -> list[tuple[TargetCompile, str] | None]:
    """Compile ``layouts`` for the search's target together in the server's pool (``compile_pool.POOL``: its child
    processes or cluster, the disk cache, Stop), each as (result, where it was compiled) or None when XLA refused it
    (noted in ``failures``) or it was stopped (``search.stopped`` set)."""
    started = time.perf_counter()
    ahead: list[int | None] = [None]  # the pool reports the queue (on_wait) then what runs (on_progress), each tick

    def on_wait(before: int, running: int) -> None:
        ahead[0] = before

    def on_progress(jobs) -> None:
        # One line: what each running compile is doing, and whether the rest wait (issue 55: the waiting line and the
        # stage alternated every second, then nothing for minutes inside a compile). The time beside it is the
        # round's (since the first of them started), so the line itself changes only when something happens.
        since = min((j.started for j in jobs), default=None)
        elapsed = time.monotonic() - since if since is not None else time.perf_counter() - started
        progress(f"{search.stage} · {jobs_text(jobs, ahead[0])}", elapsed)
        ahead[0] = None

    found: list[tuple[TargetCompile, str] | None] = []
    for outcome in POOL.compile_many(session, [(l, search.target) for l in layouts], on_wait, on_progress, should_stop):
        if outcome.stopped:
            search.stopped = True
            found.append(None)
        elif outcome.error is not None:
            search.failures.append(f"{outcome.layout.name}: {outcome.error}")
            found.append(None)
        else:
            search.compiles += 1
            search.cached_compiles += int(outcome.cached)
            found.append((outcome.result, outcome.compiled_on))
    return found


def _replace(search: Search, old: Candidate, new: Candidate) -> None:
    """Put ``new`` in ``old``'s place among the search's candidates (``Candidate`` is frozen)."""
    search.candidates[search.candidates.index(old)] = new


def verified(candidate: Candidate, result: TargetCompile, extrapolated: bool = False, compiled_on: str | None = None) -> Candidate:
    """The candidate with XLA's figures from a ``compile_target`` result (or one ``extrapolate`` made), and where it was
    compiled (``compile_pool.Outcome.compiled_on``)."""
    largest = max(result.collectives, key=lambda c: (c.seconds, c.op), default=None)
    text = (
        (f"{largest.op} over {'x'.join(largest.mesh_axes) or '-'}: {largest.count}x, ≥ {human_seconds(largest.seconds)}")
        if largest and largest.seconds
        else "none"
    )
    return dataclasses.replace(
        candidate,
        verified=True,
        extrapolated=extrapolated,
        fits=bool(result.fits),
        peak_bytes=int(result.judged_peak_bytes),
        headroom_bytes=int(result.headroom_bytes),
        compiled=result,
        largest_collective=text + (" (extrapolated)" if extrapolated else ""),
        compiled_on=compiled_on,
    )


def advise(
    layout: Layout,
    target: Target | str,
    compiles: int = 4,
    roles: dict[str, str] | None = None,
    on_progress: Callable[[str, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    shortcut: bool | None = None,
    depth_option: str | None = None,
    session: str = "local",
    pipelines: bool | None = None,
) -> Search:
    """Both stages (``pipelines``: whether pipelines are searched, ``space.candidate_layouts``; None: on several slices).
    Example: ``advise(load_layout_file("layouts/seed-2x4.json"), "v5litepod-8", compiles=2)``."""
    search = stage1(layout, target, roles, pipelines=pipelines)
    if on_progress:
        on_progress(f"stage 1: {len(search.candidates)} candidates analysed, {search.refused} refused", search.stage1_s)
    return stage2(search, compiles, on_progress, should_stop, shortcut=shortcut, depth_option=depth_option, session=session)
