"""Layout -> Report: how every array of the train step is sharded, and what to watch out for.

``analyze`` takes the cached abstract model, resolves every array's logical axes with
the layout's rules (keeping the trace), and derives shard shapes, bytes per device,
replication and warnings. A mesh needing more devices than this process has is a
*planned* mesh: JAX's ``AbstractMesh`` stands in, and device ids are 0..N-1 in mesh
order.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from explorer import tiles as tiles_lib
from explorer.abstract import AbstractArray, AbstractModel, abstract_model
from explorer.layout import Layout, MeshSpec
from explorer.rules import RESOLUTION_ORDER, DimTrace, RulePair, format_rule, resolve, spec_axes
from explorer.tiles import MeshInfo, Tile

LARGE_REPLICATED_BYTES = 1 << 20
KIND_LABELS = {"param": "parameters", "opt_state": "optimizer state", "input": "inputs", "activation": "declared activations"}
KINDS = tuple(KIND_LABELS)


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

    @property
    def global_bytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def spec_text(self) -> str:
        """``P(None, 'model')``, as JAX prints it."""
        return repr(PartitionSpec(*self.spec))


@dataclasses.dataclass(frozen=True)
class Warning:
    code: str
    message: str
    path: str | None = None


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
            "param": self.param_bytes, "opt_state": self.opt_state_bytes,
            "input": self.input_bytes, "activation": self.activation_bytes,
        }

    def as_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "state_bytes": self.state_bytes, "total_bytes": self.total_bytes}


@dataclasses.dataclass(frozen=True)
class Report:
    layout: Layout
    mesh: MeshInfo
    arrays: tuple[ArrayInfo, ...]
    totals: Totals
    warnings: tuple[Warning, ...]
    resolution_order: str = RESOLUTION_ORDER

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


@functools.lru_cache(maxsize=64)
def _mesh_info_cached(shape: tuple[int, ...], axes: tuple[str, ...], device_count: int) -> MeshInfo:
    size = math.prod(shape)
    if size > device_count:
        ids = np.arange(size).reshape(shape)
        return MeshInfo(shape, axes, _nested(ids), abstract=True)
    return MeshInfo(shape, axes, _nested(jax_mesh(shape, axes).device_ids), abstract=False)


def _nested(ids: np.ndarray) -> tuple:
    return tuple(_nested(row) for row in ids) if ids.ndim > 1 else tuple(int(i) for i in ids)


@functools.lru_cache(maxsize=64)
def jax_mesh(shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh | AbstractMesh:
    """A Mesh with Auto axes (what Flax's logical constraints want), or an AbstractMesh if too big."""
    axis_types = (AxisType.Auto,) * len(axes)
    size = math.prod(shape)
    if size > jax.device_count():
        return AbstractMesh(shape, axes, axis_types=axis_types)
    return jax.make_mesh(shape, axes, axis_types=axis_types, devices=jax.devices()[:size])


def analyze(layout: Layout) -> Report:
    """The sharding of every array in ``layout``'s train step.

    Example::

        >>> report = analyze(seed_layout())
        >>> report.array("params/LogicalDotReluDot_0/Dense_0/kernel").spec
        (None, 'model')
    """
    model = abstract_model(layout.model)
    mesh = mesh_info(layout.mesh)
    rules = layout.rules_for_flax()
    arrays = tuple(_array_info(a, rules, mesh) for a in model.arrays)
    return Report(layout, mesh, arrays, _totals(arrays), tuple(_warnings(arrays, rules, mesh)))


def _array_info(array: AbstractArray, rules: Sequence[RulePair], mesh: MeshInfo) -> ArrayInfo:
    resolution = resolve(array.logical_axes, rules, ndim=len(array.shape))
    shard = tiles_lib.shard_shape(array.shape, resolution.spec, mesh)
    return ArrayInfo(
        path=array.path,
        kind=array.kind,
        shape=array.shape,
        dtype=array.dtype,
        logical_axes=array.logical_axes,
        spec=resolution.spec,
        shard_shape=shard,
        bytes_per_device=math.prod(shard) * np.dtype(array.dtype).itemsize,
        replication=tiles_lib.replication(resolution.spec, mesh),
        trace=resolution.dims,
        note=array.note,
    )


def _counted_in_totals(info: ArrayInfo) -> bool:
    """The output is the last declared activation itself, or undeclared: never counted twice."""
    return info.path != "activations/output"


def _totals(arrays: Sequence[ArrayInfo]) -> Totals:
    by_kind = {kind: 0 for kind in KINDS}
    for info in arrays:
        if _counted_in_totals(info):
            by_kind[info.kind] += info.bytes_per_device
    params = [a for a in arrays if a.kind == "param"]
    return Totals(
        param_bytes=by_kind["param"],
        opt_state_bytes=by_kind["opt_state"],
        input_bytes=by_kind["input"],
        activation_bytes=by_kind["activation"],
        global_param_bytes=sum(a.global_bytes for a in params),
        param_count=sum(math.prod(a.shape) for a in params),
    )


def _warnings(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair], mesh: MeshInfo) -> list[Warning]:
    warnings = [w for info in arrays for w in _indivisible(info, mesh)]
    warnings += _unused_rules(arrays, rules)
    warnings += _unmatched_names(arrays)
    warnings += _large_replicated(arrays, mesh)
    return warnings


