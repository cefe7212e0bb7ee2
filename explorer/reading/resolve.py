"""Stage 5, resolve: the abstract model and the layout's activations as plain data, from the state and activations.

``resolve(key, mesh_axes, stage, activations)`` gives a ``Resolution``:

- ``model``, the ``AbstractModel`` (None where only the layout's activations were read: the model was read
  before). Auto axes: the state's and inputs' arrays, every live activation constraint named by where it was
  declared (``activations/<module path>/<n-th there>``) with the logical names the probe told apart, a scanned body
  once with how many times it runs per step, and the model output (its sharding the last constraint the model
  declares on it). Explicit axes: every equation that sets a sharding (``reshard``, ``sharding_constraint``, an
  ``out_sharding=``) as an activation row with the source line that wrote it, every array with its type's spec;
- ``received``, the activations as JAX receives them under the layout (``Resolved``: per dimension the mesh axes),
  which the analysis shows where they differ from the rules applied to the names; None without a layout.

Nothing is traced here.
"""

from __future__ import annotations

import dataclasses

from explorer.reading import contexts
from explorer.reading.activations import Activations, Forward
from explorer.reading.arrays import AbstractArray, AbstractModel, Resolved, TypedValue, activation_arrays, semantics_of
from explorer.reading.state import State
from explorer.specs import spec_axes


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What stage 5 gives: the model (None: only the layout's activations were asked), the names its trace told
    apart, and the layout's activations as JAX receives them (None without a layout)."""

    model: AbstractModel | None
    traced_names: frozenset[str]
    received: Resolved | None


def resolve(key: tuple, mesh_axes: tuple[str, ...], stage: State, activations: Activations) -> Resolution:
    """The model of ``key`` (its arrays, each with its names or its type's spec) and the layout's activations."""
    if stage.explicit:
        return Resolution(_typed_model(key, stage, activations), frozenset(), None)
    model = None
    if activations.named is not None:
        model = dataclasses.replace(_model(key, mesh_axes, stage, activations), asked_names=activations.asked)
    received = activations.received
    if received is not None:
        received = (
            Resolved(error=received.error)
            if received.error
            else Resolved(activation_arrays(received.constraints, stage.root), _output_array(received, stage.framework))
        )
    return Resolution(model, activations.names, received)


def _model(key: tuple, mesh_axes: tuple[str, ...], stage: State, activations: Activations) -> AbstractModel:
    named = activations.named
    if activations.probe_error:  # the state alone: its activations come from the trace under the layout only
        note = "model output; its sharding is read from the trace under the layout's rules"
        output = AbstractArray(
            "activations/output",
            "activation",
            named.output_shape,
            named.output_dtype,
            None,
            note,
            module="output",
            semantics=stage.framework,
        )
        return AbstractModel(
            key, mesh_axes, stage.framework, stage.state_arrays, stage.inputs, (), output, probe_error=activations.probe_error
        )
    found = named.constraints
    return AbstractModel(
        key=key,
        mesh_axes=mesh_axes,
        framework=stage.framework,
        state_arrays=stage.state_arrays,
        inputs=stage.inputs,
        activations=activation_arrays(found, stage.root),
        output=_output_array(named, stage.framework),
        loops_without_length=sum(1 for c in found if c.in_loop_without_length and c.activation),
        weight_constraints=sum(1 for c in found if not c.activation),
    )


def _output_array(forward: Forward, framework: str) -> AbstractArray:
    declared = forward.output
    if declared is not None:
        names, semantics = declared.dims, semantics_of(declared)
        note = "model output; its sharding is the last constraint the model declares on it"
    else:
        names, semantics = None, "linen" if framework == "linen" else "nnx"
        note = "model output; no constraint declared on it, so XLA chooses its sharding (shown replicated)"
    return AbstractArray(
        "activations/output", "activation", forward.output_shape, forward.output_dtype, names, note, module="output", semantics=semantics
    )


# --- Explicit axes ---------------------------------------------------------------------------------------------------


def _typed_model(key: tuple, stage: State, activations: Activations) -> AbstractModel:
    mesh = stage.layout[0]
    shape, dtype, spec = activations.output
    output = AbstractArray(
        "activations/output",
        "activation",
        shape,
        dtype,
        _as_names(spec),
        note="model output; its sharding is its type's",
        annotation="type",
        module="output",
        semantics="explicit",
        type_spec=spec,
    )
    return AbstractModel(
        key=key,
        mesh_axes=tuple(mesh.axis_names),
        framework=stage.framework,
        state_arrays=stage.state_arrays,
        inputs=tuple(dataclasses.replace(a, type_spec=s) for a, s in zip(stage.inputs, activations.inputs)),
        activations=_activation_rows(tuple(v for v in activations.values if v.sets_sharding)),
        output=output,
        values=activations.values,
        axis_types=contexts.type_names(mesh),
    )


def _activation_rows(rows: tuple[TypedValue, ...]) -> tuple[AbstractArray, ...]:
    """The equations that set a sharding as activation arrays: ``activations/<source line>/<n-th there>``."""
    arrays, counters = [], {}
    for row in rows:
        where = row.module or row.function.removesuffix(".__call__") or "program"
        ordinal = counters.get(where, 0)
        counters[where] = ordinal + 1
        how = f"{row.op} at {row.source} ({row.function}): the spec of its output's type"
        if row.unreduced:
            how += f"; unreduced over {', '.join(row.unreduced)}"
        how += f"; communication: {row.communication}" if row.communication else ""
        runs = f"; runs {row.runs}x per step (loop body)" if row.runs > 1 else ""
        arrays.append(
            AbstractArray(
                f"activations/{where}/{ordinal}",
                "activation",
                row.shape,
                row.dtype,
                _as_names(row.spec),
                note=how + runs,
                annotation="type",
                module=where,
                runs_per_step=row.runs,
                semantics="explicit",
                type_spec=row.spec,
                source=row.source,
            )
        )
    return tuple(arrays)


def _as_names(spec: tuple) -> tuple:
    """A type's spec entries as an array's names: None stays None (no name), an entry its mesh axes."""
    return tuple(None if entry is None else spec_axes(entry) for entry in spec)
