"""The layout advisor: given a model and a TPU slice, which mesh and which rules?

Two stages, as a person would do it, but over every candidate:

1. **Stage 1, no compile.** Every candidate (the model's own layout, and one per factorization
   of the slice's devices over the named axes, with rules written from the model's logical
   names by role) is analysed: the state per device is exact (the analysis), layouts JAX would
   refuse are dropped and counted, and an analytic roofline estimates the step (below). The
   shortlist is the candidates whose state fits the device's HBM, best estimate first.
2. **Stage 2, XLA-verified.** Up to ``compiles`` shortlisted candidates (and the model's own
   layout) are compiled for the target through ``target_compile.compile_target`` (its child
   process, disk cache and Stop): XLA's peak per device and the fits verdict, flops, collectives
   and the roofline from the compiled program. The first is stage 1's best; each next one is the
   best by stage 1's terms scaled by XLA's over stage 1's on what was compiled so far
   (``calibration``), so one compile corrects the estimate's blind spots for this model.
   Candidates XLA says fit are ranked by that step bound; the ones that do not fit are reported
   with by how much. The *depth shortcut* (``stage2(shortcut=True)``) compiles each at two small
   depths and extrapolates linearly in depth (labelled ``extrapolated``), then compiles the best
   in full and reports how close the extrapolation was.

**Search space.** Mesh axes are named by role: ``data`` (batch only), ``fsdp`` (batch, and the
parameters' embed dimension: ZeRO-3), ``tensor`` (heads, kv_heads, mlp, hidden, vocab:
Megatron), plus ``sequence`` when the model has a sequence name (``length``) and ``expert``
when it has an expert name. A mesh is a factorization of the device count over those axes in
that order (axes of size 1 left out); its rules give every role the mesh axes it has:

    batch     -> (data, fsdp, expert)        MaxText's activation_batch
    embed     -> (fsdp, sequence, expert)    MaxText's embed (FSDP over every non-tensor axis)
    tensor    -> tensor                      heads, kv_heads, mlp, hidden, vocab
    sequence  -> sequence                    length (context parallelism)
    expert    -> expert
    layer, kv, unknown names -> None         replicated

Roles come from the names' conventions (the Flax guides', MaxText's, T5X's: ``ROLE_NAMES``)
and can be overridden (``roles={"hidden": "tensor"}``). With a 2^k device count and a axes
there are C(k + a - 1, a - 1) meshes: 10 for the guide's MLP on 8 devices (data, fsdp,
tensor), 84 for a transformer on 64 (data, fsdp, sequence, tensor).

**Stage 1's roofline** (an estimate, labelled so wherever shown), per device and step, with the
formulas of "How to Scale Your Model" (Austin et al., 2025), https://jax-ml.github.io/scaling-book/:

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
import time
from typing import Any, Callable, Sequence

from explorer.errors import ExplorerError
from explorer.layout import Layout, parse_layout
from explorer.roofline import Collective, Estimate, collective_seconds
from explorer.targets import Target, parse_target

ROLES = ("batch", "embed", "tensor", "sequence", "expert", "none")
# Logical names by convention: the Flax guides' (batch, hidden, embed), this project's transformer,
# MaxText's base.yml (activation_*, q_heads, joined_kv, exp...), T5X/flaxformer's (joined_kv, mlp, vocab).
ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "batch": ("batch", "activation_batch", "data"),
    "embed": ("embed", "emb", "embed_dim", "d_model", "model_dim"),
    "tensor": ("hidden", "heads", "q_heads", "kv_heads", "mlp", "mlp_dim", "ff", "joined_kv", "vocab", "activation_heads",
               "activation_kv_heads", "activation_mlp", "activation_vocab"),
    "sequence": ("length", "seq", "sequence", "activation_length", "q_length", "kv_length"),
    "expert": ("expert", "experts", "exp", "activation_exp"),
}
AXIS_ORDER = ("data", "fsdp", "sequence", "expert", "tensor")  # mesh axes, outermost first (tensor innermost)
KV_NAMES = ("kv_heads", "activation_kv_heads")
STAGE1_NOTE = "stage 1, no compile: 6·N·tokens compute, state and projection traffic, the book's collectives"


def default_roles(names: Sequence[str]) -> dict[str, str]:
    """Each logical name's role by convention ("none": replicated).

    >>> default_roles(["batch", "embed", "hidden", "layer"])
    {'batch': 'batch', 'embed': 'embed', 'hidden': 'tensor', 'layer': 'none'}
    """
    found = {}
    for name in names:
        found[name] = next((role for role, known in ROLE_NAMES.items() if name in known), "none")
    return found


def check_roles(roles: dict[str, str], names: Sequence[str]) -> None:
    for name, role in roles.items():
        if name not in names:
            raise ExplorerError("roles", name, f"is not a logical name of this model; its names: {', '.join(names)}")
        if role not in ROLES:
            raise ExplorerError(f"roles[{name!r}]", role, f"is not a role; choose one of {', '.join(ROLES)}")


def mesh_axes_for(roles: dict[str, str]) -> tuple[str, ...]:
    """The named axes the search factorizes over: data, fsdp, tensor, and sequence/expert where the model has them."""
    present = set(roles.values())
    return tuple(a for a in AXIS_ORDER if a in ("data", "fsdp", "tensor") or a in present)


def factorizations(devices: int, axes: int) -> list[tuple[int, ...]]:
    """Every ordered way to write ``devices`` as a product of ``axes`` whole numbers, in a fixed order.

    >>> factorizations(4, 2)
    [(1, 4), (2, 2), (4, 1)]
    """
    if axes == 1:
        return [(devices,)]
    out = []
    for first in range(1, devices + 1):
        if devices % first == 0:
            out += [(first,) + rest for rest in factorizations(devices // first, axes - 1)]
    return out


def rules_for(roles: dict[str, str], mesh_axes: Sequence[str]) -> list[list]:
    """The rules a mesh gets: each role its axes (see the module docstring), in the names' sorted order."""
    present = set(mesh_axes)

    def axes(*names: str):
        chosen = [a for a in names if a in present]
        return None if not chosen else chosen[0] if len(chosen) == 1 else chosen

    by_role = {
        "batch": axes("data", "fsdp", "expert"), "embed": axes("fsdp", "sequence", "expert"), "tensor": axes("tensor"),
        "sequence": axes("sequence"), "expert": axes("expert"), "none": None,
    }
    return [[name, by_role[roles[name]]] for name in sorted(roles)]


