"""Layout -> Report: how every array of the train step is sharded, and what to watch out for.

``analyze`` takes the cached abstract model, resolves every array's logical axes with
the layout's rules (keeping the trace), and derives shard shapes, bytes per device,
replication and warnings. A mesh needing more devices than this process has is a
*planned* mesh: JAX's ``AbstractMesh`` stands in, and device ids are 0..N-1 in mesh
order.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from explorer import caches, tiles as tiles_lib
from explorer import reading
from explorer.reading import AbstractArray, AbstractModel, abstract_model, collector
from explorer.errors import ExplorerError
from explorer.layout import Layout, MeshSpec
from explorer.rules import RESOLUTION_ORDERS, DimTrace, RulePair, format_rule, resolve
from explorer.specs import entry_json, spec_axes, spec_entry
from explorer.tiles import MeshInfo, Tile

LARGE_REPLICATED_BYTES = 1 << 20
KIND_LABELS = {"param": "parameters", "opt_state": "optimizer state", "input": "inputs", "activation": "declared activations"}
KINDS = tuple(KIND_LABELS)
ERROR_CODES = frozenset({"indivisible", "unknown-mesh-axis", "mesh-axis-twice"})  # JAX refuses these layouts
INFO_CODES = frozenset({"semantics-differ"})  # worth knowing, nothing wrong with this layout


MAX_TILE_ENTRIES = 1_000_000  # (block, device) pairs the command line lists at most (about 10 MB of text)


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """One array under one layout."""

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | None, ...] | None
    spec: tuple[Any, ...]
    shard_shape: tuple[int, ...]
    bytes_per_device: int
    replication: int
    trace: tuple[DimTrace, ...]
    note: str = ""
    module: str = ""
    runs_per_step: int = 1
    semantics: str = "linen"  # the rule semantics Flax applies to this array: its call's (Linen or NNX)

    @property
    def global_bytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def spec_text(self) -> str:
        """``P(None, 'model')``, as JAX prints it."""
        return repr(PartitionSpec(*self.spec))


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something about a layout worth a person's attention: a ``code``, a sentence, and the array concerned.

    ``level`` is ``"error"`` for what JAX would refuse (a dimension of a step argument the mesh does not
    divide, a mesh axis the mesh lacks or used twice in one array) and ``"warning"`` for the rest (a rule that never applies, a name no rule
    covers, a large replicated array); ``"info"`` says where Flax Linen and NNX would
    read the rules differently, which matters only to someone moving between them.
    """

    code: str
    message: str
    path: str | None = None

    @property
    def level(self) -> str:
        return "error" if self.code in ERROR_CODES else "info" if self.code in INFO_CODES else "warning"


@dataclasses.dataclass(frozen=True)
class Totals:
    """Bytes each device holds, by kind (every device holds the same amount under NamedSharding)."""

    param_bytes: int
    opt_state_bytes: int
    input_bytes: int
    activation_bytes: int
    global_param_bytes: int
    param_count: int

    @property
    def state_bytes(self) -> int:
        """Parameters, optimizer state and inputs: exactly what the step's arguments hold (before TPU padding)."""
        return self.param_bytes + self.opt_state_bytes + self.input_bytes

    @property
    def total_bytes(self) -> int:
        """State plus declared activations: not a peak (XLA keeps other temporaries and reuses buffers)."""
        return self.state_bytes + self.activation_bytes

    def by_kind(self) -> dict[str, int]:
        """Bytes per device keyed by array kind, in KINDS order."""
        return {
            "param": self.param_bytes,
            "opt_state": self.opt_state_bytes,
            "input": self.input_bytes,
            "activation": self.activation_bytes,
        }

    def as_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "state_bytes": self.state_bytes, "total_bytes": self.total_bytes}


@dataclasses.dataclass(frozen=True)
class Report:
    layout: Layout
    mesh: MeshInfo
    arrays: tuple[ArrayInfo, ...]
    totals: Totals
    warnings: tuple[Finding, ...]
    framework: str = "linen"
    values: tuple[reading.TypedValue, ...] = ()  # Explicit axes: every forward value with its type's sharding

    @property
    def typed(self) -> bool:
        """The layout's mesh has Explicit axes: every spec shown is the one in its value's type."""
        return self.layout.mesh.explicit

    @property
    def resolution_order(self) -> str:
        return RESOLUTION_ORDERS[self.framework]

    def array(self, path: str) -> ArrayInfo:
        for info in self.arrays:
            if info.path == path:
                return info
        raise KeyError(path)

    def tiles(self, path: str) -> tuple[Tile, ...]:
        info = self.array(path)
        return tiles_lib.tiles(info.shape, info.spec, self.mesh)


