"""Logical-to-mesh resolution with a per-dimension trace, and rule presets.

``resolve`` gives the same PartitionSpec as Flax Linen's ``nn.logical_to_mesh_axes``
(tests compare the two on random inputs) and also says *why*: which rule decided
each dimension, which rules were skipped, and which names no rule matched.

Linen's semantics, for one array: walk the rules in order; a rule applies to the
first dimension carrying its logical name if that dimension is still undecided and
none of the rule's mesh axes is already used by another dimension of this array.
A name that no rule decides is replicated, silently.

Flax NNX's semantics differ (``flax/core/spmd.py``, ``from_sharding_rules``): the rules
become a dict, so the last rule for a name wins, and a name with no rule is used
unchanged as a mesh axis name. Nothing stops two dimensions landing on one mesh axis
there; JAX then refuses the sharding. The explorer resolves each model with the
semantics of the framework it is written in.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal, Sequence

from explorer.errors import ExplorerError
from explorer.specs import MeshAxes, SpecEntry, spec_axes, spec_entry

RulePair = tuple[str, SpecEntry]

Semantics = Literal["linen", "nnx"]
# One dimension of an array's annotation: a logical name resolved by the rules, a tuple of
# mesh axes the model fixed by hand (``nn.with_partitioning``, ``P('data', 'model')``), or None.
AxisName = None | str | tuple[str, ...]

RESOLUTION_ORDERS = {
    "linen": "Flax Linen: the first rule whose mesh axes are still free wins; later rules are fallbacks; "
    "a name no rule matches is replicated",
    "nnx": "Flax NNX: the last rule for a name wins (a dict); a name no rule matches is used as a mesh axis name",
}
RESOLUTION_ORDER = RESOLUTION_ORDERS["linen"]


@dataclasses.dataclass(frozen=True)
class Skip:
    """A rule that named this dimension's logical axis but did not decide it."""

    rule: int
    reason: Literal["mesh-axis-taken", "already-decided", "overridden"]
    detail: str


@dataclasses.dataclass(frozen=True)
class DimTrace:
    """How one dimension got its mesh axes."""

    dim: int
    logical: str | None
    mesh_axes: MeshAxes
    rule: int | None
    skipped: tuple[Skip, ...]
    status: Literal["sharded", "replicated-by-rule", "all-skipped", "unmatched", "unnamed", "fixed", "passed-through"]

    def decided_by(self, rules: Sequence[RulePair]) -> str:
        """What decided this dimension's mesh axes, as the trace table and the findings say it ("" for nothing).

        >>> DimTrace(0, "hidden", ("model",), 1, (), "sharded").decided_by([("batch", "data"), ("hidden", "model")])
        'rule 1 (hidden, model)'
        """
        if self.rule is not None:
            return f"rule {self.rule} {format_rule(rules[self.rule])}"
        if self.status == "fixed":
            return "the model's own annotation (fixed mesh axes)"
        if self.status == "passed-through":
            return f"the name '{self.logical}' (no rule; Flax NNX uses it as a mesh axis)"
        return ""

    def explain(self, rules: Sequence[RulePair]) -> str:
        """One line a person can read, e.g. ``hidden -> model by rule 1 (hidden, model)``."""
        name = self.logical if self.logical is not None else "(no name)"
        if self.status == "unnamed":
            text = f"dim {self.dim} has no logical name: replicated"
        elif self.status == "fixed":
            text = f"dim {self.dim}: fixed by the model to mesh axes {' x '.join(self.mesh_axes)} (not rule-driven)"
        elif self.status == "passed-through":
            text = f"dim {self.dim} '{name}': no rule; Flax NNX uses the name itself as a mesh axis"
        elif self.status == "unmatched":
            text = f"dim {self.dim} '{name}': no rule matched, replicated"
        elif self.status == "all-skipped":
            text = f"dim {self.dim} '{name}': every rule for it was skipped, replicated"
        else:
            target = "replicated" if not self.mesh_axes else "sharded over " + " x ".join(self.mesh_axes)
            text = f"dim {self.dim} '{name}': {target} by {self.decided_by(rules)}"
        for skip in self.skipped:
            if skip.reason == "overridden":
                text += f"; NNX: rule {self.rule} overrides rule {skip.rule} {format_rule(rules[skip.rule])}"
            else:
                text += f"; skipped rule {skip.rule} {format_rule(rules[skip.rule])}: {skip.detail}"
        return text


@dataclasses.dataclass(frozen=True)
class Resolution:
    """The spec for one array and the trace of every dimension."""

    spec: tuple[SpecEntry, ...]
    dims: tuple[DimTrace, ...]
    used_rules: frozenset[int]


def format_rule(rule: RulePair) -> str:
    logical, mesh = rule
    if isinstance(mesh, tuple):
        mesh = "(" + ", ".join(mesh) + ")"
    return f"({logical}, {mesh})"


