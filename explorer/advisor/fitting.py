"""Memory: the settings that make a layout fit, and the search where nothing compiled fits.

This module's one job is fitting a model in memory:

- **Stage 1** (``memory_variants``): each mesh's candidate carries the cheapest remat policy and microbatch count whose
  estimated peak fits (``estimated_peak``: the exact state, the gradients, stage 1's activations).
- **Stage 2, when no compiled layout fits** (``memory_search``): from the compiled layout closest to fitting, change
  what holds its memory, in the order where the memory goes says pays most (``where_memory_goes``, then ``LEVERS``):
  for the state, FSDP over every device; for what the step keeps beside it, a stronger remat policy, more
  microbatches, the sequence split over devices, then a smaller batch (a change to the user's training, named so).
  Levers are stacked until the estimate, calibrated on XLA's peaks so far (``memory_factor``), says the layout fits;
  that one is compiled, and so on until one fits or the compiles run out. Once one fits, the next lighter setting the
  calibrated estimate says fits is compiled too (``lighter``): the fastest fitting setting, not just any.
- **Where still nothing fits** (``larger_slices``): the smallest slice of the target's generation where the best
  layout fits, compiled there.

``where_memory_goes`` is the one place the order is read from: for a compiled layout, its peak buffer by buffer
(``compile.memory_breakdown``: parameters, optimizer state and inputs against gradients, saved activations and
temporaries), stage 1's estimate before a compile. The memory view's levers (``advisor.levers``: one layout's largest
contributors, each with the change that shrinks it) read the same breakdown and the same options (``REMAT_OPTIONS``,
``MICROBATCH_OPTIONS``, ``BATCH_OPTIONS`` here).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from explorer.advisor.calibration import calibrated_prediction, calibration
from explorer.advisor.candidates import Candidate, Elsewhere, Search, estimated_peak, limit_bytes, memory_factor
from explorer.advisor.estimate import REMAT_POLICIES, activation_bytes, gradient_bytes
from explorer.advisor.space import REMAT_ALIASES
from explorer.analysis.report import Report
from explorer.errors import ExplorerError
from explorer.formats import human_bytes
from explorer.hardware.targets import Target, parse_target, slice_shape, slices
from explorer.layout import Layout, parse_layout
from explorer.specs import spec_axes

REMAT_OPTIONS = {"remat": dict(zip(REMAT_POLICIES, REMAT_POLICIES)), **REMAT_ALIASES}  # option -> {value tried: policy costed}
MICROBATCH_OPTIONS = ("microbatches",)  # gradient accumulation steps (explorer.compile.train_step reads it)
MICROBATCH_CHOICES = (1, 2, 4, 8, 16)
BATCH_OPTIONS = ("batch", "per_device_batch_size")  # the training's batch: the built-in models', MaxText's (per device)
FITS_MARGIN = 0.9  # an estimated peak above this share of the memory limit is not taken as fitting
LIGHTER_GAIN = 0.95  # a lighter setting is compiled where its calibrated estimate is at least 5% faster
# the kinds of the peak's buffers (``memory_breakdown.KINDS``) that the state's sharding shrinks; the rest is beside it
STATE_KINDS = ("parameter", "optimizer state", "input", "argument")
LARGER_SLICES = 2  # larger slices of the target's generation tried, smallest first, where nothing fits on the target


def remat_cost(value: str | None) -> str:
    """The policy stage 1 costs a remat option's value as (``estimate.REMAT_POLICIES``; an unknown one as none)."""
    return next((table[value] for table in REMAT_OPTIONS.values() if value in table), "none")


def settings(layout: Layout) -> tuple[str | None, str | None, str | None]:
    """The layout's model options that hold its memory settings: its remat option, microbatch option and batch option
    (None where the model has none)."""
    options = layout.model.options
    return (
        next((n for n in REMAT_OPTIONS if n in options), None),
        next((n for n in MICROBATCH_OPTIONS if n in options), None),
        next((n for n in BATCH_OPTIONS if n in options), None),
    )


