"""The search's stages: stage 1 over every candidate, stage 2 and its calibration, ``advise`` (both).

This module's one job is running the stages that fill a ``Search``; the record itself, the shortlist and the
ranking are ``explorer.advisor.candidates``', the calibration ``explorer.advisor.calibration``'s, what makes a layout
fit in memory ``explorer.advisor.fitting``'s, the race of the best three ``explorer.advisor.race``'s.

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
   Where no compiled layout fits, the memory search (``fitting.memory_search``) changes what holds the memory,
   compiling each step, and where still nothing fits, the smallest larger slice where it fits is compiled
   (``fitting.larger_slices``). The advice is always a layout XLA compiled in full for the target (``Search.advice``).

A ``Search`` is the record both stages write as they go; the best three can then be raced on this
process's own devices (``race.race_top``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from explorer.advisor.calibration import agreement_line, next_to_compile, recalibrate
from explorer.advisor.candidates import Candidate, Search, estimated_peak, limit_bytes, memory_factor, shortlist
from explorer.advisor.depth import SHORTCUT_DEPTHS, Depth, at_depth, depth_of, extrapolate
from explorer.advisor.estimate import STACK_NAMES, activation_bytes, active_params, gradient_bytes, report_roles, stage1_estimate
from explorer.advisor.fitting import FITS_MARGIN, larger_slices, memory_search, memory_variants, remat_cost
from explorer.advisor.space import candidate_layouts, chosen_roles, guessed_roles
from explorer.analysis.analyzer import analyze, model_for_layouts
from explorer.analysis.report import ERROR_CODES, Finding, Report
from explorer.compile.compile_pool import POOL, jobs_text
from explorer.compile.compile_result import TargetCompile
from explorer.compile.target_compile import Stopped
from explorer.errors import ExplorerError
from explorer.formats import human_seconds
from explorer.hardware.placement import mesh_links, prefetch
from explorer.hardware.targets import Target, parse_target
from explorer.layout import Layout
from explorer.reading import names_of

FIT_COMPILES = 4  # compiles the memory search may spend where no compiled layout fits (beside ``compiles``)


def stage1(
    layout: Layout,
    target: Target | str,
    roles: dict[str, str] | None = None,
    search: Search | None = None,
    pipelines: bool | None = None,
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
    search.layout, search.user_roles = layout, dict(roles or {})
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
            _refused(search, f"{candidate.name}: {error}")
            continue
        search.scanned = search.scanned or scanned(report)
        found = candidates_of(search, candidate, report, roles, own=own)
        if isinstance(found, str):
            _refused(search, found)
            continue
        search.candidates += found
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


def candidates_of(
    search: Search,
    layout: Layout,
    report: Report,
    roles: dict[str, str] | None,
    own: bool = False,
    factor: float = 1.0,
    vary: bool = True,
    change: str = "",
) -> list[Candidate] | str:
    """Stage 1 of one analysed layout: its candidate, with the memory settings that make it fit where it is generated
    and ``vary`` (``fitting.memory_variants``; ``factor`` scales stage 1's memory estimate; else its own settings),
    or why JAX would refuse it."""
    target = search.target
    errors = _errors(report)
    if errors:
        return f"{layout.name}: {errors[0].message}"
    try:
        links = mesh_links(target, layout.mesh.shape, layout.mesh.axes, layout.mesh.dcn)
    except ExplorerError as error:  # several slices: a split of the mesh over them that they cannot hold
        return f"{layout.name}: {error}"
    state = report.totals.state_bytes
    chosen = report_roles(report, roles)
    active = active_params(report, chosen)
    found = []
    for variant, remat, microbatches in memory_variants(layout, report, chosen, target, own or not vary, factor):
        estimate, largest, by_axis, collectives = stage1_estimate(report, target, roles, remat_cost(remat), microbatches, links)
        found.append(
            Candidate(
                variant,
                state,
                estimate,
                largest,
                own=own,
                fits=state <= limit_bytes(target),
                collective_by_axis=by_axis,
                active_params=active,
                remat=remat,
                microbatches=microbatches,
                activation_bytes=activation_bytes(report, chosen, remat_cost(remat), microbatches),
                gradient_bytes=gradient_bytes(report, microbatches),
                links=links,
                collectives=collectives,
                change=change,
            )
        )
    return found


def analyzed(search: Search, layout: Layout, change: str = "") -> Candidate | None:
    """Stage 1 of one layout the memory search made (its own analysis: its model options differ), with its settings
    as they are; None where JAX would refuse it (counted as refused)."""
    try:
        found = candidates_of(search, layout, analyze(layout), search.user_roles or None, vary=False, change=change)
    except ExplorerError as error:
        found = f"{layout.name}: {error}"
    if isinstance(found, str):
        _refused(search, found)
        return None
    return found[0]


def _refused(search: Search, why: str) -> None:
    search.refused += 1
    if len(search.refused_examples) < 5:
        search.refused_examples.append(why)


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
    fit_compiles: int = FIT_COMPILES,
    larger: bool = True,
) -> Search:
    """Compile up to ``compiles`` shortlisted candidates and the user's own layout; XLA's figures replace the estimate.

    The first is stage 1's best; each next one the best by the estimate calibrated on what XLA said
    so far (``next_to_compile``); then the user's own layout, where the shortlist's turns did not reach it.

    ``shortcut`` (the depth shortcut): compile each at two small depths (``SHORTCUT_DEPTHS``) and
    extrapolate to the model's depth (``extrapolate``, labelled ``extrapolated``), then compile the
    best-ranked in full (up to ``full_compiles`` times, while no layout compiled in full fits) and keep
    both figures and their ratio. None: on where it saves time, for a model with a depth option
    whose layers are not scanned (a scanned model compiles in about the same time at any depth,
    measured in docs/advisor.md). ``depth_option`` names the model's depth option when no known name is.
    Stop (``should_stop()`` True) kills the running compile and keeps what was compiled.

    Where no compiled layout fits, the memory search (``fitting.memory_search``, up to ``fit_compiles`` compiles)
    changes what holds the memory; where still none fits in full, the smallest larger slice of the target's
    generation where the best layout fits is compiled there (``fitting.larger_slices``; ``larger`` False: not).

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
    run = _Run(search, progress, should_stop, session, depth if depth is not None and depth.usable else None, start)
    tried: set[str] = set()
    left, own_turn, number = budget, budget > 0, 0
    try:
        while True:
            picks = _round(search, tried, POOL.workers, left)
            left -= len(picks)
            if own_turn and (left == 0 or not picks) and len(picks) < POOL.workers:  # the own layout, where the picks did not reach it
                own_turn = False
                # its state alone over the limit: XLA's peak is over it too, so no compile is spent to say so
                picks += [c for c in search.candidates if c.own and c.layout.name not in tried and c.state_bytes <= search.limit_bytes]
            if not picks:
                break
            tried.update(c.layout.name for c in picks)
            names = ", ".join(c.layout.name for c in picks)
            numbers = f"{number + 1}" if len(picks) == 1 else f"{number + 1}-{number + len(picks)}"
            number += len(picks)
            run.compile(picks, f"stage 2: compiling {numbers} of at most {total} ({names})")
        if budget > 0 and fit_compiles > 0:  # nothing compiled fits: what holds the memory; else a lighter setting of the best
            run.memory_search(fit_compiles)
        run.in_full(full_compiles)
        if budget > 0 and larger and search.advice() is None:
            larger_slices(search, run.stage1_on, run.compiled_on)
            if search.stopped:
                raise Stopped
    except Stopped:
        search.stopped = True
    if search.depth is not None and search.depth.usable and not any(c.extrapolated or c.extrapolation for c in search.candidates):
        search.depth = None  # planned, but no candidate was estimated to fit clearly enough for it (``shortcut_pays``)
    search.stage = "stopped" if search.stopped else "done"
    search.elapsed_s = time.perf_counter() - start
    return search


class _Run:
    """One stage 2's compiles: through the server's pool, at the two small depths and extrapolated where the depth
    shortcut is used (``depth``), each result put in the search and the calibration redone, Stop raised as ``Stopped``."""

    def __init__(self, search: Search, progress, should_stop, session: str, depth: Depth | None, start: float) -> None:
        self.search, self.progress, self.should_stop, self.session, self.depth, self.start = (
            search,
            progress,
            should_stop,
            session,
            depth,
            start,
        )

    def compile(self, picks: list[Candidate], stage: str, shortcut: bool = True) -> None:
        """Compile ``picks`` together and put XLA's figures in: at the small depths where the shortcut is used and
        ``shortcut``, for the picks whose memory, as estimated and calibrated, clearly fits (``shortcut_pays``); the
        others in full (XLA refuses a program over the memory before its longest passes, while a small depth of the
        same layout fits and compiles to the end: 67 s against 319 s for a 7B layout on v5e-8)."""
        search = self.search
        small = [bool(shortcut and self.depth and shortcut_pays(search, c)) for c in picks]
        search.stage = stage + (f" at depths {' and '.join(map(str, SHORTCUT_DEPTHS))}" if any(small) else "")
        layouts = [
            layout
            for c, low in zip(picks, small)
            for layout in ([at_depth(c.layout, self.depth, layers) for layers in SHORTCUT_DEPTHS] if low else [c.layout])
        ]
        found = iter(_compile(search, layouts, self.progress, self.should_stop, self.session))
        for candidate, low in zip(picks, small):
            results = [next(found) for _ in (SHORTCUT_DEPTHS if low else (None,))]
            if None in results:
                continue
            results, places = [r for r, _ in results], sorted({p for _, p in results})
            if low:
                depth = self.depth
                result = extrapolate(results[0], results[1], SHORTCUT_DEPTHS, depth.full, search.target, depth.options)
                _replace(search, candidate, verified(candidate, result, extrapolated=True, compiled_on=", ".join(places)))
            else:
                _replace(search, candidate, verified(candidate, results[0], compiled_on=places[0]))
        recalibrate(search)
        search.elapsed_s = time.perf_counter() - self.start
        for candidate in picks:  # what each compile of the round said of stage 1's estimate
            said = agreement_line(next((c for c in search.candidates if c.layout.name == candidate.layout.name), None))
            if said:
                self.progress(f"{search.stage}: {candidate.layout.name}: {said}", search.elapsed_s)
        if search.stopped:
            raise Stopped

    def memory_search(self, budget: int) -> None:
        """The memory search (``fitting.memory_search``) where nothing compiled fits, then a lighter setting of the best
        one that fits: each compiled as the rounds are, in full."""
        search, spent = self.search, [0]

        def compiled(candidate: Candidate) -> Candidate | None:
            spent[0] += 1
            fits = any(c.fits and c.verified for c in search.candidates)
            same = next((c for c in search.candidates if c.layout.name == candidate.layout.name), None)
            if same is None:  # a layout stage 1 did not make (else its own row: the name is its mesh and settings)
                search.candidates.append(candidate)
            candidate = same or candidate
            # In full, never at the small depths: the question is whether it fits, which XLA answers soonest in full (it
            # refuses a program over the memory before its longest passes: 67 s against 319 s for the same 7B layout
            # at 2 layers, which fit there), and a full compile that fits is the advice.
            what = "a lighter setting of the best that fits" if fits else "nothing compiled fits; the memory search"
            stage = f"stage 2: {what}, {spent[0]} of at most {budget} ({candidate.layout.name})"
            self.compile([candidate], stage, shortcut=False)
            found = next(c for c in search.candidates if c.layout.name == candidate.layout.name)
            return found if found.verified else None

        memory_search(search, lambda layout, change: analyzed(search, layout, change), compiled, budget)
        if spent[0] >= budget and not any(c.fits and c.verified for c in search.candidates):
            search.unfinished = f"the memory search's {budget} compiles ran out"

    def in_full(self, attempts: int) -> None:
        """Where the depth shortcut was used: the best extrapolated candidate compiled in full, again while no layout
        compiled in full fits (``attempts`` at most), so that the advice is a full compile."""
        search = self.search
        for number in range(1, attempts + 1 if self.depth else 1):
            ranked, best = search.ranked(), search.advice()
            above = ranked[: ranked.index(best)] if best is not None else ranked  # what ranks above the advice, or all
            top = next((c for c in above if c.extrapolated and (c.fits or best is None)), None)
            if top is None:
                return
            search.stage = f"stage 2: compiling the best extrapolated candidate in full ({top.layout.name}, {number} of at most {attempts})"
            (found,) = _compile(search, [top.layout], self.progress, self.should_stop, self.session)
            if search.stopped:
                raise Stopped
            if found is None:
                return
            search.full_compiles += 1
            _replace(search, top, dataclasses.replace(verified(top, found[0], compiled_on=found[1]), extrapolation=top.compiled))
            recalibrate(search)
            search.elapsed_s = time.perf_counter() - self.start

    def stage1_on(self, target: Target) -> Search:
        """Stage 1 of the search's own layout on another slice (a larger one); ``fitting.larger_slices`` calibrates its
        memory estimates on this search's compiles, family by family."""
        search = self.search
        search.stage = f"stage 2: nothing fits on {search.target.name}; stage 1 on {target.name}"
        self.progress(search.stage, time.perf_counter() - self.start)
        return stage1(search.layout, target, search.user_roles or None)

    def compiled_on(self, candidate: Candidate, target: Target) -> Candidate | None:
        """``candidate`` compiled in full for ``target`` (another slice): its verified copy, or None (stopped, failed)."""
        search = self.search
        search.stage = f"stage 2: nothing fits on {search.target.name}; compiling {candidate.layout.name} for {target.name}, a larger slice"
        (found,) = _compile(search, [candidate.layout], self.progress, self.should_stop, self.session, target)
        search.elapsed_s = time.perf_counter() - self.start
        if search.stopped:
            raise Stopped
        return None if found is None else verified(candidate, found[0], compiled_on=found[1])


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


def shortcut_pays(search: Search, c: Candidate) -> bool:
    """Whether the depth shortcut pays for a candidate: its peak, estimated and calibrated on XLA's peaks of its family
    (``memory_factor``), clearly fits (``fitting.FITS_MARGIN`` of the limit). Else a full compile answers sooner."""
    return estimated_peak(c, memory_factor(search, c)) <= FITS_MARGIN * search.limit_bytes


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


def _compile(
    search: Search,
    layouts: list[Layout],
    progress: Callable[[str, float], None],
    should_stop: Callable[[], bool] | None,
    session: str,
    target: Target | None = None,
) -> list[tuple[TargetCompile, str] | None]:
    """Compile ``layouts`` for the search's target (or ``target``) together in the server's pool (``compile_pool.POOL``: its child
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
        if not jobs and ahead[0] is None:
            return  # between a compile's end and the round's: nothing runs or waits
        since = min((j.started for j in jobs), default=None)
        elapsed = time.monotonic() - since if since is not None else time.perf_counter() - started
        progress(f"{search.stage} · {jobs_text(jobs, ahead[0])}", elapsed)
        ahead[0] = None

    found: list[tuple[TargetCompile, str] | None] = []
    for outcome in POOL.compile_many(session, [(l, target or search.target) for l in layouts], on_wait, on_progress, should_stop):
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