def effective_axes(array, mesh_axes: Sequence[str]) -> tuple | None:
    """The annotation of ``array`` (a ``reading.AbstractArray``) as the framework reads it on this mesh.

    A plain ``nn.Partitioned`` box (``nn.with_partitioning``) names mesh axes, as
    ``nn.get_sharding`` reads it, when every name is an axis of the mesh; otherwise its
    names are logical and the rules resolve them, as ``nn.logical_to_mesh_sharding`` does.
    """
    names = array.logical_axes
    if names is None or array.annotation != "mesh-or-logical":
        return names
    if all(n is None or (isinstance(n, str) and n in mesh_axes) for n in names):
        return tuple((n,) if isinstance(n, str) else n for n in names)
    return names


def resolve(
    logical_axes: Sequence[AxisName] | None,
    rules: Sequence[RulePair],
    ndim: int | None = None,
    semantics: Semantics = "linen",
) -> Resolution:
    """Resolve an array's logical axis names to mesh axes with a trace, Linen or NNX style.

    Example::

        >>> rules = (("batch", "data"), ("hidden", "model"), ("embed", "model"))
        >>> r = resolve(("embed", "hidden"), rules)
        >>> r.spec
        (None, 'model')
        >>> r.dims[0].explain(rules)
        "dim 0 'embed': every rule for it was skipped, replicated; skipped rule 2 (embed, model): mesh axis 'model' is taken by dim 1 'hidden'"
        >>> resolve(("embed", "hidden"), rules, semantics="nnx").spec
        ('model', 'model')

    An annotation shorter than ``ndim`` is padded with None (trailing dimensions are
    replicated, as JAX does). A tuple entry is a dimension the model fixed to those
    mesh axes by hand; rules do not touch it. ``logical_axes=None`` (an array with no
    annotation) gives a replicated spec of ``ndim`` dimensions.
    """
    rules = tuple((logical, mesh if not isinstance(mesh, list) else tuple(mesh)) for logical, mesh in rules)
    axes = None if logical_axes is None else tuple(tuple(a) if isinstance(a, list) else a for a in logical_axes)
    return _resolve_cached(axes, rules, ndim, semantics)


@functools.lru_cache(maxsize=4096)
def _resolve_cached(logical_axes: tuple | None, rules: tuple, ndim: int | None, semantics: str) -> Resolution:
    if logical_axes is None:
        dims = tuple(DimTrace(d, None, (), None, (), "unnamed") for d in range(ndim or 0))
        return Resolution((None,) * (ndim or 0), dims, frozenset())
    if ndim is not None and len(logical_axes) > ndim:
        raise ExplorerError("logical axes", list(logical_axes), f"name {len(logical_axes)} dimensions but the array has {ndim}")
    logical_axes = logical_axes + (None,) * ((ndim or len(logical_axes)) - len(logical_axes))
    _reject_duplicate_names(logical_axes)
    if semantics == "nnx":
        return _resolve_nnx(logical_axes, rules)
    return _resolve_linen(logical_axes, rules)


def _resolve_linen(logical_axes: tuple, rules: tuple) -> Resolution:
    """``flax.linen.spmd._logical_to_mesh_axes``, keeping the reasons."""
    decided: list[int | None] = [None] * len(logical_axes)
    assigned: list[SpecEntry] = [a if isinstance(a, tuple) else None for a in logical_axes]
    fixed = [isinstance(a, tuple) for a in logical_axes]
    skipped: list[list[Skip]] = [[] for _ in logical_axes]
    for index, (logical, mesh) in enumerate(rules):
        if logical not in logical_axes:
            continue
        dim = logical_axes.index(logical)
        if decided[dim] is not None:
            skipped[dim].append(Skip(index, "already-decided", f"dim {dim} was already decided by rule {decided[dim]}"))
            continue
        taken = _taken_by(spec_axes(mesh), assigned, [d is not None or f for d, f in zip(decided, fixed)], logical_axes)
        if taken:
            skipped[dim].append(Skip(index, "mesh-axis-taken", taken))
            continue
        decided[dim] = index
        assigned[dim] = mesh
    dims = tuple(_dim_trace(dim, name, assigned[dim], decided[dim], skipped[dim], "linen") for dim, name in enumerate(logical_axes))
    spec = tuple(spec_entry(a) for a in assigned)
    return Resolution(spec, dims, frozenset(d for d in decided if d is not None))