def _indivisible(info: ArrayInfo, mesh: MeshInfo) -> list[Warning]:
    found = []
    for dim, (size, entry) in enumerate(zip(info.shape, info.spec)):
        axes = spec_axes(entry)
        product = math.prod(mesh.axis_size(a) for a in axes)
        if product > 1 and size % product:
            name = info.logical_axes[dim] if info.logical_axes else None
            padded = -(-size // product) * product
            found.append(Warning(
                "indivisible",
                f"{info.path}: dim {dim} ('{name}') has size {size}, which mesh axes {' x '.join(axes)} "
                f"(product {product}) do not divide; JAX refuses this sharding. Fix: make it a multiple of "
                f"{product} (e.g. {padded}), or map '{name}' to a mesh axis whose size divides {size}, or replicate it.",
                info.path,
            ))
    return found


def _unused_rules(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair]) -> list[Warning]:
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
        found.append(Warning("rule-unused", f"rule {index} {format_rule(rule)} never applies: {why}.", None))
    return found


def _unmatched_names(arrays: Sequence[ArrayInfo]) -> list[Warning]:
    unmatched: dict[str, int] = {}
    for info in arrays:
        for dim in info.trace:
            if dim.status == "unmatched":
                unmatched[dim.logical] = unmatched.get(dim.logical, 0) + 1
    return [
        Warning(
            "name-unmatched",
            f"logical name '{name}' matches no rule, so it is replicated in {count} array dimension(s); "
            f"add a rule ['{name}', <mesh axis>] to shard it, or ['{name}', null] to say replication is intended.",
            None,
        )
        for name, count in sorted(unmatched.items())
    ]


def _large_replicated(arrays: Sequence[ArrayInfo], mesh: MeshInfo, top: int = 3) -> list[Warning]:
    if mesh.size == 1:
        return []
    replicated = [
        a for a in arrays
        if a.replication == mesh.size and a.global_bytes >= LARGE_REPLICATED_BYTES and _counted_in_totals(a)
    ]
    replicated.sort(key=lambda a: a.global_bytes, reverse=True)
    return [
        Warning(
            "replicated-large",
            f"{a.path} ({a.global_bytes / 2**20:,.1f} MiB) is fully replicated: every one of the "
            f"{mesh.size} devices holds all of it.",
            a.path,
        )
        for a in replicated[:top]
    ]


def state_shardings(report: Report, model: AbstractModel) -> Any:
    """The TrainState's out_shardings tree (boxes as leaves), built from the report's specs."""
    mesh = jax_mesh(tuple(report.mesh.shape), tuple(report.mesh.axes))
    specs = iter(report.array(a.path).spec for a in model.state_arrays)
    return jax.tree_util.tree_map(
        lambda _: NamedSharding(mesh, PartitionSpec(*next(specs))),
        model.state_shapes,
        is_leaf=lambda x: isinstance(x, nn.Partitioned),
    )


def spec_entry_json(entry: Any) -> Any:
    """One spec entry in JSON form: null, "axis" or ["axis", ...]."""
    return list(entry) if isinstance(entry, tuple) else entry


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


def array_to_dict(info: ArrayInfo, report: Report, include_tiles: bool) -> dict[str, Any]:
    rules = report.layout.rules_for_flax()
    data = {
        "path": info.path,
        "kind": info.kind,
        "shape": list(info.shape),
        "dtype": info.dtype,
        "logical_axes": None if info.logical_axes is None else list(info.logical_axes),
        "spec": [spec_entry_json(e) for e in info.spec],
        "shard_shape": list(info.shard_shape),
        "bytes_per_device": info.bytes_per_device,
        "replication": info.replication,
        "trace": [_trace_json(d, rules) for d in info.trace],
        "note": info.note,
    }
    if include_tiles:
        data["tiles"] = [
            {"index": [list(r) for r in tile.index], "devices": list(tile.devices)} for tile in report.tiles(info.path)
        ]
    return data


def report_to_dict(report: Report, include_tiles: bool = False) -> dict[str, Any]:
    """The report in the documented JSON form (tiles only when asked: they can be many)."""
    mesh = report.mesh
    return {
        "layout": report.layout.to_dict(),
        "mesh": {
            "shape": list(mesh.shape),
            "axes": list(mesh.axes),
            "devices": mesh.ids_array().tolist(),
            "abstract": mesh.abstract,
        },
        "resolution_order": report.resolution_order,
        "arrays": [array_to_dict(a, report, include_tiles) for a in report.arrays],
        "totals": report.totals.as_dict(),
        "warnings": [dataclasses.asdict(w) for w in report.warnings],
    }