def mesh_info(spec: MeshSpec) -> MeshInfo:
    """The mesh as plain data: real devices when this process has enough, else planned."""
    return _mesh_info_cached(tuple(spec.shape), tuple(spec.axes), jax.device_count())


@caches.register
@functools.lru_cache(maxsize=64)
def _mesh_info_cached(shape: tuple[int, ...], axes: tuple[str, ...], device_count: int) -> MeshInfo:
    size = math.prod(shape)
    if size > device_count:
        ids = np.arange(size).reshape(shape)
        return MeshInfo(shape, axes, _nested(ids), abstract=True)
    return MeshInfo(shape, axes, _nested(jax_mesh(shape, axes).device_ids), abstract=False)


def _nested(ids: np.ndarray) -> tuple:
    return tuple(_nested(row) for row in ids) if ids.ndim > 1 else tuple(int(i) for i in ids)


@caches.register
@functools.lru_cache(maxsize=64)
def jax_mesh(shape: tuple[int, ...], axes: tuple[str, ...], types: tuple[str, ...] | None = None) -> Mesh | AbstractMesh:
    """A Mesh with the given axis types (default Auto, what Flax's logical constraints want), or an AbstractMesh if
    too big. ``types`` as a layout spells them (``MeshSpec.types``: ``"auto"``/``"explicit"`` per axis)."""
    axis_types = axis_types_of(types or ("auto",) * len(axes))
    size = math.prod(shape)
    if size > jax.device_count():
        return AbstractMesh(shape, axes, axis_types=axis_types)
    return jax.make_mesh(shape, axes, axis_types=axis_types, devices=jax.devices()[:size])


def axis_types_of(types: Sequence[str]) -> tuple[AxisType, ...]:
    """JAX's axis types for a layout's spelling (``"auto"``/``"explicit"``)."""
    return tuple(AxisType.Explicit if kind == "explicit" else AxisType.Auto for kind in types)


def layout_mesh(spec: MeshSpec) -> Mesh | AbstractMesh:
    """The layout's mesh as JAX builds it, with its axis types (``jax_mesh``)."""
    return jax_mesh(tuple(spec.shape), tuple(spec.axes), spec.axis_types)


def model_of(layout: Layout) -> AbstractModel:
    """The layout's abstract model, traced so that its rules' names and mesh axes are told apart (a first trace runs
    under the layout itself, which also gives the activations ``analyze`` reads under it)."""
    if layout.mesh.explicit:  # the sharding is in the values' types: read under the layout itself
        return reading.typed_model(layout.model, layout_mesh(layout.mesh), layout.rules_for_flax())
    names = frozenset(rule.logical for rule in layout.rules)
    mesh = jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes))
    return abstract_model(layout.model, names, tuple(layout.mesh.axes), mesh, layout.rules_for_flax())


