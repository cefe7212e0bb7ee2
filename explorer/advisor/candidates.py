"""A search's record and its order: ``Candidate`` (one layout's figures), ``Search`` (what both stages write), the
memory limit a candidate must fit, the shortlist and the ranking.

This module's one job is holding and ordering the candidates; ``search`` runs the stages that fill them
(stage 1's estimates, stage 2's compiles and calibration) and ``race`` races the best on this process's devices.
The shortlist is the candidates whose state fits the device's memory (``limit_bytes``: a TPU device's HBM,
JAX's share of a GPU's), best estimate first; ``rank`` puts XLA-verified candidates that fit first, by their
step bound, then stage 1's estimates that fit, then everything that does not fit, by how much.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from explorer.advisor.depth import Depth, extrapolation_error
from explorer.compile.compile_result import TargetCompile
from explorer.layout import Layout
from explorer.hardware.placement import AxisLink
from explorer.predict.roofline import Collective, Estimate
from explorer.hardware.targets import Target
from explorer.compile.xla_results import memory_limit


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout's figures. Stage 1 fills the estimate; stage 2 (``verified``) XLA's figures.

    ``state_bytes`` is exact (parameters, optimizer state, inputs per device, from the analysis).
    ``step_s``, ``bound`` and ``mfu_ceiling`` are stage 1's estimate until ``verified``, then the
    compiled program's roofline (a lower bound). ``peak_bytes`` is XLA's, only when verified.
    """

    layout: Layout
    state_bytes: int
    estimate: Estimate
    largest_collective: str
    own: bool = False  # the layout the user brought
    verified: bool = False
    extrapolated: bool = False
    fits: bool | None = None  # stage 1: the state fits the memory limit (``limit_bytes``); stage 2: XLA's verdict
    peak_bytes: int | None = None
    headroom_bytes: int | None = None
    compiled: TargetCompile | None = None  # compile_target's result, when verified (``extrapolate``'s, when extrapolated)
    extrapolation: TargetCompile | None = None  # the extrapolated result, kept when the candidate was then compiled in full
    collective_by_axis: dict[str, float] = dataclasses.field(default_factory=dict)  # stage 1's collective seconds per mesh axis
    active_params: int = 0  # the parameters each token runs through (a mixture of experts: top-k x capacity of the experts)
    remat: str | None = None  # the model's remat policy in this candidate (None: the model has no such option)
    microbatches: int = 1  # gradient accumulation steps
    activation_bytes: int = 0  # stage 1's estimate of the activations kept for the backward pass, per device
    gradient_bytes: int = 0  # stage 1's estimate of the gradients alive at the peak, per device (``estimate.gradient_bytes``)
    links: tuple[AxisLink, ...] = ()  # where each mesh axis lies on the target and what it rides (``explorer.hardware.placement``)
    collectives: tuple[tuple[str, Collective], ...] = ()  # stage 1's collectives, each with its label
    # Stage 1's prediction calibrated on what stage 2 compiled so far (``search.calibrated``; None before any compile).
    # Kept as it was when the candidate was compiled: the forecast its compiled prediction is checked against (``agreement``).
    calibrated_s: float | None = None
    compiled_on: str | None = None  # where stage 2 compiled it: "local", a Ray node's id, "cache" (``compile_pool.Outcome``)
    # What it changes beyond the mesh, the rules and the memory settings, in words (the memory search's smaller batch:
    # "batch 16 -> 8, a change to your training"); empty for the generated candidates
    change: str = ""

    @property
    def compiled_in_full(self) -> bool:
        """XLA compiled this layout for the target at the model's own depth (not extrapolated from smaller ones)."""
        return self.verified and not self.extrapolated

    def over(self, limit: int) -> int:
        """By how much it misses the memory ``limit``, as known: XLA's peak over it where compiled (negative: room
        left), else its exact state over it."""
        return -self.headroom_bytes if self.headroom_bytes is not None else self.state_bytes - limit

    @property
    def refused(self) -> bool:
        """XLA refused the program (E1000: it does not fit): its figures are not a step's and never calibrate."""
        return self.verified and self.compiled is not None and self.compiled.compiled is False

    @property
    def extrapolation_error(self) -> dict[str, float | None] | None:
        """Extrapolated over compiled in full, per figure, when both were made (1.0: exact)."""
        return extrapolation_error(self.extrapolation, self.compiled) if self.extrapolation and self.compiled else None

    @property
    def step_s(self) -> float:
        return self.compiled.estimate.step_s if self.verified and self.compiled.estimate else self.estimate.step_s

    @property
    def predicted_s(self) -> float:
        """The predicted step (``explorer.predict.step_model``): the compiled program's once verified, else stage 1's; what ranks."""
        estimate = self.compiled.estimate if self.verified and self.compiled and self.compiled.estimate else self.estimate
        return estimate.predicted_s if estimate.predicted_s is not None else estimate.step_s

    @property
    def ranked_s(self) -> float:
        """The one scale every candidate is ranked on: the compiled prediction once verified, else stage 1's prediction
        calibrated on the compiles so far (``calibrated_s``), else stage 1's own (an estimate)."""
        if self.verified or self.calibrated_s is None:
            return self.predicted_s
        return self.calibrated_s

    @property
    def agreement(self) -> dict[str, float | None] | None:
        """How stage 1 agreed with the compiled prediction, for a compiled candidate: stage 1's prediction, the calibrated
        one stage 2 held when it chose to compile it (None for the first compile: nothing to calibrate on), the compiled
        one, and compiled over each (1.0: exact)."""
        if not self.verified or self.extrapolated or self.refused or not self.compiled or not self.compiled.estimate:
            return None
        compiled, stage1 = self.predicted_s, self.estimate.predicted_s or self.estimate.step_s
        return {
            "stage1_predicted_s": stage1,
            "calibrated_predicted_s": self.calibrated_s,
            "compiled_predicted_s": compiled,
            "compiled_over_stage1": compiled / stage1 if stage1 else None,
            "compiled_over_calibrated": compiled / self.calibrated_s if self.calibrated_s else None,
        }

    @property
    def bound(self) -> str:
        return self.compiled.estimate.bound if self.verified and self.compiled.estimate else self.estimate.bound

    @property
    def mfu_ceiling(self) -> float:
        return self.compiled.estimate.mfu_ceiling if self.verified and self.compiled.estimate else self.estimate.mfu_ceiling


