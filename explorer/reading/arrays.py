"""The abstract model as plain data: every array of the train state and the step, before any rule.

Nothing here imports Flax: a model read from the disk cache is these dataclasses only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from explorer.rules import AxisName

Kind = Literal["param", "opt_state", "input", "activation"]


@dataclasses.dataclass(frozen=True)
class AbstractArray:
    """One array the train step touches, before any mesh or rule is applied.

    ``logical_axes`` has one entry per dimension (padded to the rank): a logical name
    the rules resolve, a tuple of mesh axes the model fixed by hand, or None; None for
    the whole array means it carries no annotation. ``annotation`` says how the model
    declared it (``"logical"``: resolved by rules; ``"mesh-or-logical"``: a plain
    ``nn.Partitioned`` box, whose names are mesh axes when every one is an axis of the
    mesh, else logical names; ``"nnx"``: an NNX variable inside a Linen model, which Flax
    shards as it creates it). ``semantics`` is which Flax resolves this array's names
    with: ``"linen"`` (``flax.linen.spmd``: the first rule whose mesh axes are free wins)
    or ``"nnx"`` (``flax.core.spmd``: the last rule for a name wins, an unmatched name is a
    mesh axis); for an activation it is decided by the call that declared it, not by the
    model. ``names_known`` is False for an activation whose logical names the trace could
    not recover (its spec is still the one Flax produces). ``module`` is where an
    activation was declared and ``runs_per_step`` how many times its declaration runs in
    one step.
    """

    path: str
    kind: Kind
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[AxisName, ...] | None
    note: str = ""
    annotation: str = "logical"
    module: str = ""
    runs_per_step: int = 1
    semantics: str = "linen"
    type_spec: tuple | None = None  # Explicit axes: the spec in the array's type (None: not read from a type)
    source: str = ""  # Explicit axes: the model's source line that set an activation's sharding ("modules.py:187")


@dataclasses.dataclass(frozen=True)
class TypedValue:
    """One value of the forward pass traced under Explicit axes, with the sharding in its type.

    ``spec`` has one entry per dimension (None, a mesh axis, or a tuple of them); ``unreduced`` and
    ``reduced`` are JAX's unreduced/reduced axes (``P(..., unreduced={...})``, printed ``{U:x}``).
    ``type_text`` is the type as JAX prints it (``f32[8@data,64@model]``). ``source`` and
    ``function`` are the model's source line and function that computed it (``"modules.py:187"``),
    ``module`` the Flax module path where the name stack has one (Linen). ``sets_sharding``: the
    equation set this sharding (``reshard``, ``sharding_constraint``, an ``out_sharding=``);
    ``communication`` names what its types imply ("" for none): a reshard that changes the spec, a
    contraction over a dimension both operands shard (all-reduce, reduce-scatter, left unreduced).
    """

    index: int
    op: str
    shape: tuple[int, ...]
    dtype: str
    spec: tuple
    unreduced: tuple[str, ...]
    reduced: tuple[str, ...]
    type_text: str
    source: str
    function: str
    module: str
    runs: int
    sets_sharding: bool
    communication: str

    @property
    def where(self) -> str:
        """The group it is shown under: its source line and function (and module path, where there is one)."""
        place = f"{self.source} {self.function}".strip() or "program"
        return f"{self.module} · {place}" if self.module else place


@dataclasses.dataclass(frozen=True)
class AbstractModel:
    """The result of reading a model configuration: plain data, cached in memory and on disk.

    ``state_arrays`` lists the train state's leaves in tree-flatten order. The live
    objects a compile needs (the built model, the optimizer, the state's shapes in the
    framework's own tree) come from ``explorer.reading.live(model)``.
    """

    key: tuple
    mesh_axes: tuple[str, ...]
    framework: str
    state_arrays: tuple[AbstractArray, ...]
    inputs: tuple[AbstractArray, ...]
    activations: tuple[AbstractArray, ...]
    output: AbstractArray
    loops_without_length: int = 0
    weight_constraints: int = 0  # constraints on values computed from no model input (parameter reads), not listed
    probe_error: str = ""  # why the model's code refused the probe: its activations' logical names are unknown
    values: tuple[TypedValue, ...] = ()  # Explicit axes: every forward value with its type's sharding
    axis_types: tuple[str, ...] = ()  # Explicit axes: the mesh's axis types it was read under ("auto"/"explicit")
    # Every logical name the forward pass had Flax's Linen rules resolve: a model that resolves names with code of its own
    # (MaxText's maybe_shard_with_logical drops mesh axes of size 1, the probe's too) shows its activations' names only here
    asked_names: frozenset[str] = frozenset()

    @property
    def typed(self) -> bool:
        """Read under a mesh with Explicit axes: specs come from the values' types (the Explicit branch of the reading's stages)."""
        return bool(self.axis_types)

    @property
    def arrays(self) -> tuple[AbstractArray, ...]:
        return self.state_arrays + self.inputs + self.activations + (self.output,)

    @property
    def logical_names(self) -> frozenset[str]:
        """Every logical name the model uses: its arrays' and the ones its code had Flax resolve (``asked_names``)."""
        return names_of(self.arrays) | self.asked_names


