"""The abstract model: every array of the train state and the step, as plain data.

``AbstractModel`` is what tracing a model configuration gives (``tracing.py``), kept in
memory and on disk (``trace_cache.py``): a second analysis of the same model, in this
process or a later one, reads it without importing Flax or tracing anything.

The trace depends on the model configuration and on the names it must tell apart (the
rules' logical names and the mesh's axis names), never on which mesh axes the rules
pick: editing a rule's mesh axes or their order does not re-trace.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Literal

from explorer import trace_cache

if TYPE_CHECKING:
    import optax

    from explorer.models import BuiltModel

Kind = Literal["param", "opt_state", "input", "activation"]
AxisName = None | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class AbstractArray:
    """One array the train step touches, before any mesh or rule is applied.

    ``logical_axes`` has one entry per dimension (padded to the rank): a logical name
    the rules resolve, a tuple of mesh axes the model fixed by hand, or None; None for
    the whole array means it carries no annotation. ``annotation`` says how the model
    declared it (``"logical"``: resolved by rules; ``"mesh-or-logical"``: a plain
    ``nn.Partitioned`` box, whose names are mesh axes when every one is an axis of the
    mesh, else logical names; ``"nnx"``: an NNX variable inside a Linen model, which Flax
    shards as it creates it, with NNX's rule semantics). ``module`` is where an activation was declared and
    ``runs_per_step`` how many times its declaration runs in one step.
    """

    path: str
    kind: Kind
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[AxisName, ...] | None
    note: str = ""
    annotation: str = "logical"
    module: str = ""
    runs_per_step: int = 1


@dataclasses.dataclass(frozen=True)
class AbstractModel:
    """The result of tracing a model configuration: plain data, cached in memory and on disk.

    ``state_arrays`` lists the train state's leaves in tree-flatten order. The live
    objects a compile needs (``built``, ``optimizer``, ``state_shapes``: the train state as
    ShapeDtypeStructs in the framework's own tree, Linen's TrainState with its boxes or
    NNX's ``(model state, optimizer state)``; ``graphdefs`` for NNX) are traced again on
    first use when the arrays came from the disk cache.
    """

    key: tuple
    mesh_axes: tuple[str, ...]
    framework: str
    state_arrays: tuple[AbstractArray, ...]
    inputs: tuple[AbstractArray, ...]
    activations: tuple[AbstractArray, ...]
    output: AbstractArray
    loops_without_length: int = 0

    @property
    def arrays(self) -> tuple[AbstractArray, ...]:
        return self.state_arrays + self.inputs + self.activations + (self.output,)

    @property
    def logical_names(self) -> frozenset[str]:
        return names_of(self.arrays)

    @property
    def built(self) -> BuiltModel:
        return _tracing().state_stage(self.key, self.mesh_axes).built

    @property
    def optimizer(self) -> optax.GradientTransformation:
        return _tracing().state_stage(self.key, self.mesh_axes).optimizer

    @property
    def state_shapes(self) -> Any:
        return _tracing().state_stage(self.key, self.mesh_axes).state

    @property
    def graphdefs(self) -> Any:
        return _tracing().state_stage(self.key, self.mesh_axes).graphdefs


def abstract_model(model_spec, logical_names: frozenset[str] = frozenset(), mesh_axes: tuple[str, ...] = ()) -> AbstractModel:
    """The abstract model for a validated ``ModelSpec``.

    ``logical_names`` and ``mesh_axes`` are the names the activations' trace must tell
    apart (the layout's rule names and mesh axis names; the model's own parameter and
    input names are always added, and the names other configurations of this model
    carried). A trace that already told apart every wanted name is reused, from memory
    or from the disk cache (``trace_cache.py``), so rule edits re-trace only when a
    rule brings a name never seen before.
    """
    key, mesh_axes, wanted = model_spec.key(), tuple(mesh_axes), frozenset(logical_names)
    with registry_lock:
        if (key, mesh_axes) not in _registry:
            _registry[(key, mesh_axes)] = _disk_entries(key, mesh_axes)
        entries = _registry[(key, mesh_axes)]
        for traced in entries:
            if wanted <= traced.traced_names:
                return traced.model
        known = frozenset().union(*(t.traced_names for t in entries))
    traced = _tracing().traced(key, wanted | known | trace_cache.names_seen(key[0]), mesh_axes)
    trace_cache.add_names_seen(key[0], traced.model.logical_names)
    with registry_lock:
        entries = _registry.setdefault((key, mesh_axes), [])
        entries.insert(0, traced)
        del entries[2:]
        while len(_registry) > REGISTRY_SIZE:
            del _registry[next(iter(_registry))]
    trace_cache.store(key, mesh_axes, [(t.traced_names, t.model) for t in entries])
    return traced.model


def _disk_entries(key: tuple, mesh_axes: tuple[str, ...]) -> list["Traced"]:
    return [Traced(model, names) for names, model in trace_cache.load(key, mesh_axes)]


REGISTRY_SIZE = 32
_registry: dict[tuple, list["Traced"]] = {}
registry_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Traced:
    """A traced model, with the logical names its probe told apart."""

    model: AbstractModel
    traced_names: frozenset[str]  # the logical names the probe told apart


def names_of(arrays) -> frozenset[str]:
    """Every logical name the arrays carry."""
    return frozenset(n for a in arrays if a.logical_axes for n in a.logical_axes if isinstance(n, str))


def _tracing():
    """The tracing module, imported on first need: reading a cached model needs no Flax."""
    from explorer import tracing

    return tracing