def memory_variants(
    layout: Layout, report: Report, roles: dict[str, str], target: Target, own: bool, factor: float = 1.0
) -> list[tuple[Layout, str | None, int]]:
    """Memory as a search dimension: the layout with the cheapest remat policy and microbatch count whose estimated
    peak (the exact state, the gradients and stage 1's activations scaled by ``factor``: ``estimated_peak``) fits, in
    the order no remat, the dots policies, full remat, then full remat with 2, 4, 8, 16 microbatches (each costs
    compute or collectives; the first that fits is the fastest that fits); where none fits, the one closest to fitting
    (the least estimated peak: the memory search and a larger slice start from it). Where the model exposes no such
    option, or this is the user's own layout: the layout as it is."""
    remat_option, micro_option, _ = settings(layout)
    options = dict(layout.model.options)
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
    here = (here_remat or ("none" if remat_option else None), here_micro)
    peaks = {}
    for remat, micro in ladder:
        peaks[remat, micro] = state + factor * (gradient_bytes(report, micro) + activation_bytes(report, roles, remat_cost(remat), micro))
        if peaks[remat, micro] <= hbm:
            break
    remat, micro = next((rung for rung, peak in peaks.items() if peak <= hbm), min(peaks, key=peaks.get))  # else the closest
    if (remat, micro) == here:
        return plain  # what the layout already has (a candidate that fits without remat gets none, not yours)
    return [(with_settings(layout, remat=remat, microbatches=micro), remat, micro)]


def with_settings(layout: Layout, remat: str | None = None, microbatches: int | None = None, batch=None) -> Layout:
    """The layout with these memory settings in its model's options (None: as it is), named after its mesh and them:
    ``fsdp8+remat_full+mb4``, ``+batch8`` where the batch was made smaller."""
    remat_option, micro_option, batch_option = settings(layout)
    data = layout.to_dict()
    options = data["model"]["options"]
    if remat_option and remat is not None:
        options[remat_option] = remat
    if micro_option and microbatches is not None:
        options[micro_option] = microbatches
    if batch_option and batch is not None:
        options[batch_option] = batch
    base = layout.name.split("+")[0]
    parts = [base]
    if remat_option and options[remat_option] not in (None, "none"):
        parts.append(f"remat_{options[remat_option]}")
    if micro_option and int(options[micro_option]) > 1:
        parts.append(f"mb{options[micro_option]}")
    if "+batch" in layout.name or batch is not None:
        parts.append(f"batch{options[batch_option]}")
    data["name"] = "+".join(parts)
    return parse_layout(data)


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


# --- where the memory goes, and what shrinks it --------------------------------------------------------------


def where_memory_goes(c: Candidate) -> dict[str, int]:
    """A candidate's peak by what holds it, largest first: ``state`` (parameters, optimizer state and inputs: what
    sharding them over more devices shrinks) and ``beside`` (what the step keeps beside the state: gradients, the
    activations saved for the backward pass, temporaries: what remat, microbatches, a sequence split and a smaller
    batch shrink). Where compiled, XLA's: the peak's buffers by kind (``compile.memory_breakdown``, the memory view's
    figures), else its arguments against the rest of its peak; before a compile, stage 1's (the exact state; its
    estimate of the gradients and activations). The memory search reads its order here and only here."""
    breakdown = c.compiled.memory_breakdown if c.verified and c.compiled is not None else None
    if breakdown is not None:
        state = sum(breakdown.kind_bytes(kind) for kind in STATE_KINDS)
        found = {"state": state, "beside": breakdown.peak_bytes - state}
    elif c.verified and c.compiled is not None and c.peak_bytes is not None:
        state = c.compiled.memory.argument_bytes or c.state_bytes
        found = {"state": state, "beside": max(c.peak_bytes - state, 0)}
    else:
        found = {"state": c.state_bytes, "beside": c.gradient_bytes + c.activation_bytes}
    return dict(sorted(found.items(), key=lambda item: -item[1]))


@dataclasses.dataclass(frozen=True)
class Step:
    """One change a lever makes: the layout it gives and the change in words (for a smaller batch, a change to the
    training, said as such)."""

    layout: Layout
    change: str = ""


def stronger_remat(layout: Layout, search: Search) -> Step | None:
    """The next remat policy that keeps fewer activations (none, the dots policies, full), where the model has one."""
    option = settings(layout)[0]
    if option is None:
        return None
    ladder = list(REMAT_OPTIONS[option])
    here = layout.model.options.get(option)
    if here not in ladder or here == ladder[-1]:
        return None
    return Step(with_settings(layout, remat=ladder[ladder.index(here) + 1]))


