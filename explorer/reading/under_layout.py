"""The activations as Flax really shards them under one layout's mesh and rules.

The probe (``trace.py``) reads which logical names each constraint carries, whatever the
rules, so that editing rules applies them without tracing. What JAX receives can differ
from the rules applied to those names: a model may resolve names with code of its own
(MaxText's ``maybe_shard_with_logical`` drops mesh axes of size 1 and shards on the mesh
the model holds), pass rules of its own, or refuse the probe altogether. So the forward
pass is also traced in the layout's own context, the mesh (this process's devices, or an
``AbstractMesh`` of the same shape for a planned mesh) and ``nn.logical_axis_rules``, and
every live activation constraint is read as JAX received it. The result depends on the
rules: it is kept in memory and on disk (``disk.py``) per model, mesh and rules. A trace
of the names under the tagged layout (``trace.traced``) gives it too, and ``remember``s it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from explorer.reading import disk
from explorer.reading.arrays import AbstractModel, Resolved

CACHE_SIZE = 64


_memory: dict[tuple, Resolved] = {}
_lock = threading.Lock()


def received(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    """The activations of ``model``'s forward pass traced under ``mesh`` (a JAX Mesh or AbstractMesh) and ``rules``."""
    key = _key(model, mesh, rules)
    with _lock:
        if key in _memory:
            return _memory[key]
    found = disk.load_resolved(model.key, key[1:])
    if found is None:
        found = _trace(model, mesh, rules)
        remember(model, mesh, rules, found)
    else:
        _keep_in_memory(key, found)
    return found


def remember(model: AbstractModel, mesh: Any, rules: tuple, found: Resolved) -> None:
    """Keep what a trace under this layout gave (a refusal only in memory: the next process says it again)."""
    key = _key(model, mesh, rules)
    if not found.error:
        disk.store_resolved(model.key, key[1:], found)
    _keep_in_memory(key, found)


def _keep_in_memory(key: tuple, found: Resolved) -> None:
    with _lock:
        _memory[key] = found
        while len(_memory) > CACHE_SIZE:
            del _memory[next(iter(_memory))]


def _key(model: AbstractModel, mesh: Any, rules: tuple) -> tuple:
    rules = tuple((name, list(axes) if isinstance(axes, tuple) else axes) for name, axes in rules)
    return (model.key, tuple(mesh.axis_names), tuple(int(n) for n in mesh.axis_sizes), json.dumps(rules))


def _trace(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    from explorer.reading import trace

    return trace.received_by_forward(trace.state_stage(model.key, model.mesh_axes), model, mesh, rules)