@dataclasses.dataclass
class Search:
    """A search's state: a mutable record that ``stage1`` and ``stage2`` fill as they run.

    Deliberately not frozen: the Advisor page keeps it in its session while the search runs and
    draws it after every step, so a search that is stopped still shows what was compiled.
    ``stage1`` counts the candidates (``searched``, ``refused``) and appends them; ``stage2`` sets
    ``depth``, sets ``stage`` before each compile, replaces each compiled candidate in ``candidates``
    by its verified copy (``Candidate`` itself is frozen), counts the compiles (``compiles``,
    ``cached_compiles``, ``full_compiles``) and the ``failures``, and updates ``calibration`` and
    ``elapsed_s`` after each; ``stopped`` is set on Stop (by ``stage2``, or by the page when the run
    before was cut short). Read it through ``ranked()`` and ``smallest_state()``; nothing else writes it.
    """

    target: Target
    stage: str = "stage 1"
    searched: int = 0
    refused: int = 0
    refused_examples: list[str] = dataclasses.field(default_factory=list)
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    compiles: int = 0
    cached_compiles: int = 0
    stage1_s: float = 0.0
    elapsed_s: float = 0.0
    stopped: bool = False
    failures: list[str] = dataclasses.field(default_factory=list)
    depth: Depth | None = None  # the depth shortcut's option(s), or why it was not used; None: not asked
    full_compiles: int = 0  # extrapolated candidates then compiled in full
    calibration: dict[str, float] = dataclasses.field(default_factory=dict)  # XLA's over stage 1's terms (``calibration``)
    roles: dict[str, str] = dataclasses.field(default_factory=dict)  # every logical name's role in the generated rules
    guessed_roles: dict[str, str] = dataclasses.field(default_factory=dict)  # the names no convention knows, with the role chosen
    scanned: bool = False  # the trace shows a scan over the layer stack (``scanned``)
    layout: Layout | None = None  # the layout the search started from (the user's own), as stage 1 was given it
    user_roles: dict[str, str] = dataclasses.field(default_factory=dict)  # the roles the user set (``--role``), as given
    # The memory search (``explorer.advisor.fitting``), where nothing compiled fits: each step in words (the layout
    # changed, where its memory went, XLA's peak), and the layouts compiled on larger slices of the target's generation
    memory_steps: list[str] = dataclasses.field(default_factory=list)
    elsewhere: list["Elsewhere"] = dataclasses.field(default_factory=list)
    unfinished: str = ""  # why the search ended before it was done (its compiles ran out, Stop); empty: done

    @property
    def limit_bytes(self) -> int:
        """What a device's peak is judged against: a TPU device's HBM; on a GPU, what JAX lets one process use of it
        (``xla_results.memory_limit``: 75% of the GPU's memory unless ``XLA_PYTHON_CLIENT_MEM_FRACTION`` says otherwise)."""
        return limit_bytes(self.target)

    def ranked(self) -> list[Candidate]:
        """The candidates best first (``rank``)."""
        return rank(self.candidates, self.limit_bytes)

    def advice(self) -> Candidate | None:
        """The layout the advisor names: the best-ranked one that XLA compiled in full for the target and that fits.
        Never an uncompiled or an extrapolated one (issue 56: a 7B was advised an uncompiled layout); None when no
        compiled layout fits."""
        return next((c for c in self.ranked() if c.fits and c.compiled_in_full), None)

    def ahead_of_advice(self) -> list[Candidate]:
        """The candidates ranked above the advice (not compiled in full, estimated or extrapolated faster): while
        there are any, the advice is the best compiled so far and the search is unfinished."""
        best = self.advice()
        ranked = self.ranked()
        return [c for c in ranked[: ranked.index(best)] if c.fits] if best is not None else []

    def closest(self) -> Candidate | None:
        """Where nothing compiled fits: the layout closest to fitting, a compiled one (the least over the limit by
        XLA's peak; compiled in full before extrapolated) where any was compiled, else the one with the least state."""
        compiled = [c for c in self.candidates if c.verified]
        if compiled:
            return min(compiled, key=lambda c: (not c.compiled_in_full, c.over(self.limit_bytes), c.layout.name))
        return self.smallest_state()

    def smallest_state(self) -> Candidate | None:
        """The candidate with the least state per device (the verdict when nothing fits)."""
        return min(self.candidates, key=lambda c: (c.state_bytes, c.layout.name), default=None)