@dataclasses.dataclass(frozen=True)
class Resolved:
    """The live activation constraints of the forward pass traced under a layout, in program order.

    Each array's ``logical_axes`` holds, per dimension, the mesh axes JAX received (a tuple) or
    None. ``output`` is the model output's. ``error`` says why the trace failed (then both are empty).
    """

    activations: tuple["AbstractArray", ...] = ()
    output: "AbstractArray | None" = None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Traced:
    """A traced model, with the logical names its probe told apart."""

    model: AbstractModel
    traced_names: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Request:
    """What the entry (``explorer/reading/__init__.py``) is asked, keyed once; the caches and the stages take it.

    ``key`` is the model configuration's (``ModelSpec.key()``; under Explicit axes followed by the mesh's sizes, axis
    names, axis types and the rules as JSON); ``mesh_axes`` the axis names the trace tells apart; ``names`` the logical
    names it must tell apart. ``layout`` is ``(mesh, rules)`` (the rules as Flax reads them): under Auto axes the
    layout whose activations JAX receives are asked (``received_key`` keys them: the model's key, the mesh's axis
    names and sizes, the rules as JSON), under Explicit axes (``explicit``) the layout the model is read under.
    ``model``: a model already read, whose layout's activations or live state (``live``) are asked.
    """

    key: tuple
    mesh_axes: tuple[str, ...]
    names: frozenset[str] = frozenset()
    layout: tuple | None = None
    received_key: tuple | None = None
    explicit: bool = False
    model: AbstractModel | None = None
    live: bool = False

    def answered_by(self, reading: "Reading") -> bool:
        """``reading`` holds all this request asks: the live state, or the model and (with a layout) its activations."""
        if self.live:
            return reading.stage is not None
        return reading.model is not None and (self.received_key is None or reading.received is not None)

    def told_apart(self, traced: "tuple[Traced, ...] | None") -> "AbstractModel | None":
        """The newest traced model that told apart every name asked (``model`` when given), or None."""
        if self.model is not None:
            return self.model
        return next((t.model for t in traced or () if self.names <= t.traced_names), None)


@dataclasses.dataclass(frozen=True)
class Reading:
    """What the entry gives (and the caches keep): the model, the layout's activations as JAX receives them (None:
    not asked, or Explicit axes), ``traced`` every model traced for the key and mesh axes with the names each told
    apart, newest first (None: none kept in memory), and ``stage``, the live state (``state.State``; None where this
    process has not traced it)."""

    model: AbstractModel | None = None
    received: Resolved | None = None
    traced: tuple[Traced, ...] | None = None
    stage: Any = None


def names_of(arrays) -> frozenset[str]:
    """Every logical name the arrays carry."""
    return frozenset(n for a in arrays if a.logical_axes for n in a.logical_axes if isinstance(n, str))


def activation_arrays(found, root: str) -> tuple[AbstractArray, ...]:
    """The activations among a program's constraints (``constraints.Constraint``), as arrays named by where each was
    declared: ``activations/<module path without the top module>/<n-th there>``."""
    arrays = []
    counters: dict[str, int] = {}
    for constraint in found:
        if not constraint.activation:
            continue
        location = constraint.location[len(root) + 1 :] if constraint.location.startswith(root + "/") else constraint.location
        ordinal = counters.get(location, 0)
        counters[location] = ordinal + 1
        fixed = any(isinstance(d, tuple) for d in constraint.dims)
        logical = any(isinstance(d, str) for d in constraint.dims)
        how = (
            "fixed to mesh axes by with_sharding_constraint"
            if fixed and not logical
            else "declared with logical names"
            if logical and not fixed
            else "logical names and fixed mesh axes"
            if fixed
            else "declared replicated"
        )
        runs = f"; runs {constraint.runs}x per step (loop body)" if constraint.runs > 1 else ""
        arrays.append(
            AbstractArray(
                f"activations/{location}/{ordinal}",
                "activation",
                constraint.shape,
                constraint.dtype,
                constraint.dims,
                note=how + _resolved_by(constraint) + runs,
                module=location,
                runs_per_step=constraint.runs,
                semantics=semantics_of(constraint),
            )
        )
    return tuple(arrays)


def semantics_of(constraint) -> str:
    """The rules' semantics for a constraint: the call's. A hand-written call whose spec carries logical names
    resolved them with a helper of the user's; Flax Linen's ``logical_to_mesh_axes`` is the usual one."""
    return "nnx" if constraint.semantics == "nnx" else "linen"


def _resolved_by(constraint) -> str:
    if constraint.semantics == "nnx":
        return " (an NNX variable's out_sharding: NNX rule semantics)"
    if constraint.semantics == "hand" and any(isinstance(d, str) for d in constraint.dims):
        return " (resolved by the model's own code before with_sharding_constraint; read with Linen semantics)"
    return ""
