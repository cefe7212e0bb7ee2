"""The activations as Flax really shards them under one layout's mesh and rules.

The probe (``trace.py``) reads which logical names each constraint carries, whatever the
rules, so that editing rules applies them without tracing. What JAX receives can differ
from the rules applied to those names: a model may resolve names with code of its own
(MaxText's ``maybe_shard_with_logical`` drops mesh axes of size 1 and shards on the mesh
the model holds), pass rules of its own, or refuse the probe altogether. So the forward
pass is also traced in the layout's own context, the mesh (this process's devices, or an
``AbstractMesh`` of the same shape for a planned mesh) and ``nn.logical_axis_rules``, and
every live activation constraint is read as JAX received it. The result depends on the
rules: it is kept in memory and on disk (``disk.py``) per model, mesh and rules.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from explorer.reading import disk
from explorer.reading.arrays import AbstractArray, AbstractModel, Resolved

CACHE_SIZE = 64


_memory: dict[tuple, Resolved] = {}
_lock = threading.Lock()


def received(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    """The activations of ``model``'s forward pass traced under ``mesh`` (a JAX Mesh or AbstractMesh) and ``rules``."""
    rules = tuple((name, list(axes) if isinstance(axes, tuple) else axes) for name, axes in rules)
    key = (model.key, tuple(mesh.axis_names), tuple(mesh.axis_sizes), json.dumps(rules))
    with _lock:
        if key in _memory:
            return _memory[key]
    found = disk.load_resolved(model.key, key[1:])
    if found is None:
        found = _trace(model, mesh, rules)
        if not found.error:
            disk.store_resolved(model.key, key[1:], found)
    with _lock:
        _memory[key] = found
        while len(_memory) > CACHE_SIZE:
            del _memory[next(iter(_memory))]
    return found


def _trace(model: AbstractModel, mesh: Any, rules: tuple) -> Resolved:
    import flax.linen as nn
    import jax
    from jax.sharding import Mesh

    from explorer.reading import constraints, trace
    from explorer.reading.arrays import activation_arrays, semantics_of

    stage = trace.state_stage(model.key, model.mesh_axes)
    context = jax.set_mesh(mesh) if isinstance(mesh, Mesh) else jax.sharding.use_abstract_mesh(mesh)
    try:
        with context, nn.logical_axis_rules(rules):
            closed = trace.forward_program(stage)
    except Exception as error:  # the layout is one JAX refuses (an axis used twice, ...): the analysis says so
        return Resolved(error=trace.error_text(error))
    n_variables = len(jax.tree_util.tree_leaves(stage.variables))
    n_inputs = len(stage.built.inputs)
    found = constraints.constraints(closed, input_invars=range(n_variables, n_variables + n_inputs),
                                    parameter_invars=range(n_variables))
    output_var = closed.jaxpr.outvars[0]
    declared = next((c for c in reversed(found) if c.var is output_var and c.activation), None)
    aval = output_var.aval
    output = AbstractArray(
        "activations/output", "activation", tuple(aval.shape), str(aval.dtype), declared.dims if declared else None,
        module="output", semantics=semantics_of(declared) if declared else model.framework,
    )
    return Resolved(activation_arrays(found, stage.root), output)