def estimated_peak(c: Candidate, factor: float = 1.0) -> float:
    """A candidate's peak as planned before its compile: the exact state, the gradients, and stage 1's activations
    scaled by ``factor`` (``memory_factor``: what XLA's peaks showed beside the state over stage 1's estimate)."""
    return c.state_bytes + factor * (c.gradient_bytes + c.activation_bytes)


def memory_factor(search: Search, like: Candidate | None = None) -> float:
    """XLA's peak beside the state over stage 1's estimate of it (gradients and activations), on the candidates XLA
    compiled (a refused one too: its peak is the refusal's): the median over those of ``like``'s family (``family``:
    XLA keeps every layer's FSDP-gathered weights of a model whose layers are not scanned, which no tensor-parallel
    layout holds); for a family none of whose layouts was compiled, stage 1's own (1), or the
    least seen where that is less (optimistic: its compile will say); 1 before any compile. An estimate, used to plan
    which setting to compile."""
    found = [
        (family(c), (c.peak_bytes - c.state_bytes) / (c.gradient_bytes + c.activation_bytes))
        for c in search.candidates
        if c.verified and c.peak_bytes is not None and c.gradient_bytes + c.activation_bytes > 0
    ]
    if not found:
        return 1.0
    same = sorted(ratio for kind, ratio in found if like is None or kind == family(like))
    return max(same[len(same) // 2] if same else min(1.0, *(ratio for _, ratio in found)), 0.0)


GATHERED_AXES = ("fsdp", "sequence", "expert", "fsdp_transpose", "context")  # the axes the parameters are gathered over


def family(c: Candidate) -> frozenset[str]:
    """A candidate's family for ``memory_factor``: whether it gathers the parameters over devices (an FSDP-like axis:
    fsdp, sequence, expert; MaxText's fsdp_transpose, context) and whether it splits them over a tensor axis, from its
    mesh axes of more than one device. XLA's peak beside the state differs most between these (an unscanned model's
    gathered weights), little between sizes of the same: so what one v5e-8 compile showed plans a v5e-16 layout."""
    sizes = dict(zip(c.layout.mesh.axes, c.layout.mesh.shape))
    return frozenset(
        kind for kind, axes in (("gathered", GATHERED_AXES), ("tensor", ("tensor",))) if any(sizes.get(a, 1) > 1 for a in axes)
    )


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """A layout compiled on another slice of the target's generation (``fitting.larger_slices``): where, and the
    candidate with XLA's figures there."""

    target: Target
    candidate: Candidate


def limit_bytes(target: Target) -> int:
    """The memory per device a layout must fit in on ``target``: the figure XLA's verdict uses (``memory_limit``)."""
    return memory_limit(target).bytes


def shortlist(search: Search) -> list[Candidate]:
    """The candidates that may fit the device's memory limit (``may_fit``, calibrated on XLA's peaks of each one's
    family once there are any), best estimated step first (deterministic)."""
    calibrated = any(c.verified and c.peak_bytes is not None for c in search.candidates)
    return sorted(
        (c for c in search.candidates if may_fit(c, search.limit_bytes, memory_factor(search, c) if calibrated else None)),
        key=estimate_key,
    )


CLEARLY_OVER = 2.0  # before any compile: estimated gradients and activations this many times what is left beside the state
CALIBRATED_OVER = 1.15  # after one: the estimated peak calibrated on XLA's (``memory_factor``) this much over the limit


def may_fit(c: Candidate, limit: int, factor: float | None = None) -> bool:
    """The exact state fits, and what stage 1 estimates beside it is not clearly over what is left: before any compile
    at most ``CLEARLY_OVER`` times it (the raw estimate can be far off either way); once XLA's peaks have calibrated it
    (``factor``), the calibrated peak at most ``CALIBRATED_OVER`` times the limit. An estimate: XLA decides; a compile
    it saves is minutes on a real model (issue 56)."""
    if c.state_bytes > limit:
        return False
    if factor is None:
        return c.gradient_bytes + c.activation_bytes <= CLEARLY_OVER * (limit - c.state_bytes)
    return estimated_peak(c, factor) <= CALIBRATED_OVER * limit


def estimate_key(c: Candidate) -> tuple:
    """Stage 1's order: the predicted step (to three significant figures: closer is a tie the estimate cannot tell);
    where that ties (every candidate compute-bound at the same estimate), the terms XLA will add on top first:
    HBM traffic and collectives together (the overlap is never perfect; collectives on the links each mesh axis lies
    on: a torus axis run around as a ring costs half what one run along as a line does), then collectives alone, then less state,
    then the name."""
    return (
        float(f"{c.predicted_s:.3g}"),
        c.estimate.memory_s + c.estimate.collective_s,
        c.estimate.collective_s,
        c.state_bytes,
        c.layout.name,
    )


def rank(candidates: Sequence[Candidate], hbm_bytes: int = 0) -> list[Candidate]:
    """Best first: every candidate that fits (XLA's verdict where verified, else its exact state) on one scale
    (``Candidate.ranked_s``: the compiled prediction where verified, else stage 1's prediction calibrated on the
    compiles so far), to three significant figures, a verified one first where they tie; then everything that does
    not fit, by how much (XLA's peak, else the state, over ``hbm_bytes``; least first). Ties by state, then name.

    One scale: a raw stage-1 prediction leaves out what XLA adds (issue 45: on h100:1x8 an uncompiled 0.126 ms estimate
    was ranked below compiled 0.171-0.242 ms predictions), so an uncompiled candidate is ranked by the calibrated one."""

    def key(c: Candidate):
        if c.fits:
            return (0, float(f"{c.ranked_s:.3g}"), not c.verified) + estimate_key(c)[1:]
        # Does not fit (XLA refused it, E1000, or its peak is over): by how much it misses, then what it needs.
        return (2, c.over(hbm_bytes), c.state_bytes, c.layout.name)

    return sorted(candidates, key=key)
