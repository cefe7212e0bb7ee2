"""How a model is read: a model configuration and a layout's mesh in, the abstract model out.

One entry, ``read(request)`` behind the doors below, as a pipeline: the caches first (``memory.through``, then
``disk.through``, each keyed by the one ``Request``), else the stages, each called once, in order, each a public
function taking the previous one's frozen result (docs/architecture.md):

1. ``build.build(key)`` -> ``BuiltModel``: the model from the registry;
2. ``trace.trace(key, built, layout, explicit)`` -> ``TracedState``: the train state traced (Auto axes: without a
   mesh, as Flax's guide does; Explicit axes: under the layout);
3. ``state.read(traced)`` -> ``State``: its arrays (Linen boxes, NNX variables, types on Explicit meshes);
4. ``activations.read(state, mesh_axes, names, layout)`` -> ``Activations``: the forward pass traced on the state
   (under the probe or the layout tagged with the names; under the layout itself) and its constraints or types;
5. ``resolve.resolve(key, mesh_axes, state, activations)`` -> ``Resolution``: the ``AbstractModel`` and the
   activations as JAX receives them under the layout (``Resolved``), as plain data.

Auto and Explicit axes are two branches of the same stages. Helpers the stages call: ``arrays.py`` (the plain data,
no Flax), ``collector.py`` (the garbage collector paused while tracing), ``contexts.py`` (the mesh and rules a trace
runs under; a refusal as one message), ``constraints.py`` (a program's sharding constraints, from its jaxpr) and
``types.py`` (a program's values with their types' shardings).

The doors:

- ``read(model_spec, mesh, rules, names)``: the model read for a layout and the activations JAX receives under it
  (``Reading``); under a mesh with Explicit axes the model read from its values' types (``AbstractModel.typed``).
- ``abstract_model(model_spec, logical_names, mesh_axes)``: the model telling apart those names and mesh axes.
- ``received(model, mesh, rules)``: a model's activations as JAX receives them under a layout.
- ``live(model)``: the objects a compile needs (``state.State``: the built model, the optimizer, the state's shapes in
  the framework's own tree), traced again if the model came from disk.

Under Auto axes the trace depends on the model configuration and on the names it must tell apart (the rules'
logical names and the mesh's axis names), never on which mesh axes the rules pick: editing a rule's mesh axes or
their order does not re-trace the model (only the forward pass under the new layout, for what JAX receives).
"""

from __future__ import annotations

import json
from typing import Any

from explorer.reading import contexts, disk, memory
from explorer.reading.arrays import (
    AbstractArray,
    AbstractModel,
    AxisName,
    Kind,
    Reading,
    Request,
    Resolved,
    Traced,
    TypedValue,
    names_of,
)

__all__ = [
    "AbstractArray",
    "AbstractModel",
    "AxisName",
    "Kind",
    "Reading",
    "Resolved",
    "TypedValue",
    "abstract_model",
    "live",
    "names_of",
    "read",
    "received",
]


def read(model_spec, mesh: Any, rules: tuple, names: frozenset[str] = frozenset()) -> Reading:
    """The model of ``model_spec`` read for a layout's ``mesh`` (a JAX Mesh or AbstractMesh) and ``rules``.

    Auto axes: the model telling apart ``names`` (the rules' logical names) and the mesh's axis names, and the
    activations as JAX receives them under the layout (``Reading.received``); a first trace runs under the layout
    tagged with the names, which gives both at once. Explicit axes (some axis Explicit): the model read under the
    layout, every sharding from its value's type, kept per model, mesh shape, axis names and types, and rules.
    """
    from jax.sharding import AbstractMesh, AxisType

    rules = contexts.flax_rules(rules)
    if AxisType.Explicit in tuple(mesh.axis_types):
        abstract = mesh if isinstance(mesh, AbstractMesh) else mesh.abstract_mesh
        types = contexts.type_names(abstract)
        key = (*model_spec.key(), "explicit", tuple(abstract.axis_sizes), tuple(abstract.axis_names), types, json.dumps(rules))
        return _read(Request(key, tuple(abstract.axis_names), layout=(abstract, rules), explicit=True))
    key = model_spec.key()
    return _read(Request(key, tuple(mesh.axis_names), frozenset(names), (mesh, rules), _received_key(key, mesh, rules)))