def candidate_layouts(layout: Layout, target: Target, roles: dict[str, str] | None = None) -> list[Layout]:
    """The search space: the layout itself first, then one layout per factorization (fixed order).

    A layout with Explicit axes keeps its own mesh axes, axis types and rules, and the search
    factorizes the target's devices over those axes: such a model names mesh axes in its own code
    (``out_sharding=P('data', ...)``, ``reshard``), so its activations are the model's to decide,
    not the rules', and a mesh with other axis names would not trace.
    """
    from explorer.analysis import logical_names

    if layout.mesh.explicit:
        if roles:
            raise ExplorerError("roles", sorted(roles), "apply to the advisor's own rules; a layout with Explicit axes keeps "
                                                       "its own mesh axes and rules, and only their sizes are searched")
        return _explicit_candidates(layout, target)
    names = logical_names(layout.model, tuple(layout.mesh.axes))
    chosen = default_roles(names)
    if roles:
        check_roles(roles, names)
        chosen.update(roles)
    axes = mesh_axes_for(chosen)
    out, seen = [layout], {_identity(layout)}
    for sizes in factorizations(target.devices, len(axes)):
        kept = [(a, s) for a, s in zip(axes, sizes) if s > 1] or [(axes[0], 1)]
        mesh_axes = [a for a, _ in kept]
        name = "x".join(f"{a}{s}" for a, s in kept)
        candidate = parse_layout({
            "name": name, "mesh": {"shape": [s for _, s in kept], "axes": mesh_axes},
            "rules": rules_for(chosen, mesh_axes), "model": {"name": layout.model.name, "options": dict(layout.model.options)},
        })
        if _identity(candidate) not in seen:
            seen.add(_identity(candidate))
            out.append(candidate)
    return out


def _explicit_candidates(layout: Layout, target: Target) -> list[Layout]:
    """The layout, then every factorization of the target's devices over its own mesh axes (sizes only change)."""
    out, seen = [layout], {_identity(layout)}
    for sizes in factorizations(target.devices, len(layout.mesh.axes)):
        data = layout.to_dict()
        data["name"] = "x".join(f"{a}{s}" for a, s in zip(layout.mesh.axes, sizes))
        data["mesh"]["shape"] = list(sizes)
        candidate = parse_layout(data)
        if _identity(candidate) not in seen:
            seen.add(_identity(candidate))
            out.append(candidate)
    return out


def _identity(layout: Layout) -> str:
    data = layout.to_dict()
    data.pop("name")
    import json

    return json.dumps(data, sort_keys=True)


# --- stage 1 ---------------------------------------------------------------------------------------

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
    fits: bool | None = None  # stage 1: the state fits HBM; stage 2: XLA's verdict
    peak_bytes: int | None = None
    headroom_bytes: int | None = None
    compiled: dict | None = None  # compile_target's result, when verified (``extrapolate``'s, when extrapolated)
    extrapolation: dict | None = None  # the extrapolated result, kept when the candidate was then compiled in full
    collective_by_axis: dict[str, float] = dataclasses.field(default_factory=dict)  # stage 1's collective seconds per mesh axis

    @property
    def extrapolation_error(self) -> dict[str, float | None] | None:
        """Extrapolated over compiled in full, per figure, when both were made (1.0: exact)."""
        return extrapolation_error(self.extrapolation, self.compiled) if self.extrapolation and self.compiled else None

    @property
    def step_s(self) -> float:
        return self.compiled["estimate"]["step_s"] if self.verified and self.compiled["estimate"] else self.estimate.step_s

    @property
    def bound(self) -> str:
        return self.compiled["estimate"]["bound"] if self.verified and self.compiled["estimate"] else self.estimate.bound

    @property
    def mfu_ceiling(self) -> float:
        return self.compiled["estimate"]["mfu_ceiling"] if self.verified and self.compiled["estimate"] else self.estimate.mfu_ceiling


def _collective(op: str, bytes_: float, axes: tuple[str, ...], group: int) -> Collective:
    return Collective(op, 1, int(bytes_), axes, group, 1)


def estimate_candidate(report, target: Target, tokens: int, param_count: int, roles: dict[str, str]) -> tuple[Estimate, str, dict[str, float]]:
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
                collectives.append((f"reduce-scatter of gradients over {axis}", _collective("reduce-scatter", gathered / size, (axis,), size)))
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


