"""Implicit communication on Explicit meshes: where a library call leaves the types for an ``auto_axes`` region.

On a mesh with Explicit axes communication is written as ``jax.sharding.reshard``, but a library call can
communicate without the user writing one: ``embedding.at[tokens].get(out_sharding=...)`` runs under
``auto_axes``, which JAX traces (checked with jax 0.12.0.1) as

    c:f32[128,64]      = reshard a   # a:f32[128@model,64@data] onto an Auto copy of the mesh, spec P(None, None)
    d:i32[8,16]        = reshard b   # the token ids likewise
    ... gather ...                   # on the Auto copy: XLA chooses every sharding (propagation)
    j:f32[8@data,16,64@model] = reshard i   # back to the Explicit mesh, to the out_sharding asked for

Inside the region the types say *replicated* (no axis is Explicit there): what moves is XLA's choice, read
from the compiled program (``explorer.hlo.sources`` attributes its collectives to the same line). Each reshard
that enters or leaves a region is a place where data may move, at the user's line that called the library.
A model can open such a region itself (``jax.sharding.auto_axes``, as the built-in pipeline does for its shift between
stages, ``explorer/models/pipeline.py``): it is read the same way.
"""

from __future__ import annotations

from typing import Any

from jax.sharding import AxisType, PartitionSpec

ENTER, LEAVE = "enter", "leave"


def _explicit_axes(mesh: Any) -> set[str]:
    names, types = getattr(mesh, "axis_names", ()), getattr(mesh, "axis_types", ())
    return {name for name, kind in zip(names, types) if kind == AxisType.Explicit}


def _auto_axes(mesh: Any) -> set[str]:
    names, types = getattr(mesh, "axis_names", ()), getattr(mesh, "axis_types", ())
    return {name for name, kind in zip(names, types) if kind == AxisType.Auto}


def crossing(eqn: Any) -> str | None:
    """``"enter"`` for a ``reshard`` from an Explicit type onto a mesh where those axes are Auto (into ``auto_axes``),
    ``"leave"`` for the way back, None for any other equation."""
    if eqn.primitive.name != "reshard" or not eqn.invars:
        return None
    source = getattr(getattr(eqn.invars[0], "aval", None), "sharding", None)
    target = eqn.params.get("dst_sharding")
    source_mesh, target_mesh = getattr(source, "mesh", None), getattr(target, "mesh", None)
    if source_mesh is None or target_mesh is None:
        return None
    if _explicit_axes(source_mesh) & _auto_axes(target_mesh):
        return ENTER
    if _auto_axes(source_mesh) & _explicit_axes(target_mesh):
        return LEAVE
    return None


def _spec_text(sharding: Any, rank: int) -> str:
    spec = tuple(getattr(sharding, "spec", ()) or ())
    return str(PartitionSpec(*(spec + (None,) * (rank - len(spec)))))


def communication(eqn: Any, var: Any) -> str:
    """What crossing into or out of an ``auto_axes`` region implies for ``var`` (an output of ``eqn``); "" for none.

    Entering: the value's Explicit sharding gives way to XLA's choice (the type says replicated, an all-gather of
    the whole array if XLA keeps that); leaving: XLA's layout is resharded to the type asked for.
    """
    where = crossing(eqn)
    if where is None or var is not eqn.outvars[0]:
        return ""
    rank = len(getattr(var.aval, "shape", ()))
    source = _spec_text(eqn.invars[0].aval.sharding, rank)
    if where == ENTER:
        return (
            f"into auto_axes (a library call's implicit reshard, or the model's own region): {source} -> replicated in the type "
            "on an Auto copy of the mesh; XLA chooses what moves (an all-gather of the whole array where it keeps it replicated)"
        )
    return f"out of auto_axes: XLA's layout -> {_spec_text(eqn.params['dst_sharding'], rank)}, the out_sharding asked for"
