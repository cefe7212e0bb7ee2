"""Stage 1's estimate: an analytic roofline of one analysed layout, no compile.

An estimate (labelled so wherever shown), per device and step, with the formulas of "How to
Scale Your Model" (Austin et al., 2025), https://jax-ml.github.io/scaling-book/:

- compute: 6 x parameters x tokens / devices (the book's "Transformer math": a training step
  costs 6 flops per parameter per token, https://jax-ml.github.io/scaling-book/transformers/);
  tokens are the product of the inputs' batch and sequence dimensions;
- HBM traffic: parameters read twice (forward and backward), gradients written and read,
  optimizer state read and written, and the activations of every projection (a parameter with an
  embed-role dimension and a tensor-role one, once per stacked layer): with the book's matmul
  accounting (https://jax-ml.github.io/scaling-book/transformers/), Y = XW reads X and writes Y, and
  the backward pass reads dY twice and X once and writes dX, so each side crosses HBM three times:
  3 x tokens per device x (embed + the tensor side's width per device) x the activation's bytes;
- collectives (https://jax-ml.github.io/scaling-book/sharding/, as ``roofline.collective_seconds``):
  FSDP and the other axes parameters are sharded over: two AllGathers of the parameters
  (forward, backward) and a ReduceScatter of the gradients over those axes; data: an AllReduce of
  the gradients; tensor (Megatron): each row-parallel projection's output, the residual stream
  (tokens per device x embed), all-reduced forward and its gradient backward; sequence: an
  AllGather (forward) and a ReduceScatter (backward) of the key/value
  activations. Each axis is assumed to ride one torus axis (``ici_axes=1``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from explorer.advisor.space import default_roles
from explorer.analysis import Report
from explorer.roofline import Collective, Estimate, collective_seconds
from explorer.specs import SpecEntry, spec_axes
from explorer.targets import Target

KV_NAMES = ("kv_heads", "activation_kv_heads")
STAGE1_NOTE = "stage 1, no compile: 6·N·tokens compute, state and projection traffic, the book's collectives"


def _collective(op: str, bytes_: float, axes: tuple[str, ...], group: int) -> Collective:
    """One collective over ``axes`` (a group of ``group`` devices), once, riding one torus axis."""
    return Collective(op, 1, int(bytes_), axes, group, 1)


def estimate_candidate(
    report: Report, target: Target, tokens: int, param_count: int, roles: dict[str, str],
) -> tuple[Estimate, str, dict[str, float]]:
    """Stage 1's analytic roofline of one analysed layout (see the module docstring); its largest collective; and
    the collective time per mesh axis.

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
    totals = report.totals
    tensor_like = {axis for rule in report.layout.rules if roles.get(rule.logical) in ("tensor", "expert") for axis in rule.mesh_axes}
    input_axes = set().union(*[_axes_of(a.spec) for a in report.arrays if a.kind == "input"])
    splitting = math.prod(size for axis, size in mesh.items() if axis in input_axes or axis in tensor_like)
    compute_s = 6.0 * param_count * tokens / splitting / chip.device_peak_flops
    # Tokens each device holds: the token grid split over the axes that split the inputs.
    tokens_here = tokens / math.prod(size for axis, size in mesh.items() if axis in input_axes)
    projections = _projections(report, roles, tensor_like, mesh)
    width = _activation_itemsize(report)
    # The book's matmul accounting (https://jax-ml.github.io/scaling-book/transformers/, "Transformer Accounting"):
    # Y = XW reads X and writes Y; the backward pass reads dY twice (dX = dY Wᵀ, dW = Xᵀ dY), reads X and
    # writes dX: each side of a projection crosses HBM three times per step.
    activation_traffic = sum(3 * p.runs * tokens_here * (p.embed + p.other_here) * width for p in projections)
    traffic = 2 * totals.param_bytes + 2 * totals.param_bytes + 2 * totals.opt_state_bytes + activation_traffic
    memory_s = traffic / chip.device_hbm_bandwidth
    params = [a for a in report.arrays if a.kind == "param"]
    collectives: list[tuple[str, Collective]] = []
    for axis, size in mesh.items():
        if size <= 1:
            continue
        if axis in tensor_like:
            # Megatron (the book's "Transformer Accounting", tensor parallelism): a row-parallel projection's output
            # (the residual stream, tokens x embed) is a partial sum, all-reduced over the axis forward and its
            # gradient backward.
            moved = sum(2 * p.runs * tokens_here * p.embed * width for p in projections if p.row_parallel and axis in p.axes)
            if moved:
                collectives.append((f"all-reduce x2 of activations over {axis}", _collective("all-reduce", moved, (axis,), size)))
        else:
            gathered = sum(a.bytes_per_device * size for a in params if axis in _axes_of(a.spec))
            if gathered:
                collectives.append((f"all-gather x2 of parameters over {axis}", _collective("all-gather", 2 * gathered, (axis,), size)))
                collectives.append(
                    (f"reduce-scatter of gradients over {axis}", _collective("reduce-scatter", gathered / size, (axis,), size)))
        # The batch is split over this axis but a parameter is not: its gradient is all-reduced over it.
        if axis in input_axes:
            reduced = sum(a.bytes_per_device for a in params if axis not in _axes_of(a.spec))
            if reduced:
                collectives.append((f"all-reduce of gradients over {axis}", _collective("all-reduce", reduced, (axis,), size)))
        if roles and any(roles.get(r.logical) == "sequence" and axis in r.mesh_axes for r in report.layout.rules):
            kv = sum(a.bytes_per_device * size * a.runs_per_step for a in report.arrays
                     if a.kind == "activation" and a.logical_axes and any(n in KV_NAMES for n in a.logical_axes if isinstance(n, str)))
            if kv:
                collectives.append((f"all-gather of keys/values over {axis}", _collective("all-gather", kv, (axis,), size)))
                collectives.append((f"reduce-scatter of keys/values over {axis}", _collective("reduce-scatter", kv / size, (axis,), size)))
    timed = [(label, collective_seconds(c, chip)) for label, c in collectives]
    largest = max(timed, key=lambda t: (t[1], t[0]), default=("none", 0.0))
    estimate = Estimate(compute_s, memory_s, sum(t for _, t in timed))
    by_axis: dict[str, float] = {}
    for (_, c), (_, seconds) in zip(collectives, timed):
        by_axis[c.mesh_axes[0]] = by_axis.get(c.mesh_axes[0], 0.0) + seconds
    return estimate, (f"{largest[0]}: ≥ {largest[1] * 1e3:.3g} ms (estimate)" if largest[1] else "none"), by_axis


