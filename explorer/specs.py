"""The PartitionSpec vocabulary, one home for it: a spec entry, its mesh axes, its JSON and its text.

A spec entry says which mesh axes one dimension is sharded over: None (replicated), one axis name, or
a tuple of axis names (sharded over their product), as ``jax.sharding.PartitionSpec`` and Flax's
rules write it. Files and links write a tuple as a list. Nothing here imports JAX except ``spec_text``,
which prints a spec as JAX does.
"""

from __future__ import annotations

from typing import Any, Sequence

MeshAxes = tuple[str, ...]  # the mesh axes one dimension is sharded over, in order; () = replicated
SpecEntry = None | str | tuple[str, ...]  # the same, as written in a PartitionSpec or a rule


def spec_axes(entry: SpecEntry | Sequence[str]) -> MeshAxes:
    """The mesh axes of a spec entry or a rule's mesh field, whatever form it was written in.

    >>> spec_axes(None), spec_axes("model"), spec_axes(["data", "model"])
    ((), ('model',), ('data', 'model'))
    """
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def spec_entry(axes: SpecEntry | Sequence[str]) -> SpecEntry:
    """One spelling per meaning, as Flax and PartitionSpec write it: none is None, one axis its name.

    >>> spec_entry([]), spec_entry(["model"]), spec_entry(("data", "model"))
    (None, 'model', ('data', 'model'))
    """
    axes = spec_axes(axes)
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


def normal_spec(spec: Any, ndim: int) -> tuple[SpecEntry, ...]:
    """A spec (a PartitionSpec, or entries in any spelling) as ``spec_entry`` entries, padded with None to ``ndim``.

    >>> normal_spec(("data", ["model"]), 3)
    ('data', 'model', None)
    """
    entries = [None if _unconstrained(e) else spec_entry(e) for e in tuple(spec)]
    entries += [None] * (ndim - len(entries))
    return tuple(entries[:ndim])


def entry_json(entry: SpecEntry) -> Any:
    """One entry as a file writes it: null, "axis" or ["axis", ...]."""
    return list(entry) if isinstance(entry, tuple) else entry


def spec_json(spec: Sequence[SpecEntry]) -> list[Any]:
    return [entry_json(e) for e in spec]


def spec_text(spec: Sequence[SpecEntry] | None, *, unreduced: Sequence[str] = (), reduced: Sequence[str] = ()) -> str:
    """``P('x', None)``, ``P(('x', 'y'),)``, ``P()``, ``P('x', unreduced={'y'})``, as JAX prints it; "—" for no spec."""
    from jax.sharding import PartitionSpec

    if spec is None:
        return "—"
    extra = {name: set(axes) for name, axes in (("unreduced", unreduced), ("reduced", reduced)) if axes}
    return repr(PartitionSpec(*spec, **extra))


def _unconstrained(entry: Any) -> bool:
    return entry is not None and not isinstance(entry, (str, tuple, list))  # PartitionSpec.UNCONSTRAINED
