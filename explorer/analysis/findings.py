"""What a layout's report says beside the arrays: the findings (errors JAX would refuse, warnings, notes).

- ``checked_spec``: an array's spec with what JAX refuses (a mesh axis the mesh lacks, one used twice) reported
  and left out of the drawing;
- ``warnings``: dimensions the mesh does not divide (an argument's refused, an activation's padded), rules that
  never apply, names no rule covers, large replicated arrays;
- ``semantics_differ``: where Flax Linen and NNX would read the rules differently;
- ``indivisible_error``: the one message timing and racing refuse with before compiling.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from jax.sharding import PartitionSpec

from explorer.errors import ExplorerError
from explorer.reading import AbstractArray, AbstractModel
from explorer.rules import RESOLUTION_ORDERS, RulePair, effective_axes, format_rule, resolve
from explorer.specs import spec_axes
from explorer.tiles import MeshInfo
from explorer.formats import counted

from explorer.analysis.report import ArrayInfo, Finding, Report

LARGE_REPLICATED_BYTES = 1 << 20


def checked_spec(resolution, rules, mesh: MeshInfo) -> tuple[tuple, list[tuple[str, str]]]:
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


def semantics_differ(model: AbstractModel, rules: Sequence[RulePair], mesh: MeshInfo) -> list[Finding]:
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


def counted_in_totals(info: ArrayInfo) -> bool:
    """The output is the last declared activation itself, or undeclared: never counted twice."""
    return info.path != "activations/output"


def warnings(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair], mesh: MeshInfo) -> list[Finding]:
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


UNUSED_RULES_ONE_BY_ONE = 3  # more rules than this that never apply are one finding (each one in its items)


def _unused_rules(arrays: Sequence[ArrayInfo], rules: Sequence[RulePair]) -> list[Finding]:
    """A rule that never applies, one finding each; more than UNUSED_RULES_ONE_BY_ONE of them are one finding, naming the
    first few (a MaxText config's base.yml writes rules for every model and mode: a dense model uses 12 of its 80)."""
    used = {d.rule for info in arrays for d in info.trace if d.rule is not None}
    names = {n for info in arrays if info.logical_axes for n in info.logical_axes if n}
    found, absent = [], 0
    for index, rule in enumerate(rules):
        if index in used:
            continue
        if rule[0] not in names:
            why = f"no array has a dimension named '{rule[0]}'"
            absent += 1
        else:
            why = "every dimension it names was decided by an earlier rule or its mesh axes were taken"
        found.append((rule, f"rule {index} {format_rule(rule)} never applies: {why}."))
    if len(found) <= UNUSED_RULES_ONE_BY_ONE:
        return [Finding("rule-unused", message) for _, message in found]
    first = ", ".join(dict.fromkeys(rule[0] for rule, _ in found[:6]))
    shadowed = len(found) - absent
    kinds = [
        f"{absent} name logical names no array of this model has (rules written for other models or modes)" if absent else "",
        f"{shadowed} {'is' if shadowed == 1 else 'are'} for names another rule decides" if shadowed else "",
    ]
    return [
        Finding(
            "rule-unused",
            f"{len(found)} of the {len(rules)} rules never apply to this model ({first}, …): "
            + "; ".join(k for k in kinds if k)
            + ". This layout cannot use them: removing them changes no sharding.",
            items=tuple(message for _, message in found),
        )
    ]


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
    replicated = [a for a in arrays if a.replication == mesh.size and a.global_bytes >= LARGE_REPLICATED_BYTES and counted_in_totals(a)]
    replicated.sort(key=lambda a: a.global_bytes, reverse=True)
    return [
        Finding(
            "replicated-large",
            f"{a.path} ({a.global_bytes / 2**20:,.1f} MiB) is fully replicated: every one of the {counted(mesh.size, 'device')} holds all of it.",
            a.path,
        )
        for a in replicated[:top]
    ]