def logical_names(model_spec, mesh_axes: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every logical axis name the model's arrays carry, sorted (what a rules preset is written for)."""
    return tuple(sorted(abstract_model(model_spec, frozenset(), tuple(mesh_axes)).logical_names))


def model_for_layouts(layouts: Sequence[Layout]) -> AbstractModel:
    """One abstract model that tells apart every rule name and mesh axis of ``layouts`` (one model config).

    ``analyze(layout, model=..., received=False)`` reads any of them from it without a trace of
    its own: the advisor's search analyzes dozens of layouts of one model this way.
    """
    specs = {layout.model.key() for layout in layouts}
    if len(specs) != 1:
        raise ExplorerError("layouts", len(specs), "name more than one model configuration; one model is read at a time")
    names = frozenset(rule.logical for layout in layouts for rule in layout.rules)
    axes = tuple(dict.fromkeys(axis for layout in layouts for axis in layout.mesh.axes))
    return abstract_model(layouts[0].model, names, axes)


def analyze(layout: Layout, *, model: AbstractModel | None = None, received: bool = True) -> Report:
    """The sharding of every array in ``layout``'s train step.

    ``model``: the abstract model to read, already traced for (at least) this layout's rule names
    and mesh axes (``model_for_layouts``); by default ``model_of(layout)``. ``received=False``
    skips tracing the forward pass under this layout's mesh and rules (``reading.received``): the
    activations' specs are then the rules applied to the names the probe read, which is what JAX
    receives unless the model's own code resolves names (MaxText's ``maybe_shard_with_logical``).
    Parameters, optimizer state and inputs do not depend on it.

    Example::

        >>> from explorer.layout import seed_layout
        >>> report = analyze(seed_layout())
        >>> report.array("params/LogicalDotReluDot_0/Dense_0/kernel").spec
        (None, 'model')
    """
    with collector.paused():  # thousands of short-lived records: no collector passes over them (collector.py)
        return _analyzed(layout, model if model is not None else model_of(layout), received)


def _analyzed(layout: Layout, model: AbstractModel, received: bool) -> Report:
    mesh = mesh_info(layout.mesh)
    rules = layout.rules_for_flax()
    problems: list[Finding] = []
    placements: dict = {}
    arrays = tuple(_array_info(a, rules, mesh, problems, placements) for a in model.arrays)
    notes: list[Finding] = []
    if model.typed:  # the types are the truth: what Flax built and what each equation's output is
        arrays = tuple(_as_typed(info, array, mesh) for info, array in zip(arrays, model.arrays))
        received = False
    if received:
        found = reading.received(model, jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes)), rules)
        arrays, notes = _as_received(arrays, model, found, rules, mesh, problems)
    warnings = problems + notes + _warnings(arrays, rules, mesh) + _semantics_differ(model, rules, mesh)
    if model.loops_without_length:
        warnings.append(
            Finding(
                "loop-without-length",
                f"{model.loops_without_length} declared activation(s) sit in a while loop with no static length: "
                "they are listed once, though the loop may run them many times.",
            )
        )
    return Report(layout, mesh, arrays, _totals(arrays), tuple(warnings), model.framework, model.values)


def _as_typed(info: ArrayInfo, array: AbstractArray, mesh: MeshInfo) -> ArrayInfo:
    """An array read under Explicit axes with the spec of its type, saying so where its metadata and the rules differ.

    A variable whose initializer was given ``out_sharding=`` is sharded while its metadata
    (``nnx.get_partition_spec``) says ``P()``: JAX uses the type.
    """
    if array.type_spec is None:
        return info
    spec = tuple(spec_entry(e) if isinstance(e, (tuple, list)) else e for e in array.type_spec)
    ruled = tuple(spec_entry(e) if isinstance(e, (tuple, list)) else e for e in info.spec)
    if spec == ruled:
        return info
    return _respecified(
        info,
        spec,
        mesh,
        f"its type is sharded {PartitionSpec(*spec)} while its metadata and the rules give {PartitionSpec(*ruled)}: "
        "Flax built it so under the mesh (e.g. an initializer given out_sharding=), and JAX uses the type",
    )


def _respecified(info: ArrayInfo, spec: tuple, mesh: MeshInfo, note: str) -> ArrayInfo:
    """``info`` sharded by ``spec`` instead of the rules' spec (its shard, bytes and replication with it), ``note`` added
    to say why."""
    shard = tiles_lib.shard_shape(info.shape, spec, mesh)
    return dataclasses.replace(
        info,
        spec=spec,
        shard_shape=shard,
        bytes_per_device=math.prod(shard) * np.dtype(info.dtype).itemsize,
        replication=tiles_lib.replication(spec, mesh),
        note=f"{info.note}; {note}" if info.note else note,
    )


