"""Explicit axes: every value of a traced program with the sharding in its type (``TypedValue``, the per-value view).

On a mesh with Explicit axes every value's sharding is part of its type (``jax.typeof(x)`` prints
``f32[8@data,64@model]``). ``program_values(closed, framework)`` walks a forward program (sub-programs and scans
included) and gives each equation's outputs with their type's spec, unreduced and reduced axes, the model's source
line that computed them, whether the equation *sets* a sharding (``reshard``, ``sharding_constraint``, an
``out_sharding=`` given to the op) and the communication its operands' and output's types imply (a reshard, a
contraction over a dimension both operands shard). A helper of the activations stage (``activations.py``), as
``constraints.py`` is under Auto axes.
"""

from __future__ import annotations

import os
from typing import Any

from jax.sharding import AxisType, PartitionSpec

from explorer.reading import auto_regions
from explorer.reading.arrays import TypedValue
from explorer.reading.constraints import user_frame
from explorer.specs import spec_axes, spec_entry

# Equations whose params carry a sharding the program asked for (an ``out_sharding=``, ``reshard``'s destination,
# ``jnp.zeros(..., out_sharding=)`` as ``broadcast_in_dim``'s ``sharding``), by param name.
_SETTING_PARAMS = ("out_sharding", "dst_sharding", "sharding")


def program_values(closed, framework: str = "nnx") -> tuple[TypedValue, ...]:
    """Every value a program computes, in program order, with its type's sharding (sub-programs and scans included).

    Linen's name stack is the module path; NNX pushes none (its name stack holds only JAX's
    own scopes, such as an einsum's equation), so an NNX value is placed by its source line.
    """
    found: list[TypedValue] = []
    _walk(closed.jaxpr, "", ("", ""), 1, found, framework == "linen", {})
    return tuple(found)


def _walk(jaxpr, module: str, parent_source: tuple[str, str], runs: int, found: list, stacks: bool, types: dict) -> None:
    for eqn in jaxpr.eqns:
        stack = "/".join(p for p in (module, str(eqn.source_info.name_stack)) if p) if stacks else ""
        own = _source(eqn.source_info)  # None inside JAX's own helpers (jnp.where's jit): they inherit the caller's line
        source = own or parent_source
        setting = _sets_sharding(eqn)
        for var in eqn.outvars:
            aval = getattr(var, "aval", None)
            if aval is None or not hasattr(aval, "shape"):
                continue
            shape, dtype, spec, unreduced, reduced, type_text = _type_fields(aval, types)
            found.append(
                TypedValue(
                    index=len(found),
                    op=eqn.primitive.name,
                    shape=shape,
                    dtype=dtype,
                    spec=spec,
                    unreduced=unreduced,
                    reduced=reduced,
                    type_text=type_text,
                    source=source[0],
                    function=source[1],
                    module=stack,
                    runs=runs,
                    sets_sharding=setting and own is not None,
                    communication=_communication(eqn, var),
                )
            )
        for sub, times in _sub_programs(eqn):
            _walk(sub, stack, source, runs * times, found, stacks, types)


def _type_fields(aval, types: dict) -> tuple:
    """A value's shape, dtype, spec, unreduced and reduced axes and printed type, read once per distinct type (a
    program holds thousands of values of a few hundred types)."""
    try:
        fields = types.get(aval)
    except TypeError:  # an unhashable abstract value (a reference's): read it on its own
        return _read_type_fields(aval)
    if fields is None:
        fields = types[aval] = _read_type_fields(aval)
    return fields


def _read_type_fields(aval) -> tuple:
    return (
        tuple(aval.shape),
        str(aval.dtype),
        spec_of(aval),
        _axes_attr(aval, "unreduced"),
        _axes_attr(aval, "reduced"),
        aval.str_short(short_dtypes=True),
    )


def _sub_programs(eqn) -> list[tuple[Any, int]]:
    if eqn.primitive.name == "scan":
        return [(eqn.params["jaxpr"].jaxpr, int(eqn.params["length"]))]
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                found.append((inner, 1))
    return found


def _source(source_info) -> tuple[str, str] | None:
    """``("modules.py:187", "Attention.__call__")``: the innermost frame of the model's own code."""
    frame = user_frame(source_info)
    if frame is None:
        return None
    return f"{os.path.basename(frame.file_name)}:{frame.line_num}", frame.function_name


def _sets_sharding(eqn) -> bool:
    """The equation sets a sharding: ``reshard``, ``sharding_constraint``, or an op given an ``out_sharding``."""
    if auto_regions.crossing(eqn) == auto_regions.ENTER:  # a library call's implicit reshard into auto_axes
        return True
    if not any(_explicit(v.aval) for v in eqn.outvars if hasattr(v, "aval")):
        return False  # inside auto_axes (an embedding lookup): onto an Auto copy of the mesh, where XLA decides
    if eqn.primitive.name in ("reshard", "sharding_constraint"):
        return True
    return any(
        eqn.params.get(name) is not None
        for name in _SETTING_PARAMS
        if not (name == "sharding" and eqn.primitive.name == "convert_element_type")
    )


def spec_of(value: Any) -> tuple:
    """The type's spec as plain entries (None, an axis, a tuple of axes), padded to the rank; () without a mesh."""
    sharding = getattr(value, "sharding", None)
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return (None,) * len(getattr(value, "shape", ()))
    entries = tuple(None if e is PartitionSpec.UNCONSTRAINED else spec_entry(e) for e in spec)
    return entries + (None,) * (len(value.shape) - len(entries))


def _axes_attr(aval, name: str) -> tuple[str, ...]:
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    return tuple(sorted(getattr(spec, name, ()) or ()))


def _axes(entries) -> list[str]:
    return [axis for entry in entries for axis in spec_axes(entry)]


def _communication(eqn, var) -> str:
    """The communication an equation implies, from its operands' and output's types; "" for none."""
    if auto_regions.crossing(eqn):  # into or out of auto_axes (explorer/reading/auto_regions.py)
        return auto_regions.communication(eqn, var)
    name = eqn.primitive.name
    if name == "reshard" and var is eqn.outvars[0]:
        source, target = eqn.invars[0].aval, var.aval
        if _explicit(source) and _explicit(target) and spec_of(source) != spec_of(target):
            return f"reshard {PartitionSpec(*spec_of(source))} -> {PartitionSpec(*spec_of(target))}"
        return ""
    if name == "dot_general":
        (lhs_contract, rhs_contract), _ = eqn.params["dimension_numbers"]
        lhs, rhs = spec_of(eqn.invars[0].aval), spec_of(eqn.invars[1].aval)
        shared = sorted(set(_axes(lhs[d] for d in lhs_contract)) & set(_axes(rhs[d] for d in rhs_contract)))
        if not shared:
            return ""
        out = set(_axes(spec_of(var.aval)))
        unreduced = set(_axes_attr(var.aval, "unreduced"))
        parts = []
        for axis in shared:
            if axis in unreduced:
                parts.append(f"partial sums over {axis!r} left unreduced")
            elif axis in out:
                parts.append(f"reduce-scatter over {axis!r}")
            else:
                parts.append(f"all-reduce over {axis!r}")
        return "contraction over a dimension both operands shard: " + ", ".join(parts)
    return ""


def _explicit(aval) -> bool:
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    return bool(mesh is not None and AxisType.Explicit in getattr(mesh, "axis_types", ()))
