"""Stage 1's estimate: an analytic roofline of one analysed layout, no compile.

An estimate (labelled so wherever shown), per device and step, with the formulas of "How to
Scale Your Model" (Austin et al., 2025), https://jax-ml.github.io/scaling-book/:

- compute: 6 x parameters x tokens / devices (the book's "Transformer math": a training step
  costs 6 flops per parameter per token, https://jax-ml.github.io/scaling-book/transformers/);
  tokens are the product of the inputs' batch and sequence dimensions;
- HBM traffic: parameters read twice (forward and backward), gradients written and read, optimizer state read and
  written, and the activations of every projection (a parameter with an embed-role dimension and a tensor-role one,
  once per stacked layer): with the book's matmul accounting (https://jax-ml.github.io/scaling-book/transformers/),
  Y = XW reads X and writes Y, and the backward pass reads dY twice and X once and writes dX, so each side crosses
  HBM three times: 3 x tokens per device x (embed + the tensor side's width per device) x the activation's bytes;
- collectives (https://jax-ml.github.io/scaling-book/sharding/, as ``roofline.collective_seconds``): FSDP and the
  other axes parameters are sharded over: two AllGathers of the parameters (forward, backward) and a ReduceScatter of
  the gradients over those axes; data: an AllReduce of the gradients; tensor (Megatron): each row-parallel
  projection's output, the residual stream (tokens per device x embed), all-reduced forward and its gradient backward;
  sequence: an AllGather (forward) and a ReduceScatter (backward) of the key/value activations; expert (a mixture of
  experts): four all-to-alls of the routed tokens (dispatch, combine, forward and backward), or, where the routed
  tokens keep the axis on their batch (``Moe.gathered``), no all-to-all: the experts' weights gathered as over FSDP.
  Each collective rides the links its mesh axis lies on (``explorer.hardware.placement``, as the compile places the
  mesh): on a TPU slice the torus axes a group runs along, each a ring (wraparound, both directions) or a line (one
  direction: half); on a GPU cluster NVLink inside a host and the network per GPU between hosts (``roofline``'s two
  levels).

The three terms give the lower bound (``Estimate.step_s``: the largest); beside it, ``Estimate.predicted_s``
is the step predicted from the same work (``step_model.predict_totals``): the flops at the rate a step's
matmuls of the activations' element type get, the bytes at the HBM rate a kernel gets, the collectives,
added. That is what ranks (``search.rank``); the bound stays shown.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

import numpy as np

from explorer.advisor.space import default_roles
from explorer.analysis.report import Report, itemsize
from explorer.analysis.stage_plan import PIPELINE_PREFIX, pipeline_of
from explorer.formats import human_seconds
from explorer.models.schedule import iterations
from explorer.hardware.placement import AxisLink, mesh_links
from explorer.predict.roofline import Collective, Estimate, collective_seconds
from explorer.specs import SpecEntry, spec_axes
from explorer.predict.step_model import predict_totals
from explorer.predict.step_rates import rates
from explorer.hardware.targets import Target

KV_NAMES = ("kv_heads", "activation_kv_heads")
STAGE1_NOTE = "stage 1, no compile: 6·N·tokens compute (N: the active parameters), state and projection traffic, the book's collectives"


def _collective(op: str, bytes_: float, axis: str, group: int, links: dict[str, AxisLink]) -> Collective:
    """One collective over mesh axis ``axis`` (a group of ``group`` devices), once, on the links the axis lies on."""
    link = links.get(axis)
    return Collective(
        op, 1, int(bytes_), (axis,), group, link.ring_axes if link else 1, link.hosts if link else 1, link.slices if link else 1
    )


class Stage1(NamedTuple):
    """Stage 1's estimate of one layout: the roofline, its largest collective (a line of text), the collective
    seconds per mesh axis, and every collective it counted with its label."""

    estimate: Estimate
    largest: str
    by_axis: dict[str, float]
    collectives: tuple[tuple[str, Collective], ...]


def estimate_candidate(
    report: Report,
    target: Target,
    tokens: int,
    param_count: int,
    roles: dict[str, str],
    remat: str = "none",
    microbatches: int = 1,
    links: Sequence[AxisLink] | None = None,
) -> Stage1:
    """Stage 1's analytic roofline of one analysed layout (see the module docstring); its largest collective; the
    collective time per mesh axis; the collectives. ``links``: where the mesh's axes lie on the target
    (``placement.mesh_links``, read when not given).

    An axis is *tensor-like* when a rule gives it a tensor- or expert-role name: its parameters stay
    sharded (no gather) and the row-parallel outputs are all-reduced over it. Any other axis that
    shards parameters is FSDP-like: gathered forward and backward, gradients reduce-scattered.
    Compute is split over the axes that split the inputs (batch, sequence) or are tensor-like.
    Activations are counted per projection (``_projections``): each parameter that maps the
    residual stream (an embed-role dimension, never split by tensor parallelism) to a tensor-role
    space, once per stacked layer.
    """
    chip = target.chip
    mesh = dict(zip(report.layout.mesh.axes, report.layout.mesh.shape))
    if links is None:
        links = mesh_links(target, report.layout.mesh.shape, report.layout.mesh.axes, report.layout.mesh.dcn)
    by_link = {link.axis: link for link in links}
    totals = report.totals
    moe = moe_profile(report, roles, tokens)
    # An expert axis that splits the tokens but no routed activation's experts splits only the experts' weights: FSDP-like.
    tensor_like = {axis for rule in report.layout.rules if roles.get(rule.logical) in ("tensor", "expert") for axis in rule.mesh_axes}
    tensor_like -= moe.gathered if moe is not None else set()
    input_axes = set().union(*[_axes_of(a.spec) for a in report.arrays if a.kind == "input"])
    splitting = math.prod(size for axis, size in mesh.items() if axis in input_axes or axis in tensor_like)
    token_axes = _token_axes(report, roles)
    active = param_count if moe is None else active_params(report, roles, tokens)
    pipe = pipeline_profile(report, roles)
    if pipe is not None:  # each device runs its stage's blocks, every iteration of the loop (the bubble's included)
        active += pipe.block_params * (pipe.inflation / math.prod(mesh[axis] for axis in pipe.axes) - 1)
    flops = 6.0 * active * tokens * REMAT_COMPUTE.get(remat, 1.0) / splitting
    compute_s = flops / chip.device_peak_flops
    # Tokens each device holds: the token grid split over the axes that split the inputs (``_token_axes``).
    tokens_here = tokens / math.prod(size for axis, size in mesh.items() if axis in token_axes)
    projections = _projections(report, roles, tensor_like, mesh, moe)
    width = _activation_itemsize(report)
    # The book's matmul accounting (https://jax-ml.github.io/scaling-book/transformers/, "Transformer Accounting"):
    # Y = XW reads X and writes Y; the backward pass reads dY twice (dX = dY Wᵀ, dW = Xᵀ dY), reads X and
    # writes dX: each side of a projection crosses HBM three times per step.
    activation_traffic = sum(3 * p.runs * tokens_here * (p.embed + p.other_here) * width for p in projections)
    traffic = 2 * totals.param_bytes + 2 * totals.param_bytes + 2 * totals.opt_state_bytes + activation_traffic
    if pipe is not None:  # every iteration of the loop reads its stage's weights forward and backward and adds to their gradient
        stacked = sum(a.bytes_per_device for a in report.arrays if a.kind == "param" and a.path.startswith(PIPELINE_PREFIX))
        traffic += 4 * (pipe.iterations - 1) * stacked
    memory_s = traffic / chip.device_hbm_bandwidth
    params = [a for a in report.arrays if a.kind == "param"]
    collectives: list[tuple[str, Collective]] = []
    for axis, size in mesh.items():
        if size <= 1:
            continue
        if pipe is not None and axis in pipe.axes:
            # The pipeline's sends (docs/pipelines.md): every iteration each stage passes one microbatch's activations
            # (its tokens here x embed) to the next stage, a collective-permute over the stage axis, and back in the
            # backward loop. No gather: each stage keeps its own blocks.
            embed = max((p.embed for p in projections), default=0)
            moved = 2 * pipe.iterations * tokens_here / pipe.microbatches * embed * width
            collectives.append(
                (f"pipeline sends x{2 * pipe.iterations} over {axis}", _collective("collective-permute", moved, axis, size, by_link))
            )
            continue
        if axis in tensor_like:
            # Megatron (the book's "Transformer Accounting", tensor parallelism): a row-parallel projection's output
            # (the residual stream, tokens x embed) is a partial sum, all-reduced over the axis forward and its
            # gradient backward.
            moved = sum(2 * p.runs * tokens_here * p.embed * width for p in projections if p.row_parallel and axis in p.axes)
            if moved:
                collectives.append((f"all-reduce x2 of activations over {axis}", _collective("all-reduce", moved, axis, size, by_link)))
        else:
            # Gradient accumulation gathers the parameters and reduce-scatters the gradients once per microbatch.
            # A pipeline's stage weights are gathered in every iteration of its loop (MaxText's default; XLA does so).
            gathered = microbatches * sum(
                a.bytes_per_device * size * (pipe.iterations if pipe is not None and a.path.startswith(PIPELINE_PREFIX) else 1)
                for a in params
                if axis in _axes_of(a.spec)
            )
            if gathered:
                why = (
                    " (no all-to-all: the routed tokens stay, the experts are gathered)" if moe is not None and axis in moe.gathered else ""
                )
                collectives.append(
                    (f"all-gather x2 of parameters over {axis}{why}", _collective("all-gather", 2 * gathered, axis, size, by_link))
                )
                collectives.append(
                    (f"reduce-scatter of gradients over {axis}", _collective("reduce-scatter", gathered / size, axis, size, by_link))
                )
        if moe is not None and axis in moe.axes - moe.gathered:
            # Expert parallelism: the routed tokens (top-k x capacity of each token's embedding) are sent to their experts'
            # devices and back (dispatch and combine all-to-alls), forward and backward. XLA emits four all-to-alls over
            # the axis, each of the dispatched tokens on a device, tokens here x slots x embed (flaxformer's MoE under
            # T5X's rules, whose sharding constraints induce them: tests/explorer/advisor/test_advisor_models.py).
            moved = 4 * tokens_here * moe.slots_per_token * moe.embed * width
            collectives.append((f"all-to-all x4 of routed tokens over {axis}", _collective("all-to-all", moved, axis, size, by_link)))
        # The batch is split over this axis but a parameter is not: its gradient is all-reduced over it.
        if axis in token_axes:
            reduced = sum(a.bytes_per_device for a in params if axis not in _axes_of(a.spec))
            if reduced:
                collectives.append((f"all-reduce of gradients over {axis}", _collective("all-reduce", reduced, axis, size, by_link)))
        if roles and any(roles.get(r.logical) == "sequence" and axis in r.mesh_axes for r in report.layout.rules):
            kv = sum(
                a.bytes_per_device * size * a.runs_per_step
                for a in report.arrays
                if a.kind == "activation" and a.logical_axes and any(n in KV_NAMES for n in a.logical_axes if isinstance(n, str))
            )
            if kv:
                collectives.append((f"all-gather of keys/values over {axis}", _collective("all-gather", kv, axis, size, by_link)))
                collectives.append(
                    (f"reduce-scatter of keys/values over {axis}", _collective("reduce-scatter", kv / size, axis, size, by_link))
                )
    timed = [(label, collective_seconds(c, chip)) for label, c in collectives]
    largest = max(timed, key=lambda t: (t[1], t[0]), default=("none", 0.0))
    collective_s = sum(t for _, t in timed)
    # The prediction beside the bound (explorer.predict.step_model): the same work at the rates its element type gets, added.
    predicted = predict_totals(flops, traffic, collective_s, chip, "f32" if width >= 4 else "bf16")
    estimate = Estimate(compute_s, memory_s, collective_s, predicted)
    by_axis: dict[str, float] = {}
    for (_, c), (_, seconds) in zip(collectives, timed):
        by_axis[c.mesh_axes[0]] = by_axis.get(c.mesh_axes[0], 0.0) + seconds
    return Stage1(
        estimate, f"{largest[0]}: ≥ {human_seconds(largest[1])} (estimate)" if largest[1] else "none", by_axis, tuple(collectives)
    )


def prediction_parts(estimate: Estimate, chip) -> tuple[float, float, float] | None:
    """Stage 1's predicted step (``predict_totals``) taken apart: the matmuls' seconds, the HBM bytes' seconds and the
    fixed dispatch (the collectives are ``estimate.collective_s``); None where no prediction was made."""
    if estimate.predicted_s is None:
        return None
    device = rates(chip)
    memory = estimate.memory_s * chip.device_hbm_bandwidth / device.hbm_bandwidth
    return estimate.predicted_s - memory - estimate.collective_s - device.dispatch_s, memory, device.dispatch_s


STACK_NAMES = ("layer", "layers", "stack", "blocks")  # a scanned model's stacked-layer dimension


@dataclasses.dataclass(frozen=True)
class Projection:
    """A parameter that maps the residual stream to a tensor-role space (or back), as stage 1 counts it."""

    runs: int  # per step: the stacked layers it holds
    embed: int  # the residual side's width (embed-role dimensions, whole: activations keep them)
    other_here: float  # the other side's width on one device (tensor-role dimensions split over their tensor-like axes)
    axes: frozenset[str]  # the tensor-like axes that split the other side
    row_parallel: bool  # the residual side is the output (trailing dimensions): its output is a partial sum over ``axes``


def _projections(
    report: Report, roles: dict[str, str], tensor_like: set[str], mesh: dict[str, int], moe: "Moe | None" = None
) -> list[Projection]:
    """Every parameter with an embed-role dimension and a tensor-role one (the Flax convention: a kernel's input
    dimensions first, so a kernel whose embed dimensions come last writes the residual stream: row-parallel)."""
    found = []
    for a in report.arrays:
        if a.kind != "param" or not a.logical_axes or len(a.shape) < 2:
            continue
        names = [n if isinstance(n, str) else None for n in a.logical_axes]
        role = [roles.get(n, "none") if n else "none" for n in names]
        role = ["embed" if r == "embed_no_expert" else r for r in role]
        if "embed" not in role or "tensor" not in role and "expert" not in role or "sequence" in role:
            continue
        runs, embed, other, axes = 1, 1, 1.0, set()
        for size, name, kind, entry in zip(a.shape, names, role, a.spec):
            split = [axis for axis in _axes_of((entry,)) if axis in tensor_like]
            if name in STACK_NAMES:
                runs *= size
            elif kind == "embed":
                embed *= size
            elif kind == "expert" and moe is not None:
                # An expert's projection sees only its routed tokens: all experts together, top-k x capacity per token.
                other *= moe.slots_per_token / math.prod(mesh[axis] for axis in split)
            else:
                other *= size / math.prod(mesh[axis] for axis in split)
                axes.update(split)
        dims = [k for k, name in zip(role, names) if name not in STACK_NAMES]
        row_parallel = dims[-1] == "embed" and dims[0] != "embed"
        found.append(Projection(runs, embed, other, frozenset(axes), row_parallel))
    return found


def _token_axes(report: Report, roles: dict[str, str]) -> set[str]:
    """The mesh axes that split the inputs, as the token grid the activations hold is split: every axis of an input's
    spec; of an input whose dimensions carry mesh axes, not logical names (MaxText's token ids), those less the axes
    only tensor-role names take (``_replicating``)."""
    found: set[str] = set()
    for a in report.arrays:
        if a.kind != "input":
            continue
        axes = _axes_of(a.spec)
        if a.logical_axes and not any(isinstance(name, str) for name in a.logical_axes):
            axes -= _replicating(report, roles)
        found |= axes
    return found


def _replicating(report: Report, roles: dict[str, str]) -> set[str]:
    """The mesh axes the rules give tensor-role names and no batch- or sequence-role name: they split the weights and
    the heads' and MLP's activations, never the token grid, so the devices along them hold the same tokens. MaxText
    feeds its inputs over every axis of ``data_sharding``, ``tensor`` included, then constrains the activations' batch
    to data and FSDP: the inputs' axes alone would count a tensor axis of 4 as 4x fewer tokens a device."""
    by_role: dict[str, set[str]] = {}
    for rule in report.layout.rules:
        by_role.setdefault(roles.get(rule.logical, "none"), set()).update(rule.mesh_axes)
    tokens = set().union(*(by_role.get(role, set()) for role in ("batch", "batch_no_expert", "sequence")))
    return by_role.get("tensor", set()) - tokens


def _activation_itemsize(report: Report) -> int:
    """Bytes per activation element: the declared activations' widest dtype, else the parameters'."""
    sizes = [itemsize(a.dtype) for a in report.arrays if a.kind == "activation"]
    sizes = sizes or [itemsize(a.dtype) for a in report.arrays if a.kind == "param"]
    return max(sizes, default=4)


def _axes_of(spec: Sequence[SpecEntry]) -> set[str]:
    """Every mesh axis a spec names, in any of its entries."""
    return set().union(*map(spec_axes, spec))


def tokens_per_step(report: Report, roles: dict[str, str]) -> int:
    """The product of the model inputs' batch and sequence dimensions (the largest input's). An input whose dimensions
    carry no logical names but mesh axes (MaxText feeds its token ids as ``(batch, length)`` sharded over its
    ``data_sharding`` axes, the length ``None``) counts every element where it holds integers: token ids, one a token.
    Without that, MaxText's step was costed as one token (stage 1 24-32x below the compiled predictions, issue 56)."""
    best = 1
    for a in report.arrays:
        if a.kind != "input" or not a.logical_axes:
            continue
        if not any(isinstance(name, str) for name in a.logical_axes):
            best = max(best, math.prod(a.shape) if _integers(a.dtype) else 1)
            continue
        count = math.prod(
            size
            for size, name in zip(a.shape, a.logical_axes)
            if isinstance(name, str) and roles.get(name, default_roles([name])[name]) in ("batch", "sequence")
        )
        best = max(best, count)
    return best


def _integers(dtype: str) -> bool:
    """Whether an array of ``dtype`` holds whole numbers (token ids, positions, segment ids)."""
    try:
        return bool(np.issubdtype(np.dtype(dtype), np.integer))
    except TypeError:
        return False


def report_roles(report: Report, roles: dict[str, str] | None = None) -> dict[str, str]:
    """Every logical name the report's arrays carry with its role: by convention, then ``roles``."""
    chosen = default_roles(sorted({n for a in report.arrays for n in (a.logical_axes or ()) if isinstance(n, str)}))
    chosen.update(roles or {})
    return chosen


def stage1_estimate(
    report: Report,
    target: Target,
    roles: dict[str, str] | None = None,
    remat: str = "none",
    microbatches: int = 1,
    links: Sequence[AxisLink] | None = None,
) -> Stage1:
    """Stage 1's estimate of one analysed layout, its largest collective, its collective time per mesh axis and its
    collectives (roles by convention, then ``roles``; the step under ``remat`` and ``microbatches``; ``links``: where
    the mesh's axes lie on the target, read when not given)."""
    chosen = report_roles(report, roles)
    return estimate_candidate(
        report, target, tokens_per_step(report, chosen), report.totals.param_count, chosen, remat, microbatches, links
    )


# --- a pipeline: its stages, microbatches and loop ---------------------------------------------------------


class Pipe(NamedTuple):
    """A pipelined built-in transformer as it runs (docs/pipelines.md): its stages, microbatches and repeats, the mesh
    axes the rules give ``stage``, and the parameters of its stacked blocks."""

    stages: int
    microbatches: int
    repeats: int
    axes: frozenset[str]
    block_params: int

    @property
    def iterations(self) -> int:
        return iterations(self.stages, self.microbatches, self.repeats)

    @property
    def inflation(self) -> float:
        """The loop's iterations over those with a microbatch for each stage: 1 / (1 - the bubble)."""
        return self.iterations / (self.microbatches * self.repeats)


def pipeline_profile(report: Report, roles: dict[str, str]) -> Pipe | None:
    """The pipeline of a pipelined built-in transformer (``stage_plan.pipeline_of``); None for any other layout."""
    if pipeline_of(report.layout) is None:
        return None
    options = report.layout.model.options
    mesh = dict(zip(report.layout.mesh.axes, report.layout.mesh.shape))
    axes = frozenset(a for r in report.layout.rules if roles.get(r.logical) == "stage" for a in r.mesh_axes if mesh.get(a, 1) > 1)
    blocks = sum(math.prod(a.shape) for a in report.arrays if a.kind == "param" and a.path.startswith(PIPELINE_PREFIX))
    return Pipe(options["pipeline_stages"], options.get("pipeline_microbatches", 1), options.get("pipeline_repeats", 1), axes, blocks)


# --- mixture of experts: what runs ------------------------------------------------------------------

TOP_K_OPTIONS = ("num_selected_experts", "num_experts_per_tok", "experts_per_token", "top_k", "moe_top_k", "num_experts_per_token")
CAPACITY_OPTIONS = ("capacity_factor", "train_capacity_factor")


@dataclasses.dataclass(frozen=True)
class Moe:
    """A mixture of experts as it runs: its expert parameters, the experts, the routed slots per token (top-k x capacity
    factor: read from the trace's dispatched activations, else from the model's options) and the routed embedding."""

    expert_params: int  # parameters with an expert-role dimension (every layer's)
    experts: int
    slots_per_token: float  # expert slots computed per token, all experts together (top-k x capacity factor)
    embed: int  # the routed tokens' width
    axes: frozenset[str]  # the mesh axes the experts are split over (the all-to-alls run over them)
    # Of ``axes``, those that split the tokens but no routed activation's experts: the tokens stay on their devices and
    # each device runs every expert, its weights gathered over the axis (no all-to-all). MaxText's base.yml rules do
    # this: ``activation_batch_moe`` takes the expert axis before ``activation_exp`` can (moe.py's "FSDP-style
    # fallback" without ``moe_dispatch_no_expert_sharding``), and XLA gathers the experts' kernels over it.
    gathered: frozenset[str] = frozenset()


def moe_profile(report: Report, roles: dict[str, str], tokens: int) -> Moe | None:
    """The model's experts (None when no parameter has an expert-role dimension).

    The slots each expert computes come from the trace: an activation with an expert-role dimension and an embed- or
    tensor-role one (the dispatched tokens, or an expert's hidden layer) holds, per expert, its capacity (every
    dimension that is neither the expert's, the width's nor a stacked layer's). Without one, the model's options:
    top-k (``num_selected_experts``, MaxText's ``num_experts_per_tok``...) x ``capacity_factor`` (1 when dropless).
    """
    expert_params, experts, embed, axes = 0, 0, 1, set()
    for a in report.arrays:
        if a.kind != "param" or not a.logical_axes:
            continue
        kinds = [roles.get(n, "none") if isinstance(n, str) else "none" for n in a.logical_axes]
        if "expert" not in kinds:
            continue
        expert_params += math.prod(a.shape)
        for size, kind, entry in zip(a.shape, kinds, a.spec):
            if kind == "expert":
                experts = max(experts, size)
                axes.update(_axes_of((entry,)))
        widths = [size for size, kind in zip(a.shape, kinds) if kind in ("embed", "embed_no_expert")]
        embed = max(embed, math.prod(widths) if widths else 1)
    if not expert_params or experts <= 1:
        return None
    slots = 0.0
    for a in report.arrays:
        if a.kind != "activation" or not a.logical_axes:
            continue
        names = [n if isinstance(n, str) else None for n in a.logical_axes]
        kinds = [
            roles.get(n, "none") if n else ("expert" if i == 0 and _is_expert_axis(a, i, axes) else "none") for i, n in enumerate(names)
        ]
        if "expert" not in kinds or not {"embed", "embed_no_expert", "tensor"} & set(kinds):
            continue
        here = math.prod(
            size
            for size, kind, n in zip(a.shape, kinds, names)
            if kind not in ("expert", "embed", "embed_no_expert", "tensor") and n not in STACK_NAMES
        )
        slots = max(slots, float(here))
    if slots:
        per_token = slots * experts / tokens
    else:
        options = dict(report.layout.model.options)
        top_k = next((options[n] for n in TOP_K_OPTIONS if isinstance(options.get(n), (int, float))), 1)
        capacity = next((options[n] for n in CAPACITY_OPTIONS if isinstance(options.get(n), (int, float)) and options[n] > 0), 1.0)
        per_token = top_k * capacity
    return Moe(expert_params, experts, per_token, embed, frozenset(axes), _weights_gathered(report, roles, experts, axes))


def _weights_gathered(report: Report, roles: dict[str, str], experts: int, axes: set[str]) -> frozenset[str]:
    """The expert axes an activation splits on a dimension other than the experts' while none splits the experts'
    dimension over them (``Moe.gathered``); an axis no activation splits keeps the all-to-alls."""
    dispatched, tokens = set(), set()
    for a in report.arrays:
        if a.kind != "activation" or not a.logical_axes:
            continue
        for i, (size, name, entry) in enumerate(zip(a.shape, a.logical_axes, a.spec)):
            split = _axes_of((entry,)) & axes
            if isinstance(name, str):
                by_expert = roles.get(name) == "expert"
            else:
                by_expert = i == 0 and size == experts and _is_expert_axis(a, i, axes)
            (dispatched if by_expert else tokens).update(split)
    return frozenset(tokens - dispatched)


def _is_expert_axis(a, index: int, axes: set[str]) -> bool:
    """A dimension the model fixed to the experts' mesh axes by hand (flaxformer's vmap over ``expert``)."""
    entry = a.logical_axes[index]
    return isinstance(entry, tuple) and bool(entry) and set(entry) <= axes | {"expert"}


def active_params(report: Report, roles: dict[str, str], tokens: int | None = None) -> int:
    """The parameters each token runs through: every dense one, and of the experts' the top-k x capacity factor
    share (``moe_profile``); all parameters for a dense model."""
    tokens = tokens or tokens_per_step(report, roles)
    moe = moe_profile(report, roles, tokens)
    total = report.totals.param_count
    if moe is None:
        return total
    return int(round(total - moe.expert_params + moe.expert_params * min(moe.slots_per_token, moe.experts) / moe.experts))


# --- activations kept for the backward pass, per remat policy ------------------------------------------

REMAT_POLICIES = ("none", "dots_saveable", "dots_with_no_batch_dims_saveable", "full")  # most kept first
# Compute per policy over no remat: full recomputes the forward pass (8 flops per parameter per token, not 6); the
# dots policies recompute only what is not a matmul (and, without batch dims, the attention's own dots).
REMAT_COMPUTE = {"none": 1.0, "dots_saveable": 1.0, "dots_with_no_batch_dims_saveable": 1.05, "full": 4.0 / 3.0}
# Query heads and the per-head width: a query-like activation (batch, length, heads, per-head width) implies the attention's
# scores, batch x heads x query length x key length, which no constraint declares (``attention_score_elements``).
HEAD_NAMES = ("heads", "q_heads", "activation_heads", "activation_q_heads", "num_heads", "n_heads")
HEAD_WIDTH_NAMES = ("kv", "head_dim", "activation_kv", "kv_head_dim", "activation_kv_head_dim")
SOFTMAX_BYTES = 4  # the softmax runs in float32 (the transformer's, MaxText's, Flax's dot_product_attention's)


def activation_bytes(report: Report, roles: dict[str, str], remat: str = "none", microbatches: int = 1) -> int:
    """Stage 1's estimate of the activations alive for the backward pass per device, per remat policy:

    - ``none``: every declared activation (bytes per device x runs per step), and what no constraint declares but the
      backward pass keeps: each projection's output (``_projections``; a gated MLP's two inputs to its product) and
      each attention's scores (``attention_score_elements``) as the logits at the activations' width and the
      probabilities in float32 and cast back (2 x width + 4 bytes an element);
    - ``dots_saveable``: the projections' outputs and the logits (every dot's output);
    - ``dots_with_no_batch_dims_saveable``: the projections' outputs (the attention's dots have batch dimensions);
    - ``full``: each layer's input (each repeated declaration's largest residual-stream array, once per run);

    and under any remat policy, the layer whose backward pass is running holds its recomputed activations: ``none``'s
    for one layer. Divided over the microbatches (one microbatch's activations are alive at a time). Measured
    (docs/advisor.md): Llama-2-7B shapes on v5p-128, FSDP 64 without remat: 45.4 GB against XLA's 45.4 GB of temporaries (5.3 GB
    without the scores and the projections' outputs). An estimate: XLA decides."""
    acts = [a for a in report.arrays if a.kind == "activation" and not a.path.endswith("/output")]
    declared = sum(a.bytes_per_device * a.runs_per_step for a in acts)
    width = _activation_itemsize(report)
    projected = projection_output_bytes(report, roles)
    scores = attention_score_elements(report, roles)
    everything = declared + projected + scores * (2 * width + SOFTMAX_BYTES)
    if remat == "none":
        return int(everything / max(microbatches, 1))
    if remat == "full":
        residual = [
            a
            for a in acts
            if a.logical_axes
            and all(
                isinstance(n, str) and roles.get(n, "none") in ("batch", "batch_no_expert", "sequence", "embed", "embed_no_expert")
                for n in a.logical_axes
            )
        ]
        by_runs: dict[int, int] = {}
        for a in residual:
            by_runs[a.runs_per_step] = max(by_runs.get(a.runs_per_step, 0), a.bytes_per_device)
        kept = sum(runs * size for runs, size in by_runs.items()) if by_runs else declared * 0.1
    else:
        kept = projected + (scores * width if remat == "dots_saveable" else 0)
    return int((kept + everything / _layers(acts)) / max(microbatches, 1))


def gradient_bytes(report: Report, microbatches: int = 1) -> int:
    """The gradients alive at the step's peak, per device: one of each parameter, sharded as the parameter (the
    optimizer's update reads them all at once), and with gradient accumulation a second, the sum beside one
    microbatch's (``train_step.accumulated_grads``). An estimate: XLA may update some in place."""
    return report.totals.param_bytes * (2 if microbatches > 1 else 1)


def _layers(acts: Sequence) -> int:
    """The layers the activations are spread over: a scan's trip count, else the top-level modules that declare them."""
    runs = max((a.runs_per_step for a in acts), default=1)
    return runs if runs > 1 else max(len({a.module.split("/")[0] for a in acts}), 1)


def projection_output_bytes(report: Report, roles: dict[str, str]) -> int:
    """Every projection's output per device and step (``_projections``: a column-parallel one writes its tensor side,
    a row-parallel one the residual stream), once per stacked layer, for the tokens each device holds."""
    mesh = dict(zip(report.layout.mesh.axes, report.layout.mesh.shape))
    tensor_like = {axis for rule in report.layout.rules if roles.get(rule.logical) in ("tensor", "expert") for axis in rule.mesh_axes}
    token_axes = _token_axes(report, roles)
    tokens = tokens_per_step(report, roles)
    tokens_here = tokens / math.prod(size for axis, size in mesh.items() if axis in token_axes)
    moe = moe_profile(report, roles, tokens)
    width = _activation_itemsize(report)
    return int(
        sum(
            p.runs * tokens_here * (p.embed if p.row_parallel else p.other_here) * width
            for p in _projections(report, roles, tensor_like, mesh, moe)
        )
    )


def attention_score_elements(report: Report, roles: dict[str, str]) -> int:
    """The attention scores per device and step: for each module that declares a query-like activation (batch and
    sequence dimensions, query heads, a per-head width: ``HEAD_NAMES``, ``HEAD_WIDTH_NAMES``), batch x heads x query
    length on this device x the whole key length, once per run (the largest such activation of the module)."""
    by_module: dict[str, tuple[int, float]] = {}
    for a in report.arrays:
        if a.kind != "activation" or not a.logical_axes or len(a.logical_axes) != len(a.shard_shape):
            continue
        names = [n if isinstance(n, str) else "" for n in a.logical_axes]
        kinds = [roles.get(n, "none") for n in names]
        heads = [i for i, n in enumerate(names) if n in HEAD_NAMES]
        widths = [i for i, n in enumerate(names) if n in HEAD_WIDTH_NAMES]
        lengths = [i for i, k in enumerate(kinds) if k == "sequence"]
        if not heads or not widths or not lengths or not {"batch", "batch_no_expert"} & set(kinds):
            continue
        here = math.prod(a.shard_shape) / a.shard_shape[widths[0]] * a.shape[lengths[0]]
        runs, best = by_module.get(a.module, (a.runs_per_step, 0.0))
        by_module[a.module] = (max(runs, a.runs_per_step), max(best, here))
    return int(sum(runs * here for runs, here in by_module.values()))