def more_microbatches(layout: Layout, search: Search) -> Step | None:
    """Twice the gradient accumulation steps (one microbatch's activations alive at a time), up to the largest tried;
    the analysis refuses a count whose microbatch the mesh cannot split."""
    option = settings(layout)[1]
    if option is None or int(layout.model.options.get("pipeline_stages", 1)) > 1:
        return None
    here = int(layout.model.options.get(option, 1))
    return Step(with_settings(layout, microbatches=here * 2)) if here * 2 <= MICROBATCH_CHOICES[-1] else None


def split_sequence(layout: Layout, search: Search) -> Step | None:
    """Half of the mesh's FSDP (else data) axis moved to its sequence axis, where the model has one: the sequence is
    split over devices, so each keeps the attention of fewer queries. A mesh stage 1 built, with this layout's settings."""
    return _moved(layout, search, "sequence")


def split_tensor(layout: Layout, search: Search) -> Step | None:
    """Half of the mesh's FSDP (else data) axis moved to its tensor axis: the weights split without being gathered
    (Megatron), and each device keeps its share of the heads' and the MLP's activations. A mesh stage 1 built, with
    this layout's settings."""
    return _moved(layout, search, "tensor")


def _moved(layout: Layout, search: Search, to: str) -> Step | None:
    """The layout on the mesh with half its FSDP (else data) axis moved to ``to``, where stage 1 built that mesh."""
    sizes = _sizes(layout)
    axis = next((a for a in ("fsdp", "data") if sizes.get(a, 1) % 2 == 0), None)
    if axis is None:
        return None
    moved = {a: s for a, s in {**sizes, axis: sizes[axis] // 2, to: sizes.get(to, 1) * 2}.items() if s > 1}
    return _remeshed(layout, search, moved) if _has_mesh(search, moved) else None


def fsdp_everywhere(layout: Layout, search: Search) -> Step | None:
    """Every device on the FSDP axis (ZeRO-3 over the whole slice: the parameters, their gradients and optimizer state
    split over every device), with this layout's settings."""
    devices = search.target.devices
    if _sizes(layout) == {"fsdp": devices} or not _has_mesh(search, {"fsdp": devices}):
        return None
    return _remeshed(layout, search, {"fsdp": devices})


def smaller_batch(layout: Layout, search: Search) -> Step | None:
    """Half the batch: a change to the training itself (fewer sequences per step), not only to its layout, said so."""
    option = settings(layout)[2]
    if option is None:
        return None
    here = layout.model.options[option]
    try:
        value = float(here)
    except (TypeError, ValueError):
        return None
    if value < 2 or value % 2:
        return None
    half = int(value) // 2
    smaller = half if isinstance(here, int) else str(half)
    what = "sequences per step" if option == "batch" else "sequences per device"
    return Step(with_settings(layout, batch=smaller), f"{option} {here} → {smaller} {what}: a change to your training, not only its layout")


# Per kind of memory (``where_memory_goes``), the levers that shrink it, in the order tried.
LEVERS: dict[str, tuple[Callable[[Layout, Search], Step | None], ...]] = {
    "state": (fsdp_everywhere,),
    "beside": (stronger_remat, more_microbatches, split_tensor, split_sequence, smaller_batch),
}


def _sizes(layout: Layout) -> dict[str, int]:
    """The mesh's axes of more than one device, by name."""
    return {a: s for a, s in zip(layout.mesh.axes, layout.mesh.shape) if s > 1}


def _has_mesh(search: Search, sizes: dict[str, int]) -> bool:
    return any(_sizes(c.layout) == sizes for c in search.candidates if not c.own)


def _remeshed(layout: Layout, search: Search, sizes: dict[str, int]) -> Step | None:
    """The layout on another mesh stage 1 built: its mesh, rules and model options (a MaxText config's options hold the
    parallelism keys that make its mesh), with this layout's memory settings (``settings``: remat, microbatches, batch),
    named after both."""
    other = next((c.layout for c in search.candidates if not c.own and _sizes(c.layout) == sizes), None)
    if other is None:
        return None
    data = other.to_dict()
    data["model"]["options"].update({n: layout.model.options[n] for n in settings(layout) if n is not None})
    data["name"] = other.name.split("+")[0] + ("+batch" if "+batch" in layout.name else "")
    return Step(with_settings(parse_layout(data)))  # named after the mesh and the settings it keeps


# --- the memory search ---------------------------------------------------------------------------------------


def next_step(search: Search, base: Candidate, analyzed: Callable[[Layout, str], Candidate | None]) -> tuple[Candidate, list[str]] | None:
    """From ``base`` (over the limit), the levers in the order ``where_memory_goes`` says, each applied as often as it
    goes and stacked, until stage 1's estimate calibrated on XLA's peaks (``memory_factor``) fits a layout not compiled
    yet: that candidate and the changes made, in words. Where no stack fits by that estimate: from a compiled ``base``,
    None (no compile is spent on a change that cannot make it fit: a smaller batch does not shrink the gradients); from
    one not compiled yet (nothing to calibrate on), the stack with the least estimated peak that keeps the training as
    it is (no smaller batch), whose compile says how far the estimate is (None: compile ``base`` itself). ``analyzed`` is stage 1 of one layout (None: refused)."""
    limit = search.limit_bytes * FITS_MARGIN
    compiled = {c.layout.name for c in search.candidates if c.verified}
    current, changes = base, []
    least = (estimated_peak(base, memory_factor(search, base)), base, [])
    for kind in where_memory_goes(base):
        for lever in LEVERS[kind]:
            while True:
                try:  # a change the model's options refuse (microbatches that no longer divide a smaller batch)
                    step = lever(current.layout, search)
                except ExplorerError:
                    step = None
                candidate = None if step is None else analyzed(step.layout, step.change or current.change)
                if candidate is None:
                    break
                current = candidate
                changes.append(f"{lever.__name__.replace('_', ' ')} ({step.layout.name})")
                peak = estimated_peak(candidate, memory_factor(search, candidate))
                if candidate.layout.name not in compiled and peak <= limit:
                    return candidate, changes
                if candidate.layout.name not in compiled and not candidate.change and peak < least[0]:  # a probe keeps the training
                    least = (peak, candidate, list(changes))
    return None if base.verified or least[1] is base else (least[1], least[2])


def memory_search(
    search: Search,
    analyzed: Callable[[Layout, str], Candidate | None],
    compiled: Callable[[Candidate], Candidate | None],
    budget: int,
) -> int:
    """Nothing compiled fits: from the compiled layout closest to fitting, the next stack of levers (``next_step``)
    compiled, again from the closest, until one fits or ``budget`` compiles are spent; then, once one fits, the lightest
    setting the calibrated estimate says fits too (``lighter``). Each step is said in ``search.memory_steps``.
    ``compiled`` compiles a candidate for the target (its verified copy put in the search; None: stopped or failed).
    The number of compiles spent."""
    seen: dict[str, Candidate | None] = {}

    def once(layout: Layout, change: str) -> Candidate | None:  # stage 1 of each layout once
        if layout.name not in seen:
            seen[layout.name] = analyzed(layout, change)
        return seen[layout.name]

    spent = 0
    while spent < budget and not any(c.fits and c.verified for c in search.candidates):
        base = _start(search)
        if base is None:
            break
        found = next_step(search, base, once)
        if found is None and base.verified:
            said = (
                f"from {base.layout.name}, no change tried makes it fit by the estimate calibrated on XLA's peaks "
                "(remat, microbatches, the tensor and sequence splits, a smaller batch, FSDP over every device, as the model has them)"
            )
            if said not in search.memory_steps:  # the search runs again after the rounds: said once
                search.memory_steps.append(said)
            break
        candidate, changes = found or (base, [])
        goes = ", ".join(f"{kind} {human_bytes(size)}" for kind, size in where_memory_goes(base).items())
        result = compiled(candidate)
        spent += 1
        if result is None:
            break
        peak = f"XLA's peak {human_bytes(base.peak_bytes)}" if base.verified else "stage 1's estimate"
        search.memory_steps.append(
            f"{base.layout.name} ({peak}: {goes})"
            + (f" → {'; '.join(changes)}" if changes else " compiled")
            + (f": XLA's peak {human_bytes(result.peak_bytes)}, " if result.peak_bytes is not None else ": ")
            + ("fits" if result.fits else "does not fit")
        )
    if spent < budget and any(c.fits and c.verified for c in search.candidates):
        spent += lighter(search, once, compiled)
    return spent


def _start(search: Search) -> Candidate | None:
    """Where the memory search starts: the compiled layout closest to fitting; before any compile (every estimate
    clearly over, so nothing was shortlisted), the one whose state fits with the least estimated peak."""
    closest = search.closest()
    if closest is not None and closest.verified:
        return closest
    pool = [c for c in search.candidates if not c.verified and c.state_bytes <= search.limit_bytes]
    return min(pool, key=lambda c: (estimated_peak(c), c.layout.name), default=None)


def lighter(search: Search, analyzed: Callable[[Layout, str], Candidate | None], compiled: Callable[[Candidate], Candidate | None]) -> int:
    """Once a layout fits (the advice, but the user's own), the fastest lighter setting of it (fewer microbatches, a remat
    policy that keeps more) that the estimate calibrated on XLA's peaks says fits too, compiled: stage 1 and the memory
    search choose the first setting the estimate says fits, and a lighter setting is faster (compiled where estimated ``LIGHTER_GAIN`` of the
    step or less). The compiles spent (0 or 1)."""
    best = search.advice()
    if best is None or best.own:
        return 0
    remat_option, micro_option, _ = settings(best.layout)
    options = best.layout.model.options
    micro = [int(options[micro_option])] if micro_option else [None]
    while micro[-1] and micro[-1] > 1:
        micro.append(micro[-1] // 2)
    ladder = list(REMAT_OPTIONS[remat_option]) if remat_option else []
    remats = ladder[: ladder.index(options[remat_option]) + 1] if options.get(remat_option) in ladder else [None]
    done = {c.layout.name for c in search.candidates if c.verified}
    limit = search.limit_bytes * FITS_MARGIN
    pool = []
    for m in micro:
        for r in remats:
            layout = with_settings(best.layout, remat=r, microbatches=m)
            if layout.name in done:
                continue
            candidate = analyzed(layout, best.change)
            if candidate is not None and estimated_peak(candidate, memory_factor(search, candidate)) <= limit:
                pool.append(candidate)
    factors = search.calibration or calibration(search)
    faster = [c for c in pool if calibrated_prediction(c, factors, search.target) <= LIGHTER_GAIN * best.predicted_s]
    if not faster:  # no lighter setting estimated to pay for its compile (a compile that fits takes minutes on a 7B)
        return 0
    pick = min(faster, key=lambda c: (calibrated_prediction(c, factors, search.target), c.microbatches, c.layout.name))
    result = compiled(pick)
    if result is not None:
        search.memory_steps.append(
            f"lighter than {best.layout.name}: {pick.layout.name}, XLA's peak {human_bytes(result.peak_bytes or 0)}, "
            + ("fits" if result.fits else "does not fit")
        )
    return 1


# --- larger slices -------------------------------------------------------------------------------------------


def larger_targets(target: Target, count: int = LARGER_SLICES) -> list[Target]:
    """The next ``count`` larger single slices of ``target``'s generation, smallest first (none for a GPU cluster or
    several slices: more hosts or slices are another plan)."""
    if target.is_gpu or target.multislice:
        return []
    chip = target.chip
    out = []
    for chips in slices(chip):
        if chips > target.chips and len(out) < count:
            out.append(parse_target(Target("", chip, slice_shape(chip, chips)).cloud_name))  # its Cloud TPU name (v5litepod-16)
    return out


def larger_slices(
    search: Search, stage1_on: Callable[[Target], Search], compiled_on: Callable[[Candidate, Target], Candidate | None]
) -> None:
    """Nothing fits on the target: on each larger slice of its generation (``larger_targets``), smallest first, stage 1
    over the same model, and its best candidate by the estimate calibrated on this search's compiles (step and memory)
    compiled there, until one fits (``search.elsewhere``)."""
    for target in larger_targets(search.target):
        other = stage1_on(target)
        limit = limit_bytes(target) * FITS_MARGIN
        planned = {c.layout.name: estimated_peak(c, memory_factor(search, c)) for c in other.candidates if not c.own}
        pool = [c for c in other.candidates if not c.own and planned[c.layout.name] <= limit]
        pool = pool or sorted((c for c in other.candidates if not c.own), key=lambda c: planned[c.layout.name])[:1]
        if not pool:
            continue
        pick = min(pool, key=lambda c: (calibrated_prediction(c, search.calibration or calibration(search), target), c.layout.name))
        result = compiled_on(pick, target)
        if result is None:
            return
        search.elsewhere.append(Elsewhere(target, result))
        if result.fits:
            return