def _projections(report, roles: dict[str, str], tensor_like: set[str], mesh: dict[str, int]) -> list[Projection]:
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


def _activation_itemsize(report) -> int:
    """Bytes per activation element: the declared activations' widest dtype, else the parameters'."""
    import numpy as np

    sizes = [np.dtype(a.dtype).itemsize for a in report.arrays if a.kind == "activation"]
    sizes = sizes or [np.dtype(a.dtype).itemsize for a in report.arrays if a.kind == "param"]
    return max(sizes, default=4)


def _axes_of(spec) -> set[str]:
    out: set[str] = set()
    for entry in spec:
        if entry is None:
            continue
        out.update((entry,) if isinstance(entry, str) else entry)
    return out


def tokens_per_step(report, roles: dict[str, str]) -> int:
    """The product of the model inputs' batch and sequence dimensions (the largest input's)."""
    best = 1
    for a in report.arrays:
        if a.kind != "input" or not a.logical_axes:
            continue
        count = math.prod(size for size, name in zip(a.shape, a.logical_axes)
                          if isinstance(name, str) and roles.get(name, default_roles([name])[name]) in ("batch", "sequence"))
        best = max(best, count)
    return best


@dataclasses.dataclass
class Search:
    """A search's state, filled as it runs (the page draws it after every step)."""

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
    depth: "Depth | None" = None  # the depth shortcut's option(s), or why it was not used; None: not asked
    full_compiles: int = 0  # extrapolated candidates then compiled in full
    calibration: dict[str, float] = dataclasses.field(default_factory=dict)  # XLA's over stage 1's terms (``calibration``)

    def ranked(self) -> list[Candidate]:
        return rank(self.candidates, self.target.chip.device_hbm_bytes)

    def smallest_state(self) -> Candidate | None:
        return min(self.candidates, key=lambda c: (c.state_bytes, c.layout.name), default=None)


def stage1(layout: Layout, target: Target | str, roles: dict[str, str] | None = None, search: Search | None = None) -> Search:
    """Analyse every candidate: exact state per device, refusals counted, an estimated step each.

    The model is traced once for every candidate (``analysis.model_for_layouts``) and each generated
    candidate is read from it without a forward trace under its own mesh and rules
    (``analyze(..., received=False)``): their rules are the advisor's, applied to the names the
    probe read. The user's own layout gets the full analysis (its rules may be resolved by the
    model's own code), as does every candidate of a model whose code refused the probe.
    """
    from explorer.analysis import analyze, model_for_layouts

    target = parse_target(target) if isinstance(target, str) else target
    search = search or Search(target)
    start = time.perf_counter()
    layouts = candidate_layouts(layout, target, roles)
    try:  # Explicit axes: each candidate is read under its own mesh (the types depend on the sizes)
        shared = model_for_layouts(layouts[1:]) if len(layouts) > 1 and not layout.mesh.explicit else None
    except ExplorerError:  # the model's code refuses some of the names: each candidate is read (and refused) on its own
        shared = None
    if shared is not None and shared.probe_error:
        shared = None
    for index, candidate in enumerate(layouts):
        own = index == 0
        if candidate.mesh.size != target.devices:
            search.refused += 1
            search.refused_examples.append(f"{candidate.name}: its mesh has {candidate.mesh.size} devices, the target {target.devices}")
            continue
        search.searched += 1
        try:  # a model that names mesh axes by hand (the NNX guide's P('data', 'model')) refuses other axis names
            report = analyze(candidate) if own or shared is None else analyze(candidate, model=shared, received=False)
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
        estimate, largest, by_axis = stage1_estimate(report, target, roles)
        state = report.totals.state_bytes
        search.candidates.append(Candidate(
            candidate, state, estimate, largest, own=own, fits=state <= target.chip.device_hbm_bytes, collective_by_axis=by_axis,
        ))
    search.stage1_s = time.perf_counter() - start
    search.elapsed_s = search.stage1_s
    return search


def stage1_estimate(report, target: Target, roles: dict[str, str] | None = None) -> tuple[Estimate, str, dict[str, float]]:
    """Stage 1's estimate of one analysed layout, its largest collective and its collective time per mesh axis
    (roles by convention, then ``roles``)."""
    chosen = default_roles(sorted({n for a in report.arrays for n in (a.logical_axes or ()) if isinstance(n, str)}))
    chosen.update(roles or {})
    return estimate_candidate(report, target, tokens_per_step(report, chosen), report.totals.param_count, chosen)


def _errors(report) -> list:
    from explorer.analysis import ERROR_CODES

    return [w for w in report.warnings if w.code in ERROR_CODES]


def shortlist(search: Search) -> list[Candidate]:
    """The candidates whose state fits the device's HBM, best estimated step first (deterministic)."""
    fitting = [c for c in search.candidates if c.state_bytes <= search.target.chip.device_hbm_bytes]
    return sorted(fitting, key=_estimate_key)


def _estimate_key(c: Candidate) -> tuple:
    """Stage 1's order: the estimated step; where that ties (every candidate compute-bound), less
    estimated communication first (it must hide behind the compute), then less state, then the name."""
    return (c.estimate.step_s, c.estimate.collective_s, c.state_bytes, c.layout.name)


