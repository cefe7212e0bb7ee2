"""How a model is read: a model configuration and mesh axis names in, the abstract model out.

Four doors, each the same three steps: look in the caches (``memory.py``, then ``disk.py``),
else run the pipeline (pure functions that trace and read, keeping nothing), then keep what it gave.

- ``abstract_model(model_spec, logical_names, mesh_axes)``: the ``AbstractModel`` (every array of
  the train state and the step, as plain data). Pipeline: ``trace.traced``, which traces the
  init (the state), then the forward pass under the probe or the layout tagged with the names,
  reads its constraints (``constraints.py``) and resolves them.
- ``received(model, mesh, rules)``: the activations as JAX receives them under one layout's mesh
  and rules, which the analysis shows where they differ from the rules applied to the probe's
  names. Pipeline: ``trace.received_by_forward`` on the model's state (``live``).
- ``typed_model(model_spec, mesh, rules)``: the model read under a mesh with Explicit axes, every
  sharding from its value's type. Pipeline: ``typed.read``.
- ``live(model)``: the objects a compile needs (the built model, the optimizer, the state's
  shapes in the framework's own tree). Pipeline: ``trace.state`` (``typed.state`` for a typed model).

Behind them: ``arrays.py``, the plain data (no Flax); ``memory.py``, what this process keeps;
``disk.py``, what a later process reads without importing Flax; ``trace.py`` and ``typed.py``,
tracing with Flax (imported on first need); ``constraints.py``, the sharding constraints of a
traced program, from its jaxpr.

The trace depends on the model configuration and on the names it must tell apart (the
rules' logical names and the mesh's axis names), never on which mesh axes the rules
pick: editing a rule's mesh axes or their order does not re-trace.
"""

from __future__ import annotations

from typing import Any

from explorer.reading import disk, memory
from explorer.reading.arrays import AbstractArray, AbstractModel, AxisName, Kind, Resolved, Traced, TypedValue, names_of

__all__ = [
    "AbstractArray",
    "AbstractModel",
    "AxisName",
    "Kind",
    "Resolved",
    "TypedValue",
    "abstract_model",
    "live",
    "names_of",
    "received",
    "typed_model",
]


def abstract_model(
    model_spec, logical_names: frozenset[str] = frozenset(), mesh_axes: tuple[str, ...] = (), mesh: Any = None, rules: tuple = ()
) -> AbstractModel:
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
    entries = _traced_models(key, mesh_axes)
    for traced in entries:
        if wanted <= traced.traced_names:
            return traced.model
    known = frozenset().union(*(t.traced_names for t in entries))
    layout = (mesh, rules) if mesh is not None else None
    reading = _trace().traced(key, wanted | known, mesh_axes, layout, memory.stages.get((key, mesh_axes)))
    memory.stages.keep_first((key, mesh_axes), reading.stage)
    if reading.received is not None:
        _keep_received(memory.received_key(key, mesh, rules), reading.received)
    entries = memory.models.update((key, mesh_axes), lambda kept: (reading.traced, *(kept or ()))[:2])
    disk.store(key, mesh_axes, [(t.traced_names, t.model) for t in entries])
    return reading.traced.model


def received(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    """The activations as JAX receives them when ``model``'s forward pass runs under ``mesh`` (a JAX Mesh or
    AbstractMesh) and ``rules``: kept per model, mesh and rules, in memory and on disk."""
    key = memory.received_key(model.key, mesh, rules)
    found = memory.received.get(key)
    if found is not None:
        return found
    found = disk.load_resolved(model.key, key[1:])
    if found is not None:
        return memory.received.put(key, found)
    found = _trace().received_by_forward(live(model), mesh, rules)
    _keep_received(key, found)
    return found


def typed_model(model_spec, mesh: Any, rules: tuple) -> AbstractModel:
    """The abstract model read under a mesh with Explicit axes: every sharding from its value's type (``typed.py``).

    Kept in memory per model, mesh shape, axis types and rules (``typed.key_of``).
    """
    typed = _typed()
    key, mesh, rules = typed.key_of(model_spec, mesh, rules)
    found = memory.typed.get(key)
    if found is not None:
        return found
    model, stage = typed.read(key, mesh, rules)
    memory.stages.keep_first((key, model.mesh_axes), stage)
    return memory.typed.put(key, model)


def live(model: AbstractModel) -> Any:
    """The model built and its train state traced (``built``, ``optimizer``, ``state``: the state's
    ShapeDtypeStructs in the framework's tree, ``graphdefs`` for NNX), traced again if the arrays came from disk."""
    key = (model.key, model.mesh_axes)
    found = memory.stages.get(key)
    if found is not None:
        return found
    stage = _typed().state(model.key, model.mesh_axes) if model.typed else _trace().state(model.key)
    return memory.stages.keep_first(key, stage)


def _traced_models(key: tuple, mesh_axes: tuple[str, ...]) -> tuple[Traced, ...]:
    """The models traced for ``key`` (newest first), from memory, else from the disk (then kept in memory)."""
    found = memory.models.get((key, mesh_axes))
    if found is not None:
        return found
    return memory.models.put((key, mesh_axes), tuple(Traced(model, names) for names, model in disk.load(key, mesh_axes)))


def _keep_received(key: tuple, found: Resolved) -> None:
    """Keep what a trace under a layout gave (a refusal only in memory: the next process says it again)."""
    if not found.error:
        disk.store_resolved(key[0], key[1:], found)
    memory.received.put(key, found)


def _trace():
    """The tracing module, imported on first need (the collector paused, as for a trace): reading a cached model needs no Flax."""
    from explorer.reading import collector

    with collector.paused():
        from explorer.reading import trace

    return trace


def _typed():
    from explorer.reading import collector

    with collector.paused():
        from explorer.reading import typed

    return typed
