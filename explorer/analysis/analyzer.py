"""Layout -> Report: how every array of the train step is sharded, and what to watch out for.

``analyze`` reads the abstract model with one call into the reading (``reading.read``: the
model and the activations JAX receives under the layout, from its caches or its stages),
resolves every array's logical axes with the layout's rules (keeping the trace), and derives
shard shapes, bytes per device, replication and totals; ``findings.py`` says what to watch
out for. A mesh needing more devices than this process has is a *planned* mesh: JAX's
``AbstractMesh`` stands in, and device ids are 0..N-1 in mesh order. The report's JSON form
(``report_to_dict``) is the command line's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from typing import Any, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from explorer import tiles as tiles_lib
from explorer.analysis import findings
from explorer import reading
from explorer.reading import AbstractArray, AbstractModel, abstract_model, collector
from explorer.errors import ExplorerError
from explorer.layout import Layout
from explorer.models import STEP
from explorer.analysis.report import KINDS, ArrayInfo, Finding, Report, Totals, itemsize
from explorer.meshes import jax_mesh, layout_mesh, mesh_info
from explorer.rules import DimTrace, RulePair, effective_axes, resolve
from explorer.specs import entry_json, spec_entry
from explorer.tiles import MeshInfo

MAX_TILE_ENTRIES = 1_000_000  # (block, device) pairs the command line lists at most (about 10 MB of text)


def model_of(layout: Layout) -> AbstractModel:
    """The layout's abstract model, traced so that its rules' names and mesh axes are told apart (a first trace runs
    under the layout itself, which also gives the activations ``analyze`` reads under it)."""
    return read_layout(layout).model


def read_layout(layout: Layout) -> reading.Reading:
    """The layout's model and the activations JAX receives under it (``reading.read``): under Auto axes on the
    layout's Auto mesh, telling apart its rules' names; under Explicit axes on its own mesh, from the values' types."""
    rules = layout.rules_for_flax()
    if layout.mesh.explicit:  # the sharding is in the values' types: read under the layout itself
        return reading.read(layout.model, layout_mesh(layout.mesh), rules)
    names = frozenset(rule.logical for rule in layout.rules)
    return reading.read(layout.model, jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes)), rules, names)


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
    and mesh axes (``model_for_layouts``); by default the layout's (``read_layout``).
    ``received=False`` leaves out what JAX receives under this layout's mesh and rules (a given
    model is then not traced under it, ``reading.received``): the activations' specs are the rules
    applied to the names the probe read, which is what JAX receives unless the model's own code
    resolves names (MaxText's ``maybe_shard_with_logical``). Parameters, optimizer state and inputs
    do not depend on it.

    Example::

        >>> from explorer.layout import seed_layout
        >>> report = analyze(seed_layout())
        >>> report.array("params/LogicalDotReluDot_0/Dense_0/kernel").spec
        (None, 'model')
    """
    if layout.model.name == STEP:
        return _step_report(layout)
    with collector.paused():  # thousands of short-lived records: no collector passes over them (collector.py)
        if model is None:  # one call into the reading: the model and what JAX receives under the layout
            found = read_layout(layout)
            model, activations = found.model, found.received if received else None
        elif received and not model.typed:
            activations = reading.received(model, jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes)), layout.rules_for_flax())
        else:
            activations = None
        return _analyzed(layout, model, activations)


def _analyzed(layout: Layout, model: AbstractModel, received: reading.Resolved | None) -> Report:
    mesh = mesh_info(layout.mesh)
    rules = layout.rules_for_flax()
    problems: list[Finding] = []
    placements: dict = {}
    arrays = tuple(_array_info(a, rules, mesh, problems, placements) for a in model.arrays)
    notes: list[Finding] = []
    if model.typed:  # the types are the truth: what Flax built and what each equation's output is
        arrays = tuple(_as_typed(info, array, mesh) for info, array in zip(arrays, model.arrays))
    elif received is not None:
        arrays, notes = _as_received(arrays, model, received, rules, mesh, problems)
    warnings = problems + notes + findings.warnings(arrays, rules, mesh) + findings.semantics_differ(model, rules, mesh)
    if model.loops_without_length:
        warnings.append(
            Finding(
                "loop-without-length",
                f"{model.loops_without_length} declared activation(s) sit in a while loop with no static length: "
                "they are listed once, though the loop may run them many times.",
            )
        )
    return Report(layout, mesh, arrays, _totals(arrays), tuple(warnings), model.framework, model.values)


def _step_report(layout: Layout) -> Report:
    """A user's own step (model ``step``): its arguments as its factory writes them on the layout's mesh
    (``layout_mesh``: this process's devices where they are enough, else an ``AbstractMesh``), each with the spec of its
    own sharding. No model is read and no rule applies: the step's code decided every sharding."""
    from explorer.models.steps import factory_step

    mesh = mesh_info(layout.mesh)
    options = {k: v for k, v in layout.model.options.items() if k != "factory"}
    fn, args, kwargs = factory_step(layout.model.options["factory"], options, layout_mesh(layout.mesh))
    name = getattr(getattr(fn, "__wrapped__", fn), "__name__", "step")
    arrays = []
    for path, leaf in jax.tree_util.tree_flatten_with_path({"args": list(args), "kwargs": kwargs})[0]:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            continue
        given = getattr(getattr(leaf, "sharding", None), "spec", ())
        spec = tuple(spec_entry(e) if isinstance(e, (list, tuple)) else e for e in given) + (None,) * (len(leaf.shape) - len(given))
        shard = tiles_lib.shard_shape(tuple(leaf.shape), spec, mesh)
        trace = tuple(
            DimTrace(d, None, tuple(a for a in ((e,) if isinstance(e, str) else e or ())), None, (), "fixed" if e else "unnamed")
            for d, e in enumerate(spec)
        )
        arrays.append(
            ArrayInfo(
                path=jax.tree_util.keystr(path, simple=True, separator="/"),
                kind="input",
                shape=tuple(leaf.shape),
                dtype=str(leaf.dtype),
                logical_axes=None,
                spec=spec,
                shard_shape=shard,
                bytes_per_device=math.prod(shard) * itemsize(str(leaf.dtype)),
                replication=tiles_lib.replication(spec, mesh),
                trace=trace,
                note=f"an argument of your step {name}: its sharding as your factory wrote it",
            )
        )
    return Report(layout, mesh, tuple(arrays), _totals(arrays), ())


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
        bytes_per_device=math.prod(shard) * itemsize(info.dtype),
        replication=tiles_lib.replication(spec, mesh),
        note=f"{info.note}; {note}" if info.note else note,
    )


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
    spec, refusals = findings.checked_spec(resolution, rules, mesh)
    shard = tiles_lib.shard_shape(array.shape, spec, mesh)
    nbytes = math.prod(shard) * itemsize(array.dtype)
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


def _totals(arrays: Sequence[ArrayInfo]) -> Totals:
    by_kind = {kind: 0 for kind in KINDS}
    for info in arrays:
        if findings.counted_in_totals(info):
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
        "warnings": [{k: v for k, v in dataclasses.asdict(w).items() if k != "items" or v} | {"level": w.level} for w in report.warnings],
    }