def rank(candidates: Sequence[Candidate], hbm_bytes: int = 0) -> list[Candidate]:
    """Best first: XLA-verified and fitting by step bound; then stage-1 estimates whose state fits, by
    estimated step; then everything that does not fit, by how much (XLA's peak, else the state, over
    ``hbm_bytes``; least first). Ties by state, then name."""
    def key(c: Candidate):
        if c.verified and c.fits:
            return (0, c.step_s, c.state_bytes, c.layout.name)
        if not c.verified and c.fits:
            return (1,) + _estimate_key(c)
        over = -c.headroom_bytes if c.headroom_bytes is not None else c.state_bytes - hbm_bytes
        return (2, over, c.state_bytes, c.layout.name)

    return sorted(candidates, key=key)


# --- the depth shortcut -----------------------------------------------------------------------------

DEPTH_OPTIONS = ("layers", "num_layers", "n_layers", "n_layer", "num_hidden_layers", "num_decoder_layers", "num_encoder_layers",
                 "decoder_layers", "encoder_layers", "base_num_decoder_layers")
SHORTCUT_DEPTHS = (2, 4)  # the two small depths compiled; both scanned loops, so XLA's loop handling is the full model's
MEMORY_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes")


@dataclasses.dataclass(frozen=True)
class Depth:
    """How a model's depth is set: the option(s) (all at ``full``), or why there is no shortcut (``why``)."""

    options: tuple[str, ...] = ()
    full: int = 0
    why: str = ""

    @property
    def usable(self) -> bool:
        return bool(self.options)


def depth_of(layout: Layout, option: str | None = None, depths: Sequence[int] = SHORTCUT_DEPTHS) -> Depth:
    """The model option(s) that set its depth: ``option`` when given, else every option with a known depth name
    (``DEPTH_OPTIONS``: this project's ``layers``, ``num_layers``, T5X's ``num_encoder_layers``/``num_decoder_layers``...).

    >>> from explorer.layout import seed_layout
    >>> depth_of(seed_layout()).why
    'layers=4 is no deeper than the small depths 2, 4: compiled in full'
    """
    options = dict(layout.model.options)
    if option is not None:
        if option not in options:
            raise ExplorerError("--depth-option", option, f"is not an option of this layout's model; its options: {', '.join(sorted(options)) or 'none'}")
        names = (option,)
    else:
        names = tuple(n for n in DEPTH_OPTIONS if n in options)
        if not names:
            return Depth(why=f"no depth option found among the model's options ({', '.join(sorted(options)) or 'none'}); name one with --depth-option")
    values = {options[n] for n in names}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ExplorerError("--depth-option", names[0], f"is not a whole number of layers ({options[names[0]]!r})")
    if len(values) != 1:
        return Depth(why=f"the depth options {', '.join(f'{n}={options[n]}' for n in names)} differ: one line in depth cannot reach them")
    full = values.pop()
    if full <= max(depths):
        return Depth(why=f"{names[0]}={full} is no deeper than the small depths {', '.join(map(str, depths))}: compiled in full")
    return Depth(names, full)


def at_depth(layout: Layout, depth: Depth, layers: int) -> Layout:
    """The same layout with the model ``layers`` deep (every depth option), named so."""
    data = layout.to_dict()
    data["name"] = f"{layout.name}@{layers}"
    data["model"]["options"].update({n: layers for n in depth.options})
    return parse_layout(data)


def extrapolate(low: dict, high: dict, depths: Sequence[int], full: int, target: Target) -> dict:
    """A compile result at depth ``full`` extrapolated linearly from results at ``depths`` (two depths).

    Every figure that grows with depth (XLA's memory, flops, bytes accessed, each collective's count
    and bytes, matched by op, mesh axes and group) is ``f(full) = f(d1) + (f(d2) - f(d1)) x (full - d1)
    / (d2 - d1)``; the roofline is recomputed from them. Labelled ``extrapolated`` with the depths.

    >>> r = lambda peak, flops: {"memory": {"peak_bytes": peak}, "flops": flops, "bytes_accessed": 10.0, "collectives": [],
    ...                          "compiled": True, "mesh": {}}
    >>> from explorer.targets import parse_target
    >>> out = extrapolate(r(100, 1e9), r(160, 2e9), (2, 4), 32, parse_target("v5litepod-8"))
    >>> out["memory"]["peak_bytes"], out["flops"]
    (1000, 16000000000.0)
    """
    from explorer import roofline

    d1, d2 = depths
    t = (full - d1) / (d2 - d1)

    def line(a, b):
        return None if a is None or b is None else a + (b - a) * t

    memory = {}
    for key in MEMORY_FIELDS:
        value = line(low["memory"].get(key), high["memory"].get(key))
        memory[key] = None if value is None else max(int(round(value)), 0)
    flops, accessed = line(low["flops"], high["flops"]), line(low["bytes_accessed"], high["bytes_accessed"])
    collectives = []
    by_key = lambda c: (c["op"], tuple(c["mesh_axes"]), c["group_size"], c["ici_axes"])
    lows = {by_key(c): c for c in low["collectives"]}
    highs = {by_key(c): c for c in high["collectives"]}
    for key in sorted(set(lows) | set(highs)):
        a, b = lows.get(key, {"count": 0, "bytes": 0}), highs.get(key, {"count": 0, "bytes": 0})
        c = roofline.Collective(key[0], max(int(round(line(a["count"], b["count"]))), 0), max(int(round(line(a["bytes"], b["bytes"]))), 0),
                                key[1], key[2], key[3])
        if c.bytes:
            collectives.append(c)
    hbm = target.chip.device_hbm_bytes
    peak = memory["peak_bytes"]
    estimate = roofline.estimate(flops, accessed, collectives, target.chip) if flops is not None and accessed is not None else None
    return {
        "target": target.to_dict(), "mesh": dict(high.get("mesh", {})), "compiled": bool(low["compiled"]) and bool(high["compiled"]),
        "compile_s": (low.get("compile_s") or 0.0) + (high.get("compile_s") or 0.0),
        "memory": memory, "fits": peak is not None and peak <= hbm and bool(low["compiled"]) and bool(high["compiled"]),
        "headroom_bytes": hbm - (peak or 0), "flops": flops, "bytes_accessed": accessed,
        "collectives": [{"op": c.op, "count": c.count, "bytes": c.bytes, "mesh_axes": list(c.mesh_axes), "group_size": c.group_size,
                         "ici_axes": c.ici_axes, "seconds": roofline.collective_seconds(c, target.chip)} for c in collectives],
        "estimate": estimate.to_dict() if estimate else None,
        "extrapolated": {"depths": list(depths), "depth": full},
    }