def effective_axes(array: AbstractArray, mesh_axes: Sequence[str]) -> tuple | None:
    """The array's annotation as the framework reads it on this mesh.

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


def _array_info(
    array: AbstractArray, rules: Sequence[RulePair], mesh: MeshInfo, problems: list, placements: dict | None = None
) -> ArrayInfo:
    """``array`` under the rules; ``placements`` memoises what depends only on its names, shape and dtype
    (every layer of a model repeats the same few), across the arrays of one analysis."""
    key = (array.logical_axes, array.annotation, array.shape, array.dtype, array.semantics)
    placement = placements.get(key) if placements is not None else None
    if placement is None:
        placement = _placement(array, rules, mesh)
        if placements is not None:
            placements[key] = placement
    resolution, spec, refusals, shard, nbytes, replication = placement
    problems.extend(Finding(code, f"{array.path}: {text}", array.path) for code, text in refusals)
    return ArrayInfo(
        path=array.path,
        kind=array.kind,
        shape=array.shape,
        dtype=array.dtype,
        logical_axes=array.logical_axes,
        spec=spec,
        shard_shape=shard,
        bytes_per_device=nbytes,
        replication=replication,
        trace=resolution.dims,
        note=array.note,
        module=array.module,
        runs_per_step=array.runs_per_step,
        semantics=array.semantics,
    )


def _placement(array: AbstractArray, rules: Sequence[RulePair], mesh: MeshInfo) -> tuple:
    resolution = resolve(effective_axes(array, mesh.axes), rules, ndim=len(array.shape), semantics=array.semantics)
    spec, refusals = _checked_spec(resolution, rules, mesh)
    shard = tiles_lib.shard_shape(array.shape, spec, mesh)
    nbytes = math.prod(shard) * np.dtype(array.dtype).itemsize
    return resolution, spec, tuple(refusals), shard, nbytes, tiles_lib.replication(spec, mesh)


def _as_received(
    arrays: tuple[ArrayInfo, ...], model: AbstractModel, received: reading.Resolved, rules, mesh: MeshInfo, problems: list
) -> tuple[tuple[ArrayInfo, ...], list[Finding]]:
    """The activations with the specs JAX receives under this layout (``reading.received``).

    Where the probe's constraints line up with the layout's trace one for one, each keeps its
    logical names and rule trace, and takes the received spec where the model's own code made
    it differ from the rules applied to the names. Where they do not line up (the model's code
    refused the probe), the received activations are shown with their mesh axes only.
    """
    if received.error:
        why = f"the model's code refused the explorer's probe ({model.probe_error}), " if model.probe_error else ""
        return arrays, [
            Finding(
                "activations-unresolved",
                f"The forward pass could not be traced under this layout's mesh and rules ({received.error}); "
                + (
                    f"{why}so no activation can be shown."
                    if why
                    else "the activations' specs shown are the rules applied to their logical names, not what JAX received."
                ),
            )
        ]
    probed = [a for a in arrays if a.kind == "activation"]
    truth = list(received.activations) + [received.output]
    if len(probed) == len(truth) and all(p.path == t.path and p.shape == t.shape for p, t in zip(probed, truth)):
        by_path = {t.path: t for t in truth}
        return tuple(_with_received(a, by_path[a.path], mesh) if a.kind == "activation" else a for a in arrays), []
    why = (
        f"the model's code refused the explorer's probe ({model.probe_error})"
        if model.probe_error
        else "the probe's trace and the layout's trace list different constraints"
    )
    note = f"logical names unknown ({why}); the spec JAX receives under this layout"
    shown = tuple(_array_info(dataclasses.replace(t, note=f"{t.note}; {note}" if t.note else note), rules, mesh, problems) for t in truth)
    return tuple(a for a in arrays if a.kind != "activation") + shown, [
        Finding(
            "activation-names-unknown",
            f"{len(truth)} activation(s) are shown with the mesh axes JAX receives under this layout; their logical names "
            f"are unknown: {why}.",
        )
    ]


def _with_received(info: ArrayInfo, received: AbstractArray, mesh: MeshInfo) -> ArrayInfo:
    ndim = len(info.shape)
    spec = tuple(spec_entry(d) if isinstance(d, tuple) else None for d in received.logical_axes or (None,) * ndim)
    if spec == tuple(spec_entry(e) if isinstance(e, (tuple, list)) else e for e in info.spec):
        return info
    return _respecified(
        info,
        spec,
        mesh,
        f"JAX receives {PartitionSpec(*spec)} under this layout: the model's own code changed what the rules give "
        f"its names ({PartitionSpec(*info.spec)})",
    )


def _checked_spec(resolution, rules, mesh: MeshInfo) -> tuple[tuple, list[tuple[str, str]]]:
    """The spec, with what JAX would refuse reported as an error and left out of the drawing.

    A mesh axis the mesh lacks (an NNX name with no rule, or a name the model fixed) and
    a mesh axis used by two dimensions are refused by JAX; the report names them and
    shows those dimensions replicated. The refusals come as (code, message), the message to follow the
    array's path.
    """
    spec, used, refusals = [], {}, []
    for dim, entry in enumerate(resolution.spec):
        axes = spec_axes(entry)
        unknown = [a for a in axes if a not in mesh.axes]
        twice = [a for a in axes if a in used]
        source = resolution.dims[dim].decided_by(rules)
        trace = resolution.dims[dim]
        if unknown:
            refusals.append(
                (
                    "unknown-mesh-axis",
                    f"dim {dim} is sharded over mesh axis '{unknown[0]}' by {source}, but the mesh has only "
                    f"{list(mesh.axes)}; JAX refuses this sharding. Fix: add a rule for '{trace.logical}' or rename the axis.",
                )
            )
            spec.append(None)
        elif twice:
            refusals.append(
                (
                    "mesh-axis-twice",
                    f"mesh axis '{twice[0]}' shards dim {used[twice[0]]} and again dim {dim} (by {source}); "
                    "JAX refuses a mesh axis used twice. Fix: map one of these names elsewhere or to null.",
                )
            )
            spec.append(None)
        else:
            used.update({a: dim for a in axes})
            spec.append(entry)
    return tuple(spec), refusals


def _semantics_differ(model: AbstractModel, rules: Sequence[RulePair], mesh: MeshInfo) -> list[Finding]:
    """Where Linen and NNX semantics would shard this layout differently (people move between them).

    Each array is compared under the semantics Flax applies to it here (its call's) and the other one.
    """
    ruled = {rule[0] for rule in rules}
    differing = []
    compared: dict = {}  # arrays with the same names, rank and semantics compare the same way
    for array in model.arrays:
        key = (array.logical_axes, array.annotation, len(array.shape), array.semantics)
        if key not in compared:
            compared[key] = _compared(array, rules, mesh, ruled)
        if compared[key] is not None:
            mine, theirs, other = compared[key]
            differing.append((array.path, mine, theirs, array.semantics, other))
    if not differing:
        return []
    path, mine, theirs, semantics, other = differing[0]
    label = {"linen": "Linen", "nnx": "NNX"}
    used = [axis for entry in theirs for axis in spec_axes(entry)]
    twice = sorted({axis for axis in used if used.count(axis) > 1})
    there = (
        f"{label[other]} would put mesh axis {twice[0]!r} on two dimensions, a sharding JAX refuses"
        if twice
        else f"{PartitionSpec(*theirs)} under {label[other]}"
    )
    return [
        Finding(
            "semantics-differ",
            f"{len(differing)} array(s) would be sharded differently under Flax {label[other]}'s rule semantics than under "
            f"{label[semantics]}'s (the ones Flax applies to them here), e.g. {path}: {PartitionSpec(*mine)} here; "
            f"{there}. {RESOLUTION_ORDERS[other]}.",
            path,
        )
    ]


def _compared(array: AbstractArray, rules: Sequence[RulePair], mesh: MeshInfo, ruled: set) -> tuple | None:
    """(spec here, spec under the other semantics, the other's name) when a ruled name lands differently, else None."""
    names = effective_axes(array, mesh.axes)
    if not names:
        return None
    other = "nnx" if array.semantics == "linen" else "linen"
    # a Linen user would write NNX's mesh-axis annotations with nn.with_partitioning: read them so
    theirs_names = effective_axes(dataclasses.replace(array, annotation="mesh-or-logical"), mesh.axes) if other == "linen" else names
    try:
        mine = resolve(names, rules, len(array.shape), array.semantics).spec
        theirs = resolve(theirs_names, rules, len(array.shape), other).spec
    except ExplorerError:
        return None
    dims = [d for d, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    # a name with no rule differs by definition (replicated vs used as a mesh axis): that is not the news
    if any(isinstance(names[d], str) and names[d] in ruled for d in dims):
        return mine, theirs, other
    return None


def _counted_in_totals(info: ArrayInfo) -> bool:
    """The output is the last declared activation itself, or undeclared: never counted twice."""
    return info.path != "activations/output"


def _totals(arrays: Sequence[ArrayInfo]) -> Totals:
    by_kind = {kind: 0 for kind in KINDS}
    for info in arrays:
        if _counted_in_totals(info):
            by_kind[info.kind] += info.bytes_per_device * info.runs_per_step
    params = [a for a in arrays if a.kind == "param"]
    return Totals(
        param_bytes=by_kind["param"],
        opt_state_bytes=by_kind["opt_state"],
        input_bytes=by_kind["input"],
        activation_bytes=by_kind["activation"],
        global_param_bytes=sum(a.global_bytes for a in params),
        param_count=sum(math.prod(a.shape) for a in params),
    )


def _warnings(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair], mesh: MeshInfo) -> list[Finding]:
    warnings = [w for info in arrays for w in _indivisible(info, mesh)]
    warnings += _unused_rules(arrays, rules)
    warnings += _unmatched_names(arrays)
    warnings += _large_replicated(arrays, mesh)
    return warnings


def indivisible_error(report: Report) -> ExplorerError | None:
    """The one message for dimensions of the step's arguments the mesh does not divide (JAX refuses to compile
    them), or None. An activation's uneven constraint is accepted (XLA pads) and is not refused.

    The Layout page shows it next to the rules; timing and racing refuse with it before compiling.
    """
    found = [w for w in report.warnings if w.code == "indivisible"]
    if not found:
        return None
    return ExplorerError("rules", len(found), f"sharded dimension(s) do not divide evenly, e.g. {found[0].message}")


def _indivisible(info: ArrayInfo, mesh: MeshInfo) -> list[Finding]:
    found = []
    for dim, (size, entry) in enumerate(zip(info.shape, info.spec)):
        axes = spec_axes(entry)
        product = math.prod(mesh.axis_size(a) for a in axes)
        if product > 1 and size % product:
            name = info.logical_axes[dim] if info.logical_axes else None
            padded = -(-size // product) * product
            if isinstance(name, str):
                what, remedy = f"dim {dim} ('{name}')", f"or map '{name}' to a mesh axis whose size divides {size}, or replicate it"
            else:  # fixed by the model itself (nn.with_partitioning, P(...) in a constraint): no rule can change it
                what, remedy = f"dim {dim} (fixed by the model to {' x '.join(axes)})", "or change the mesh or the model"
            where = f"{info.path}: {what} has size {size}, which mesh axes {' x '.join(axes)} (product {product}) do not divide"
            if info.kind == "activation":  # a constraint inside the step: JAX accepts it and XLA pads the blocks
                found.append(
                    Finding(
                        "indivisible-padded",
                        f"{where}; JAX accepts this constraint and XLA pads each block to {padded // product} "
                        f"({padded - size} of the {padded} padded entries are padding). To avoid the padding: make it a "
                        f"multiple of {product}, {remedy}.",
                        info.path,
                    )
                )
            else:  # an argument of the step: jit and device_put refuse a sharding the mesh does not divide
                found.append(
                    Finding(
                        "indivisible",
                        f"{where}; JAX refuses this sharding. Fix: make it a multiple of {product} (e.g. {padded}), {remedy}.",
                        info.path,
                    )
                )
    return found


def _unused_rules(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair]) -> list[Finding]:
    used = {d.rule for info in arrays for d in info.trace if d.rule is not None}
    names = {n for info in arrays if info.logical_axes for n in info.logical_axes if n}
    found = []
    for index, rule in enumerate(rules):
        if index in used:
            continue
        if rule[0] not in names:
            why = f"no array has a dimension named '{rule[0]}'"
        else:
            why = "every dimension it names was decided by an earlier rule or its mesh axes were taken"
        found.append(Finding("rule-unused", f"rule {index} {format_rule(rule)} never applies: {why}.", None))
    return found


def _unmatched_names(arrays: Sequence[ArrayInfo]) -> list[Finding]:
    unmatched: dict[str, int] = {}
    for info in arrays:
        for dim in info.trace:
            if dim.status == "unmatched":
                unmatched[dim.logical] = unmatched.get(dim.logical, 0) + 1
    return [
        Finding(
            "name-unmatched",
            f"logical name '{name}' matches no rule, so it is replicated in {count} array dimension(s); "
            f"add a rule ['{name}', <mesh axis>] to shard it, or ['{name}', null] to say replication is intended.",
            None,
        )
        for name, count in sorted(unmatched.items())
    ]


def _large_replicated(arrays: Sequence[ArrayInfo], mesh: MeshInfo, top: int = 3) -> list[Finding]:
    if mesh.size == 1:
        return []
    replicated = [a for a in arrays if a.replication == mesh.size and a.global_bytes >= LARGE_REPLICATED_BYTES and _counted_in_totals(a)]
    replicated.sort(key=lambda a: a.global_bytes, reverse=True)
    return [
        Finding(
            "replicated-large",
            f"{a.path} ({a.global_bytes / 2**20:,.1f} MiB) is fully replicated: every one of the {mesh.size} devices holds all of it.",
            a.path,
        )
        for a in replicated[:top]
    ]


def state_shardings(report: Report, model: AbstractModel, mesh: Mesh, template: Any = None) -> Any:
    """The train state's shardings on ``mesh`` in its own tree (boxes or NNX Variables kept), from the report's specs.

    The mesh is the caller's, as Flax's ``logical_to_mesh_sharding`` takes it: this process's
    devices (``layout_mesh``) or a target's. ``template`` is the state tree to follow (default: the
    abstract model's); its leaves must be the state's arrays in the same order.
    """
    specs = iter(report.array(a.path).spec for a in model.state_arrays)
    tree = reading.live(model).state if template is None else template
    return jax.tree_util.tree_map(lambda _: NamedSharding(mesh, PartitionSpec(*next(specs))), tree)


def input_shardings(report: Report, mesh: Mesh) -> tuple[NamedSharding, ...]:
    """The model inputs' shardings on ``mesh``, in the model's order, from the report's specs."""
    return tuple(NamedSharding(mesh, PartitionSpec(*a.spec)) for a in report.arrays if a.kind == "input")


def _trace_json(dim: DimTrace, rules: Sequence[RulePair]) -> dict[str, Any]:
    return {
        "dim": dim.dim,
        "logical": dim.logical,
        "mesh_axes": list(dim.mesh_axes),
        "rule": dim.rule,
        "status": dim.status,
        "skipped": [dataclasses.asdict(s) for s in dim.skipped],
        "explanation": dim.explain(rules),
    }


def tiled_arrays(report: Report, pattern: str = "*") -> list[ArrayInfo]:
    """The arrays whose tiles to list: paths matching the glob ``pattern``, within MAX_TILE_ENTRIES.

    Listing every block of every array of a 256 x 256 mesh is ~150 MB of text; the
    size is the number of (block, device) pairs, one per device per array.
    """
    chosen = [info for info in report.arrays if fnmatch.fnmatchcase(info.path, pattern)]
    if not chosen:
        raise ExplorerError("--tiles-for", pattern, "matches no array path (paths look like 'params/Dense_0/kernel')")
    entries = len(chosen) * report.mesh.size
    if entries > MAX_TILE_ENTRIES:
        raise ExplorerError(
            "--tiles-for" if pattern != "*" else "--tiles",
            pattern,
            f"would list {entries:,} (block, device) pairs ({len(chosen)} arrays x {report.mesh.size:,} devices); "
            f"the limit is {MAX_TILE_ENTRIES:,}: choose fewer arrays with --tiles-for GLOB, e.g. 'params/*kernel'",
        )
    return chosen


def array_to_dict(info: ArrayInfo, report: Report, include_tiles: bool) -> dict[str, Any]:
    rules = report.layout.rules_for_flax()
    data = {
        "path": info.path,
        "kind": info.kind,
        "shape": list(info.shape),
        "dtype": info.dtype,
        "logical_axes": None if info.logical_axes is None else [entry_json(n) for n in info.logical_axes],
        "spec": [entry_json(e) for e in info.spec],
        "shard_shape": list(info.shard_shape),
        "bytes_per_device": info.bytes_per_device,
        "replication": info.replication,
        "trace": [_trace_json(d, rules) for d in info.trace],
        "note": info.note,
        "module": info.module,
        "runs_per_step": info.runs_per_step,
        "semantics": info.semantics,
    }
    if include_tiles:
        data["tiles"] = [{"index": [list(r) for r in tile.index], "devices": list(tile.devices)} for tile in report.tiles(info.path)]
    return data


def report_to_dict(report: Report, include_tiles: bool = False, tiles_for: str = "*") -> dict[str, Any]:
    """The report in the documented JSON form (tiles only when asked, for arrays matching ``tiles_for``)."""
    mesh = report.mesh
    tiled = {info.path for info in tiled_arrays(report, tiles_for)} if include_tiles else set()
    return {
        "layout": report.layout.to_dict(),
        "mesh": {
            "shape": list(mesh.shape),
            "axes": list(mesh.axes),
            "devices": mesh.ids_array().tolist(),
            "abstract": mesh.abstract,
        },
        "framework": report.framework,
        "resolution_order": report.resolution_order,
        "arrays": [array_to_dict(a, report, a.path in tiled) for a in report.arrays],
        "totals": report.totals.as_dict(),
        "warnings": [dataclasses.asdict(w) | {"level": w.level} for w in report.warnings],
    }