def _resolve_nnx(logical_axes: tuple, rules: tuple) -> Resolution:
    """``flax.core.spmd.from_sharding_rules``: a dict of the rules, so the last one for a name wins."""
    last: dict[str, int] = {}
    for index, (logical, _) in enumerate(rules):
        last[logical] = index
    assigned: list[SpecEntry] = []
    decided: list[int | None] = []
    skipped: list[list[Skip]] = []
    for name in logical_axes:
        if isinstance(name, str) and name in last:
            winner = last[name]
            assigned.append(rules[winner][1])
            decided.append(winner)
            skipped.append(
                [Skip(i, "overridden", f"rule {winner} overrides it") for i, (n, _) in enumerate(rules) if n == name and i != winner]
            )
        else:
            assigned.append(name)
            decided.append(None)
            skipped.append([])
    dims = tuple(_dim_trace(dim, name, assigned[dim], decided[dim], skipped[dim], "nnx") for dim, name in enumerate(logical_axes))
    spec = tuple(spec_entry(a) for a in assigned)
    return Resolution(spec, dims, frozenset(d for d in decided if d is not None))


def _reject_duplicate_names(logical_axes: tuple) -> None:
    names = [n for n in logical_axes if isinstance(n, str)]
    for name in names:
        if names.count(name) > 1:
            raise ExplorerError("logical axes", list(logical_axes), f"name {name!r} twice; Flax refuses that")


def _taken_by(axes: MeshAxes, assigned: list[SpecEntry], decided: list[bool], names: tuple) -> str:
    for dim, entry in enumerate(assigned):
        if not decided[dim]:
            continue
        for axis in axes:
            if axis in spec_axes(entry):
                label = f"'{names[dim]}'" if isinstance(names[dim], str) else "(fixed by the model)"
                return f"mesh axis '{axis}' is taken by dim {dim} {label}"
    return ""


def _dim_trace(dim: int, name: AxisName, entry: SpecEntry, rule: int | None, skipped: list[Skip], semantics: str) -> DimTrace:
    if isinstance(name, tuple):
        return DimTrace(dim, None, tuple(name), None, (), "fixed")
    if name is None:
        status = "unnamed"
    elif rule is None:
        status = "passed-through" if semantics == "nnx" else "all-skipped" if skipped else "unmatched"
    else:
        status = "sharded" if spec_axes(entry) else "replicated-by-rule"
    return DimTrace(dim, name, spec_axes(entry), rule, tuple(skipped), status)


def preset_rules(preset: str, mesh_axes: Sequence[str], names: Sequence[str] | None = None) -> tuple[RulePair, ...]:
    """Rules for a named preset, written for the given mesh axes.

    The first mesh axis plays the data (batch) role and the last one the model
    (tensor) role; on a 1-D mesh both roles fall on the same axis. The presets cover
    the logical names of every built-in model (the MLP's batch/embed/hidden and the
    transformer's batch/length/embed/heads/kv_heads/kv/mlp/vocab/layer).

    With ``names`` (the logical names one model uses) the rules are written for that
    model: rules for names it lacks are dropped, and each name the preset leaves alone
    gets an explicit ``(name, None)``, so the layout has no unused rule and no unmatched name.

    >>> preset_rules("fsdp", ("data", "model"), names=("batch", "embed", "hidden"))
    (('batch', 'data'), ('embed', 'data'), ('hidden', None))
    """
    if preset not in PRESETS:
        raise ExplorerError("rules preset", preset, f"is not a preset; choose one of {sorted(PRESETS)}")
    data, model = mesh_axes[0], mesh_axes[-1]
    rules = PRESETS[preset](data, model)
    if names is None:
        return rules
    named = {logical for logical, _ in rules}
    return tuple(r for r in rules if r[0] in names) + tuple((n, None) for n in sorted(set(names) - named))


def _tensor_parallel(data: str, model: str) -> tuple[RulePair, ...]:
    """Megatron-style: the wide dimensions over the model axis, batch over data."""
    return (
        ("batch", data),
        ("hidden", model),
        ("mlp", model),
        ("heads", model),
        ("kv_heads", model),
        ("vocab", model),
    )


PRESETS = {
    "flax-guide": lambda data, model: (("batch", data), ("hidden", model)),
    "data-parallel": lambda data, model: (("batch", data),),
    "fsdp": lambda data, model: (("batch", data), ("embed", data), ("layer", None)),
    "tensor-parallel": lambda data, model: _tensor_parallel(data, model) + (("layer", None),),
    "fsdp+tensor-parallel": lambda data, model: _tensor_parallel(data, model) + (("embed", data), ("layer", None)),
}

PRESET_DESCRIPTIONS = {
    "flax-guide": "The Flax guide's rules: batch over data, hidden over model.",
    "data-parallel": "Batch over the data axis; every parameter replicated.",
    "fsdp": "Batch and the embed dimension of every parameter over the data axis (ZeRO-3 style).",
    "tensor-parallel": "Megatron-style: hidden/mlp/heads/vocab over the model axis, batch over data.",
    "fsdp+tensor-parallel": "Tensor parallel over the model axis plus parameters' embed dimension over data.",
}