def extrapolation_error(extrapolated: dict, full: dict) -> dict[str, float | None]:
    """Extrapolated over compiled, per figure (1.0: exact): peak, flops, bytes accessed, collective bytes, step."""
    def ratio(a, b):
        return None if a is None or not b else a / b

    collective = lambda r: sum(c["bytes"] for c in r["collectives"])
    step = lambda r: (r.get("estimate") or {}).get("step_s")
    return {
        "peak_bytes": ratio(extrapolated["memory"]["peak_bytes"], full["memory"]["peak_bytes"]),
        "flops": ratio(extrapolated["flops"], full["flops"]),
        "bytes_accessed": ratio(extrapolated["bytes_accessed"], full["bytes_accessed"]),
        "collective_bytes": ratio(collective(extrapolated), collective(full)),
        "step_s": ratio(step(extrapolated), step(full)),
    }


# --- stage 2 ---------------------------------------------------------------------------------------

def stage2(
    search: Search,
    compiles: int = 4,
    on_progress: Callable[[str, float], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    shortcut: bool | None = None,
    depth_option: str | None = None,
    full_compiles: int = 2,
) -> Search:
    """Compile up to ``compiles`` shortlisted candidates and the user's own layout; XLA's figures replace the estimate.

    The first is stage 1's best; each next one the best by the estimate calibrated on what XLA said
    so far (``next_to_compile``); then the user's own layout, where the shortlist's turns did not reach it.

    ``shortcut`` (the depth shortcut): compile each at two small depths (``SHORTCUT_DEPTHS``) and
    extrapolate to the model's depth (``extrapolate``, labelled ``extrapolated``), then compile the
    best-ranked in full (up to ``full_compiles`` times, while the top row is extrapolated) and keep
    both figures and their ratio. None: on where it saves time, for a model with a depth option
    whose layers are not scanned (a scanned model compiles in about the same time at any depth,
    measured in the README). ``depth_option`` names the model's depth option when no known name is.
    Stop (``should_stop()`` True) kills the running compile and keeps what was compiled.
    """
    from explorer.target_compile import Stopped

    start = time.perf_counter() - search.elapsed_s
    budget = max(compiles, 0)
    own = next((c for c in search.candidates if c.own), None)
    total = min(budget, len(shortlist(search))) + int(own is not None and budget > 0)  # at most: the own layout may be among the picks
    first = next(iter(shortlist(search)), own)
    progress = on_progress or (lambda *_: None)
    depth = None
    if first is not None and budget > 0 and (shortcut or shortcut is None):
        depth = depth_of(first.layout, depth_option)
        if shortcut is None and depth.usable and first.layout.model.options.get("scan") is True:
            depth = Depth(why="the model's layers are scanned: a compile takes about as long at any depth, so each candidate is compiled in full")
        search.depth = depth
    use = depth is not None and depth.usable
    tried: set[str] = set()
    try:
        for number in range(1, budget + 2 if budget else 1):
            if number <= budget:
                candidate = next_to_compile(search, tried)
            else:  # the user's own layout, where the shortlist's turn did not reach it
                candidate = next((c for c in search.candidates if c.own and c.layout.name not in tried), None)
            if candidate is None:
                continue
            tried.add(candidate.layout.name)
            search.stage = f"stage 2: compiling {number} of at most {total} ({candidate.layout.name})"
            if use:
                found = []
                for layers in SHORTCUT_DEPTHS:
                    search.stage = f"stage 2: compiling {number} of at most {total} ({candidate.layout.name}) at depth {layers}"
                    found.append(_compile(search, at_depth(candidate.layout, depth, layers), progress, should_stop))
                if None in found:
                    continue
                result = extrapolate(found[0], found[1], SHORTCUT_DEPTHS, depth.full, search.target)
                result["extrapolated"]["options"] = list(depth.options)
                _replace(search, candidate, verified(candidate, result, extrapolated=True))
            else:
                result = _compile(search, candidate.layout, progress, should_stop)
                if result is not None:
                    _replace(search, candidate, verified(candidate, result))
            search.calibration = calibration(search)
            search.elapsed_s = time.perf_counter() - start
        for number in range(1, full_compiles + 1 if use else 1):
            top = next(iter(search.ranked()), None)
            if top is None or not top.extrapolated:
                break
            search.stage = f"stage 2: compiling the best extrapolated candidate in full ({top.layout.name}, {number} of at most {full_compiles})"
            result = _compile(search, top.layout, progress, should_stop)
            if result is None:
                break
            search.full_compiles += 1
            _replace(search, top, dataclasses.replace(verified(top, result), extrapolation=top.compiled))
            search.elapsed_s = time.perf_counter() - start
    except Stopped:
        search.stopped = True
    search.stage = "stopped" if search.stopped else "done"
    search.elapsed_s = time.perf_counter() - start
    return search


def calibration(search: Search) -> dict[str, float]:
    """Per roofline term, XLA's over stage 1's for the candidates compiled so far: the smallest ratio seen (1 before any).

    Stage 1's terms are coarse in different ways for different models (measured in the README: on
    Llama-2-7B shapes XLA's bytes accessed were 3-13x the estimate's HBM traffic, on T5 4-22x), but
    the error of one term varies much less between layouts of one model than between terms. Scaling
    each term by what the compiled candidates showed ranks the rest by an estimate corrected on this
    model. The smallest ratio, not a mean: the calibrated estimate stays optimistic (a lower bound,
    as the roofline is), so one layout that XLA handles badly (T5 with its length sharded: 22x) does
    not condemn the others; XLA ranks whatever is compiled. Collectives are also calibrated per mesh
    axis (``collective_s:AXIS``): XLA's collectives over the axis (one over several axes shared
    between them in proportion to stage 1's estimates for them) over stage 1's. An *estimate*
    still, used to choose what to compile next, never shown as XLA's.
    """
    ratios: dict[str, list[float]] = {"compute_s": [], "memory_s": [], "collective_s": []}
    for c in search.candidates:
        if not c.verified or not c.compiled or not c.compiled.get("estimate"):
            continue
        for term in ("compute_s", "memory_s", "collective_s"):
            stage1, xla = getattr(c.estimate, term), c.compiled["estimate"][term]
            if stage1 > 0 and xla > 0:
                ratios[term].append(xla / stage1)
        # XLA's collectives per mesh axis; one over several axes shared between them as stage 1's estimates for them are.
        xla_by_axis: dict[str, float] = {}
        for k in c.compiled["collectives"]:
            axes = list(k["mesh_axes"] or ())
            weights = [c.collective_by_axis.get(axis, 0.0) for axis in axes]
            weights = weights if sum(weights) > 0 else [1.0] * len(axes)
            for axis, weight in zip(axes, weights):
                xla_by_axis[axis] = xla_by_axis.get(axis, 0.0) + k["seconds"] * weight / sum(weights)
        for axis, stage1 in c.collective_by_axis.items():
            if stage1 > 0:
                ratios.setdefault(f"collective_s:{axis}", []).append(xla_by_axis.get(axis, 0.0) / stage1)
    return {term: min(found) if found else 1.0 for term, found in ratios.items()}


def calibrated(c: Candidate, factors: dict[str, float]) -> Estimate:
    """Stage 1's estimate with each term scaled by ``calibration``'s factor (collectives per mesh axis where one was measured)."""
    if c.collective_by_axis:
        collective = sum(s * factors.get(f"collective_s:{axis}", factors["collective_s"]) for axis, s in c.collective_by_axis.items())
    else:
        collective = c.estimate.collective_s * factors["collective_s"]
    return Estimate(c.estimate.compute_s * factors["compute_s"], c.estimate.memory_s * factors["memory_s"], collective)


def next_to_compile(search: Search, tried: set[str] = frozenset()) -> Candidate | None:
    """The shortlisted candidate to compile next: the best by the estimate calibrated on what was compiled so far."""
    factors = calibration(search)
    pool = [c for c in shortlist(search) if not c.verified and not c.own and c.layout.name not in tried]  # the own layout has its own turn
    return min(pool, key=lambda c: (calibrated(c, factors).step_s,) + _estimate_key(c), default=None)


def _compile(search: Search, layout: Layout, progress, should_stop) -> dict | None:
    """One compile for the search's target (its child process, cache and Stop); None when XLA refused it (noted)."""
    from explorer.target_compile import compile_target

    try:
        result, cached = compile_target(
            layout, search.target, on_stage=lambda stage, elapsed: progress(f"{search.stage}: {stage}", elapsed), should_stop=should_stop,
        )
    except ExplorerError as error:
        search.failures.append(f"{layout.name}: {error}")
        return None
    search.compiles += 1
    search.cached_compiles += int(cached)
    return result


def _replace(search: Search, old: Candidate, new: Candidate) -> None:
    search.candidates[search.candidates.index(old)] = new


def verified(candidate: Candidate, result: dict, extrapolated: bool = False) -> Candidate:
    """The candidate with XLA's figures from a ``compile_target`` result (or one ``extrapolate`` made)."""
    largest = max(result["collectives"], key=lambda c: (c["seconds"], c["op"]), default=None)
    text = (f"{largest['op']} over {'x'.join(largest['mesh_axes']) or '-'}: {largest['count']}x, "
            f"≥ {largest['seconds'] * 1e3:.3g} ms") if largest and largest["seconds"] else "none"
    return dataclasses.replace(
        candidate, verified=True, extrapolated=extrapolated, fits=bool(result["fits"]), peak_bytes=int(result["memory"]["peak_bytes"]),
        headroom_bytes=int(result["headroom_bytes"]), compiled=result, largest_collective=text + (" (extrapolated)" if extrapolated else ""),
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
) -> Search:
    """Both stages. Example: ``advise(load_layout_file("layouts/seed-2x4.json"), "v5litepod-8", compiles=2)``."""
    search = stage1(layout, target, roles)
    if on_progress:
        on_progress(f"stage 1: {len(search.candidates)} candidates analysed, {search.refused} refused", search.stage1_s)
    return stage2(search, compiles, on_progress, should_stop, shortcut=shortcut, depth_option=depth_option)


# --- the race of the top three ---------------------------------------------------------------------

RACE_COUNT = 3


def race_refusal(search: Search) -> str | None:
    """None when the top candidates can be raced on this process's own devices (as many as the target has), else why not."""
    import jax

    here, kind = jax.device_count(), jax.devices()[0].device_kind
    if here != search.target.devices:
        return (f"This process has {here} device(s) ({kind}) and {search.target.name} has {search.target.devices}: a race runs "
                "the candidates on this process's own devices, so it needs as many as the target.")
    if len(race_candidates(search)) < 2:
        return "Fewer than two candidates fit the target: nothing to race."
    return None


def race_candidates(search: Search, count: int = RACE_COUNT) -> list[Candidate]:
    """The best ``count`` candidates that fit (rank order), for ``compare.race`` on this process's devices."""
    return [c for c in search.ranked() if c.fits][:count]


def race_top(search: Search, rounds: int = 3, steps: int = 5, **kwargs):
    """Race the top three on this process's devices with ``compare.race`` (A B C A B C ...); its ``RaceResult``."""
    from explorer.compare import race

    why = race_refusal(search)
    if why:
        raise ExplorerError("race", search.target.name, why)
    return race([c.layout for c in race_candidates(search)], rounds=rounds, steps=steps, **kwargs)


# --- output ----------------------------------------------------------------------------------------

def candidate_to_dict(rank_: int, c: Candidate) -> dict[str, Any]:
    compiled = c.compiled or {}
    return {
        "rank": rank_, "layout": c.layout.to_dict(), "own": c.own,
        "mesh": {"shape": list(c.layout.mesh.shape), "axes": list(c.layout.mesh.axes),
                 "placement": compiled.get("mesh", {}).get("placement"), "placement_method": compiled.get("mesh", {}).get("placement_method")},
        "state_bytes": c.state_bytes, "verified": c.verified, "extrapolated": c.extrapolated,
        "fits": bool(c.fits), "peak_bytes": c.peak_bytes, "headroom_bytes": c.headroom_bytes,
        "step_s": c.step_s, "bound": c.bound, "mfu_ceiling": c.mfu_ceiling,
        "step_source": ("xla_extrapolated" if c.extrapolated else "xla_roofline") if c.verified else "stage1_estimate",
        "extrapolation": None if not (c.extrapolated or c.extrapolation) else _extrapolation_dict(c.compiled if c.extrapolated else c.extrapolation),
        "extrapolation_error": c.extrapolation_error,
        "estimate": {"compute_s": c.estimate.compute_s, "memory_s": c.estimate.memory_s, "collective_s": c.estimate.collective_s,
                     "step_s": c.estimate.step_s, "bound": c.estimate.bound, "note": STAGE1_NOTE},
        "largest_collective": c.largest_collective,
    }


def _extrapolation_dict(result: dict) -> dict[str, Any]:
    """An extrapolated result's figures: from which depths, to which, and what they gave."""
    estimate = result.get("estimate") or {}
    return {**result["extrapolated"], "peak_bytes": result["memory"]["peak_bytes"], "fits": result["fits"], "flops": result["flops"],
            "bytes_accessed": result["bytes_accessed"], "collective_bytes": sum(c["bytes"] for c in result["collectives"]),
            "step_s": estimate.get("step_s"), "bound": estimate.get("bound")}


def search_to_dict(search: Search) -> dict[str, Any]:
    ranked = search.ranked()
    smallest = search.smallest_state()
    hbm = search.target.chip.device_hbm_bytes
    out = {
        "target": search.target.to_dict(),
        "searched": search.searched, "refused": search.refused, "refused_examples": search.refused_examples,
        "compiles": search.compiles, "cached_compiles": search.cached_compiles, "full_compiles": search.full_compiles,
        "calibration": search.calibration or None,
        "depth_shortcut": None if search.depth is None else {
            "used": search.depth.usable, "options": list(search.depth.options), "depth": search.depth.full or None,
            "depths": list(SHORTCUT_DEPTHS) if search.depth.usable else None, "why_not": search.depth.why or None},
        "stage1_s": search.stage1_s, "elapsed_s": search.elapsed_s, "stopped": search.stopped, "failures": search.failures,
        "candidates": [candidate_to_dict(i, c) for i, c in enumerate(ranked, 1)],
        "fits_none": not any(c.fits for c in ranked),
        "smallest_state": None if smallest is None else {"bytes": smallest.state_bytes, "layout": smallest.layout.name, "hbm_bytes": hbm},
    }
    return out


def verdict_text(search: Search) -> str:
    """One sentence: the advice, or that nothing fits and the smallest state found."""
    from explorer.text import human_bytes

    ranked = search.ranked()
    hbm = search.target.chip.device_hbm_bytes
    if not ranked:
        return f"No candidate could be analysed for {search.target.name} ({search.refused} refused)."
    best = ranked[0]
    if not best.fits:
        smallest = search.smallest_state()
        return (f"No layout fits {search.target.name}: the smallest state per device found is {human_bytes(smallest.state_bytes)} "
                f"({smallest.layout.name}), against {human_bytes(hbm)} of HBM per device.")
    how = "XLA-verified" if best.verified else "estimated only (not compiled)"
    return (f"Advice for {search.target.name}: {best.layout.name} — step ≥ {best.step_s * 1e3:.3g} ms ({best.bound}-bound, "
            f"{how}), peak {human_bytes(best.peak_bytes) if best.peak_bytes is not None else 'not compiled'} of {human_bytes(hbm)}.")


def rules_text(layout: Layout) -> str:
    return "; ".join(f"{r.logical}:{'-' if r.mesh is None else ','.join(r.mesh_axes)}" for r in layout.rules)


def table_rows(search: Search) -> list[dict[str, Any]]:
    """The ranked table as plain rows (the page and the command line draw it)."""
    from explorer.text import human_bytes, share

    rows = []
    for i, c in enumerate(search.ranked(), 1):
        label = " (extrapolated)" if c.extrapolated else ""
        rows.append({
            "rank": i, "layout": c.layout.name + (" (yours)" if c.own else ""),
            "fits": ("yes" if c.fits else "NO") + (label if c.verified else " (state only)"),
            "step ≥": f"{c.step_s * 1e3:.3g} ms" + (label if c.verified else " (estimate)"),
            "XLA peak / device": human_bytes(c.peak_bytes) + label if c.peak_bytes is not None else "not compiled",
            "state / device": human_bytes(c.state_bytes),
            "bound": c.bound, "MFU ceiling": share(c.mfu_ceiling),
            "verified": ("XLA, extrapolated in depth" if c.extrapolated else "XLA") if c.verified else "estimate",
            "extrapolated figures": extrapolation_text(c),
            "mesh": " x ".join(f"{a} {s}" for a, s in zip(c.layout.mesh.axes, c.layout.mesh.shape)),
            "rules": rules_text(c.layout),
            "largest collective": c.largest_collective,
        })
    return rows


def extrapolation_text(c: Candidate) -> str:
    """The extrapolated figures beside the full compile's (their ratio), for a candidate compiled both ways."""
    from explorer.text import human_bytes

    if c.extrapolated:
        depths = c.compiled["extrapolated"]["depths"]
        return f"extrapolated from depths {depths[0]} and {depths[1]}"
    error = c.extrapolation_error
    if not error:
        return ""
    figures = _extrapolation_dict(c.extrapolation)
    step = figures["step_s"]
    return (f"extrapolated: peak {human_bytes(figures['peak_bytes'])} ({error['peak_bytes']:.4f}x the full compile's), "
            f"step ≥ {step * 1e3:.3g} ms ({error['step_s']:.4f}x)" if step and error["step_s"] else
            f"extrapolated: peak {human_bytes(figures['peak_bytes'])} ({error['peak_bytes']:.4f}x the full compile's)")


def main(args) -> int:
    """``python -m explorer advise``: progress on stderr, the table (or ``--json``) on stdout."""
    import json
    import sys

    from explorer.layout import load_layout_file

    if args.compiles < 0:
        raise ExplorerError("--compiles", args.compiles, "is not a whole number of compiles (0 or more)")
    roles = {}
    for item in args.role:
        name, sep, role = item.partition("=")
        if not sep or not name:
            raise ExplorerError("--role", item, "is not NAME=ROLE, e.g. hidden=tensor")
        roles[name] = role
    layout, target = load_layout_file(args.layout), parse_target(args.target)
    shown = [None]

    def progress(stage: str, elapsed: float) -> None:
        if stage != shown[0] and not args.json:
            print(f"{stage} ({elapsed:.1f} s)", file=sys.stderr, flush=True)
            shown[0] = stage

    shortcut = {"auto": None, "on": True, "off": False}[args.depth_shortcut]
    if args.depth_option is not None:
        depth_of(layout, args.depth_option)  # a bad name is refused before any work
    search = advise(layout, target, compiles=args.compiles, roles=roles, on_progress=progress, shortcut=shortcut,
                    depth_option=args.depth_option)
    if args.json:
        json.dump(search_to_dict(search), sys.stdout, indent=2)
        print()
        return 0
    print(verdict_text(search))
    print(f"searched {search.searched} candidate(s), {search.refused} refused by the analysis, {search.compiles} compiled "
          f"({search.cached_compiles} from the disk cache); stage 1 {search.stage1_s:.1f} s, whole search {search.elapsed_s:.1f} s")
    if search.depth is not None:
        print(f"depth shortcut: each candidate compiled at depths {' and '.join(map(str, SHORTCUT_DEPTHS))} of "
              f"{', '.join(search.depth.options)} and extrapolated to {search.depth.full}; the best then compiled in full "
              f"({search.full_compiles} full compile(s))" if search.depth.usable else f"depth shortcut not used: {search.depth.why}")
    for failure in search.failures:
        print(f"compile failed: {failure}")
    columns = ("rank", "layout", "fits", "step ≥", "XLA peak / device", "state / device", "bound", "MFU ceiling", "largest collective", "rules")
    rows = table_rows(search)
    if any(row["extrapolated figures"] for row in rows):
        columns += ("extrapolated figures",)
    print(_table(rows, columns))
    print("step ≥: XLA's roofline lower bound where verified; else an estimate (" + STAGE1_NOTE + ").")
    return 0


def _table(rows: list[dict], columns: Sequence[str]) -> str:
    """Rows as an aligned plain-text table."""
    cells = [[str(c) for c in columns]] + [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
