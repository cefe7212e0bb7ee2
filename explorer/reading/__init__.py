"""How a model is read: a model configuration and mesh axis names in, the abstract model out.

One door: ``abstract_model(model_spec, logical_names, mesh_axes)`` gives the
``AbstractModel`` (every array of the train state and the step, as plain data) and
``live(model)`` the objects a compile needs (the built model, the optimizer, the
state's shapes in the framework's own tree). Behind it:

- ``arrays.py``: the plain data (no Flax);
- ``disk.py``: the cache on disk, so a later process reads a model without importing Flax;
- ``trace.py``: tracing with Flax (imported on first need);
- ``constraints.py``: every live sharding constraint of a traced program, from its jaxpr;
- ``under_layout.py``: the activations as JAX receives them under one layout's mesh and rules
  (``received(model, mesh, rules)``), which the analysis shows where they differ from the rules
  applied to the probe's names.

The trace depends on the model configuration and on the names it must tell apart (the
rules' logical names and the mesh's axis names), never on which mesh axes the rules
pick: editing a rule's mesh axes or their order does not re-trace.
"""

from __future__ import annotations

import threading
from typing import Any

from explorer.reading import disk
from explorer.reading.arrays import AbstractArray, AbstractModel, AxisName, Kind, Resolved, Traced, TypedValue, names_of

__all__ = [
    "AbstractArray", "AbstractModel", "AxisName", "Kind", "Resolved", "TypedValue", "abstract_model", "live", "names_of",
    "received", "typed_model",
]

REGISTRY_SIZE = 32
_registry: dict[tuple, list[Traced]] = {}
_registry_lock = threading.Lock()


def abstract_model(model_spec, logical_names: frozenset[str] = frozenset(), mesh_axes: tuple[str, ...] = (),
                   mesh: Any = None, rules: tuple = ()) -> AbstractModel:
    """The abstract model for a validated ``ModelSpec``.

    ``logical_names`` and ``mesh_axes`` are the names the activations' trace must tell
    apart (the layout's rule names and mesh axis names; the model's own parameter and
    input names are always added). A trace that already told apart every wanted name is
    reused, from memory or from the disk cache, so rule edits re-trace only when a rule
    brings a name never seen before. ``mesh`` and ``rules``, when given, are the layout
    the analysis will read the activations under: a first trace of the state runs under
    them, which gives that layout's activations (``received``) at no extra cost.
    """
    key, mesh_axes, wanted = model_spec.key(), tuple(mesh_axes), frozenset(logical_names)
    with _registry_lock:
        if (key, mesh_axes) not in _registry:
            _registry[(key, mesh_axes)] = [Traced(model, names) for names, model in disk.load(key, mesh_axes)]
        entries = _registry[(key, mesh_axes)]
        for traced in entries:
            if wanted <= traced.traced_names:
                return traced.model
        known = frozenset().union(*(t.traced_names for t in entries))
    traced, found = _trace().traced(key, wanted | known, mesh_axes, (mesh, rules) if mesh is not None else None)
    if found is not None:
        from explorer.reading import under_layout

        under_layout.remember(traced.model, mesh, rules, found)
    with _registry_lock:
        entries = _registry.setdefault((key, mesh_axes), [])
        entries.insert(0, traced)
        del entries[2:]
        while len(_registry) > REGISTRY_SIZE:
            del _registry[next(iter(_registry))]
    disk.store(key, mesh_axes, [(t.traced_names, t.model) for t in entries])
    return traced.model


def typed_model(model_spec, mesh: Any, rules: tuple) -> AbstractModel:
    """The abstract model read under a mesh with Explicit axes: every sharding from its value's type (``typed.py``)."""
    return _typed().typed_model(model_spec, mesh, rules)


def _typed():
    from explorer.reading import collector

    with collector.paused():
        from explorer.reading import typed

    return typed


def live(model: AbstractModel) -> Any:
    """The model built and its train state traced (``built``, ``optimizer``, ``state``: the state's
    ShapeDtypeStructs in the framework's tree, ``graphdefs`` for NNX), traced again if the arrays came from disk."""
    return _trace().state_stage(model.key, model.mesh_axes)


def received(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    """The activations as JAX receives them when the forward pass runs under ``mesh`` and ``rules`` (``under_layout.py``)."""
    from explorer.reading import under_layout

    return under_layout.received(model, mesh, rules)


def _trace():
    """The tracing module, imported on first need (the collector paused, as for a trace): reading a cached model needs no Flax."""
    from explorer.reading import collector

    with collector.paused():
        from explorer.reading import trace

    return trace