STACK_NAMES = ("layer", "layers", "stack", "blocks")  # a scanned model's stacked-layer dimension


@dataclasses.dataclass(frozen=True)
class Projection:
    """A parameter that maps the residual stream to a tensor-role space (or back), as stage 1 counts it."""

    runs: int  # per step: the stacked layers it holds
    embed: int  # the residual side's width (embed-role dimensions, whole: activations keep them)
    other_here: float  # the other side's width on one device (tensor-role dimensions split over their tensor-like axes)
    axes: frozenset[str]  # the tensor-like axes that split the other side
    row_parallel: bool  # the residual side is the output (trailing dimensions): its output is a partial sum over ``axes``


def _projections(report: Report, roles: dict[str, str], tensor_like: set[str], mesh: dict[str, int]) -> list[Projection]:
    """Every parameter with an embed-role dimension and a tensor-role one (the Flax convention: a kernel's input
    dimensions first, so a kernel whose embed dimensions come last writes the residual stream: row-parallel)."""
    found = []
    for a in report.arrays:
        if a.kind != "param" or not a.logical_axes or len(a.shape) < 2:
            continue
        names = [n if isinstance(n, str) else None for n in a.logical_axes]
        role = [roles.get(n, "none") if n else "none" for n in names]
        if "embed" not in role or "tensor" not in role and "expert" not in role or "sequence" in role:
            continue
        runs, embed, other, axes = 1, 1, 1.0, set()
        for size, name, kind, entry in zip(a.shape, names, role, a.spec):
            split = [axis for axis in _axes_of((entry,)) if axis in tensor_like]
            if name in STACK_NAMES:
                runs *= size
            elif kind == "embed":
                embed *= size
            else:
                other *= size / math.prod(mesh[axis] for axis in split)
                axes.update(split)
        dims = [k for k, name in zip(role, names) if name not in STACK_NAMES]
        row_parallel = dims[-1] == "embed" and dims[0] != "embed"
        found.append(Projection(runs, embed, other, frozenset(axes), row_parallel))
    return found


def _activation_itemsize(report: Report) -> int:
    """Bytes per activation element: the declared activations' widest dtype, else the parameters'."""
    sizes = [np.dtype(a.dtype).itemsize for a in report.arrays if a.kind == "activation"]
    sizes = sizes or [np.dtype(a.dtype).itemsize for a in report.arrays if a.kind == "param"]
    return max(sizes, default=4)


def _axes_of(spec: Sequence[SpecEntry]) -> set[str]:
    """Every mesh axis a spec names, in any of its entries."""
    return set().union(*map(spec_axes, spec))


def tokens_per_step(report: Report, roles: dict[str, str]) -> int:
    """The product of the model inputs' batch and sequence dimensions (the largest input's)."""
    best = 1
    for a in report.arrays:
        if a.kind != "input" or not a.logical_axes:
            continue
        count = math.prod(size for size, name in zip(a.shape, a.logical_axes)
                          if isinstance(name, str) and roles.get(name, default_roles([name])[name]) in ("batch", "sequence"))
        best = max(best, count)
    return best


def stage1_estimate(report: Report, target: Target, roles: dict[str, str] | None = None) -> tuple[Estimate, str, dict[str, float]]:
    """Stage 1's estimate of one analysed layout, its largest collective and its collective time per mesh axis
    (roles by convention, then ``roles``)."""
    chosen = default_roles(sorted({n for a in report.arrays for n in (a.logical_axes or ()) if isinstance(n, str)}))
    chosen.update(roles or {})
    return estimate_candidate(report, target, tokens_per_step(report, chosen), report.totals.param_count, chosen)