def abstract_model(model_spec, logical_names: frozenset[str] = frozenset(), mesh_axes: tuple[str, ...] = ()) -> AbstractModel:
    """The abstract model for a validated ``ModelSpec``.

    ``logical_names`` and ``mesh_axes`` are the names the activations' trace must tell
    apart (the layout's rule names and mesh axis names; the model's own parameter and
    input names are always added). A trace that already told apart every wanted name is
    reused, from memory or from the disk cache, so rule edits re-trace only when a rule
    brings a name never seen before.
    """
    return _read(Request(model_spec.key(), tuple(mesh_axes), frozenset(logical_names))).model


def received(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    """The activations as JAX receives them when ``model``'s forward pass runs under ``mesh`` (a JAX Mesh or
    AbstractMesh) and ``rules``: kept per model, mesh and rules, in memory and on disk."""
    rules = contexts.flax_rules(rules)
    request = Request(model.key, model.mesh_axes, layout=(mesh, rules), received_key=_received_key(model.key, mesh, rules), model=model)
    return _read(request).received


def live(model: AbstractModel) -> Any:
    """The model built and its train state traced (``state.State``: ``built``, ``optimizer``, ``state``: the state's
    ShapeDtypeStructs in the framework's tree, ``graphdefs`` for NNX), traced again if the arrays came from disk."""
    layout = None
    if model.typed:  # the key says the layout: sizes, axis names, axis types, rules
        from jax.sharding import AbstractMesh, AxisType

        sizes, axes, types, rules = model.key[3], model.key[4], model.key[5], json.loads(model.key[6])
        axis_types = tuple(AxisType.Explicit if t == "explicit" else AxisType.Auto for t in types)
        layout = (AbstractMesh(tuple(sizes), tuple(axes), axis_types=axis_types), contexts.flax_rules(tuple(tuple(r) for r in rules)))
    return _read(Request(model.key, model.mesh_axes, layout=layout, explicit=model.typed, model=model, live=True)).stage


def _read(request: Request) -> Reading:
    """The entry: the caches, keyed once by ``request``, else the stages."""
    return memory.through(request, lambda kept: disk.through(request, kept, lambda found: _stages(request, found)))


def _stages(request: Request, found: Reading) -> Reading:
    """The stages that ``found`` (what the caches hold) leaves to do, each called once, in order."""
    build, trace, state, activations, resolve = _stage_modules()
    stage = found.stage
    if stage is None:
        stage = state.read(trace.trace(request.key, build.build(request.key), request.layout, request.explicit))
    if request.live:
        return Reading(found.model, found.received, found.traced, stage)
    known = frozenset().union(*(t.traced_names for t in found.traced or ()))
    names = None if found.model is not None else request.names | known
    layout = request.layout if request.explicit or request.received_key is not None else None
    resolution = resolve.resolve(request.key, request.mesh_axes, stage, activations.read(stage, request.mesh_axes, names, layout))
    traced = found.traced
    if resolution.model is not None and not request.explicit:
        traced = (Traced(resolution.model, resolution.traced_names), *(traced or ()))[:2]
    return Reading(resolution.model or found.model, resolution.received, traced, stage)


def _received_key(model_key: tuple, mesh: Any, rules: tuple) -> tuple:
    """A model under one layout: its key, the mesh's axis names and sizes, the rules as JSON (``disk`` takes all but
    the key)."""
    rules = tuple((name, list(axes) if isinstance(axes, tuple) else axes) for name, axes in rules)
    return (model_key, tuple(mesh.axis_names), tuple(int(n) for n in mesh.axis_sizes), json.dumps(rules))


def _stage_modules():
    """The stages' modules, imported on first need (the collector paused, as for a trace): reading a cached model
    needs no Flax."""
    from explorer.reading import collector

    with collector.paused():
        from explorer.reading import activations, build, resolve, state, trace

    return build, trace, state, activations, resolve
