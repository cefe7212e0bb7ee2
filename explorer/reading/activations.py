"""Stage 4, activations: the forward pass traced on the state, and the shardings it declares read from its program.

``read(stage, mesh_axes, names, layout)`` takes stage 3's ``State`` and gives ``Activations``: the program's
constraints (Auto axes, read by ``constraints.py``) or every value's type (Explicit axes, read by ``types.py``).

- Auto axes, first contact (``names`` given): the forward pass under the layout tagged with a size-1 probe axis per
  name (``constraints.tagged_mesh``/``tagged_rules``), so each constraint says both the names it carries and the
  mesh axes JAX receives under the layout (``named`` and ``received``). Where the tagged layout is refused (a
  dimension an axis does not divide, code that wants the layout's devices), or without a layout, the forward pass
  under the probe alone gives the names, and the layout's own trace (``received_by_forward``) what JAX receives; the
  same where a constraint resolved the NNX way carries a name with no rule (NNX reads such a name as a mesh axis; the
  tag hid that). Where the model's own code refuses the probe, its names are unknown (``probe_error``).
- Auto axes, a model already read (``names`` None): the forward pass under the layout's mesh and rules alone.
- Explicit axes: the forward pass under the layout's mesh and rules on inputs typed with the rules' sharding of their
  names; every equation's outputs with their type (``types.program_values``).

Every logical name the traced code asks Flax's Linen rules to resolve is recorded (``asked``): a model that
resolves names with code of its own (MaxText's ``maybe_shard_with_logical`` drops mesh axes of size 1) shows them
only there. The collector is paused while tracing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from explorer.errors import ExplorerError
from explorer.reading import collector, constraints as program, contexts, types
from explorer.reading.arrays import TypedValue, names_of
from explorer.reading.state import State
from explorer.rules import resolve


@dataclasses.dataclass(frozen=True)
class Forward:
    """One forward program's constraints, in program order (``dims``: names, or mesh axes as tuples).

    ``output_shape`` and ``output_dtype`` are the model output's, ``output`` the last activation constraint the
    model declares on it (None: none). ``error`` says why the trace failed (then the rest is empty).
    """

    constraints: tuple[program.Constraint, ...] = ()
    output_shape: tuple[int, ...] = ()
    output_dtype: str = ""
    output: program.Constraint | None = None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Activations:
    """What stage 4 gives. Auto axes: ``named`` (dims as logical names, or fixed mesh axes; None where not read:
    the model was read before), the ``names`` the trace told apart, ``probe_error`` (the model's code refused the
    probe: ``named`` holds only the output), ``received`` (dims as the mesh axes JAX receives under the layout; None
    without a layout). Explicit axes: ``values`` (every forward value with its type), the typed ``inputs``' specs and
    the ``output``'s (shape, dtype, spec). ``asked``: every name the forward pass had Flax's Linen rules resolve."""

    names: frozenset[str] = frozenset()
    named: Forward | None = None
    probe_error: str = ""
    received: Forward | None = None
    asked: frozenset[str] = frozenset()
    values: tuple[TypedValue, ...] = ()
    inputs: tuple[tuple, ...] = ()
    output: tuple | None = None


def read(stage: State, mesh_axes: tuple[str, ...], names: frozenset[str] | None, layout: tuple | None) -> Activations:
    """The activations of ``stage``'s forward pass: named under the probe or the tagged ``layout`` when ``names`` is
    given, as JAX receives them under ``layout`` (a ``(mesh, rules)`` pair) when one is; typed under Explicit axes."""
    if stage.explicit:
        return _typed(stage)
    if names is None:
        return Activations(received=received_by_forward(stage, *layout))
    names = frozenset(names | names_of(stage.inputs) | names_of(stage.state_arrays))
    with contexts.tracing(stage.key[0]):
        if layout is not None:
            with names_asked() as asked:
                found = _tagged(stage, names, *layout)
            if found is not None:
                named, received = found
                received = received if received is not None else received_by_forward(stage, *layout)
                return Activations(names, named, received=received, asked=frozenset(asked))
        try:
            with names_asked() as asked, _probe(names, mesh_axes):
                closed = forward_program(stage)
        except Exception as error:  # the model's own code refuses the probe: names are not recoverable
            output = jax.eval_shape(_forward(stage), stage.variables, *_abstract_inputs(stage))
            leaf = jax.tree_util.tree_leaves(output)[0]
            named = Forward(output_shape=tuple(leaf.shape), output_dtype=str(leaf.dtype))
            received = received_by_forward(stage, *layout) if layout is not None else None
            return Activations(names, named, probe_refusal(error), received)
        named = _forward_of(closed, _constraints(closed, stage))
    received = received_by_forward(stage, *layout) if layout is not None else None
    return Activations(names, named, received=received, asked=frozenset(asked))


def probe_refusal(error: Exception) -> str:
    """The model's refusal of the probe, in words its user reads: the probe's mesh (the layout's axes and one
    ``logical:<name>`` axis of size 1 per logical name, the explorer's making) said as what it is where the message
    quotes it; MaxText's ``shard_map``, which runs only on the mesh it was given, quotes all of it (85 axes for a small
    dense config), and is said in one sentence."""
    text = contexts.error_text(error)
    quoted = re.escape(program.PROBE_PREFIX)

    def said(match: re.Match) -> str:  # the probe's mesh, as quoted: "AbstractMesh('data': 1, 'logical:embed': 1, ...)"
        names = len(re.findall(rf"'{quoted}[^']*': 1", match.group(0)))
        return f"[the explorer's naming mesh: an axis of size 1 for each of {names} logical names]" if names else match.group(0)

    text = re.sub(r"AbstractMesh\((?:[^()]|\([^()]*\))*\)", said, text)
    if "[the explorer's naming mesh" in text and "should match the mesh passed to shard_map" in text:
        return "its shard_map runs only on its own mesh, not on the explorer's naming mesh of one size-1 axis per logical name"
    return text


def received_by_forward(stage: State, mesh: Any, rules: tuple) -> Forward:
    """A layout's activations as JAX receives them: the forward pass traced under its mesh and rules alone."""
    try:
        with collector.paused(), contexts.layout(own_mesh(stage, mesh), rules):
            closed = forward_program(stage)
    except Exception as error:  # a layout JAX refuses (an axis used twice, ...): the analysis says so
        return Forward(error=contexts.error_text(error))
    return _forward_of(closed, _constraints(closed, stage))


def own_mesh(stage: State, mesh: Any) -> Any:
    """The mesh the forward pass traces under: the model's own (``BuiltModel.mesh``: MaxText's, over its slice's
    devices, which its ``shard_map`` wants as the trace's mesh) where it has the layout's axes and sizes, the layout's
    ``mesh`` otherwise (a layout edited away from the model's own mesh is traced as it is, and its refusal shown)."""
    held = stage.built.mesh
    same = held is not None and tuple(held.axis_names) == tuple(mesh.axis_names) and tuple(held.axis_sizes) == tuple(mesh.axis_sizes)
    return held if same else mesh


def forward_program(stage: State, inputs: tuple | None = None):
    """The forward pass on the state's variables, traced in the current mesh and rules context.

    A new function each time: JAX caches a traced function by its identity and the mesh, and
    Flax's rules are not part of that key, so tracing the same function under other rules
    would hand back the program of the first ones.
    """
    forward = _forward(stage)
    return jax.make_jaxpr(lambda variables, *xs: forward(variables, *xs))(stage.variables, *(inputs or _abstract_inputs(stage)))


def _forward(stage: State):
    """forward(variables, *inputs): the model's forward pass on the state's variables."""
    built = stage.built
    if stage.framework == "linen":
        module = built.module
        return lambda params, *xs: module.apply({"params": params}, *built.model_args(xs))
    from flax import nnx

    model_def = stage.graphdefs[0]
    return lambda variables, *xs: nnx.merge(model_def, variables)(*built.model_args(xs))


def _abstract_inputs(stage: State) -> tuple[jax.ShapeDtypeStruct, ...]:
    return tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in stage.built.inputs)


def _constraints(closed, stage: State) -> list[program.Constraint]:
    """The program's live constraints: its model inputs follow the state's variables among its inputs."""
    n_variables, n_inputs = len(jax.tree_util.tree_leaves(stage.variables)), len(stage.built.inputs)
    return program.constraints(closed, input_invars=range(n_variables, n_variables + n_inputs), parameter_invars=range(n_variables))


def _forward_of(closed, found: list) -> Forward:
    output_var = closed.jaxpr.outvars[0]
    declared = next((c for c in reversed(found) if c.var is output_var and c.activation), None)
    return Forward(tuple(found), tuple(output_var.aval.shape), str(output_var.aval.dtype), declared)


def _tagged(stage: State, names: frozenset[str], mesh: Any, rules: tuple) -> tuple[Forward, Forward | None] | None:
    """The forward pass under the layout tagged with the names: its constraints named, and as the layout receives them.

    None where the tagged layout is refused; the received ones None where a constraint resolved the NNX way carries a
    name with no rule (the layout alone says what JAX does).
    """
    rules = contexts.flax_rules(rules)
    ruled = {name for name, _ in rules}
    names = names | ruled
    tagged_mesh = program.tagged_mesh(names, tuple(mesh.axis_names), tuple(mesh.axis_sizes))
    try:
        with jax.sharding.use_abstract_mesh(tagged_mesh), nn.logical_axis_rules(program.tagged_rules(rules, names)):
            closed = forward_program(stage)
    except Exception:
        return None
    found = _constraints(closed, stage)
    named = [dataclasses.replace(c, dims=program.decode_spec(c.spec, len(c.shape), tagged=True)) for c in found]
    if any(c.semantics == "nnx" and any(isinstance(d, str) and d not in ruled for d in c.dims) for c in named):
        return _forward_of(closed, named), None
    on_mesh = [dataclasses.replace(c, dims=program.mesh_spec(c.spec, len(c.shape))) for c in found]
    return _forward_of(closed, named), _forward_of(closed, on_mesh)


@contextlib.contextmanager
def _probe(names: frozenset[str], mesh_axes: tuple[str, ...]):
    """The probe: an abstract mesh with a size-1 axis per real mesh axis and logical name, and rules naming each."""
    with jax.sharding.use_abstract_mesh(program.probe_mesh(names, mesh_axes)), nn.logical_axis_rules(program.probe_rules(names)):
        yield


_asking = threading.local()  # the names one thread's trace is recording (``names_asked``)
_hook_lock = threading.Lock()
_hook: dict[str, Any] = {"sections": 0, "original": None}


@contextlib.contextmanager
def names_asked():
    """Every logical name the code traced in the block asks Flax's Linen rules to resolve (``flax.linen.spmd``'s
    ``_logical_to_mesh_axes``, behind ``with_logical_constraint``, ``logical_to_mesh_axes`` and
    ``logical_to_mesh_sharding``), recorded in the set it yields. Names a model resolves with code of its own never
    reach a constraint as a probe axis (MaxText's ``maybe_shard_with_logical`` drops mesh axes of size 1): they are
    read here. Flax's function is wrapped while any thread records (counted), and records only for the thread that
    asked."""
    from flax.linen import spmd

    asked: set[str] = set()
    with _hook_lock:
        if _hook["sections"] == 0:
            original = _hook["original"] = spmd._logical_to_mesh_axes

            def recording(array_dim_names, rules=None):
                found = getattr(_asking, "names", None)
                if found is not None and array_dim_names is not None:
                    found.update(n for n in array_dim_names if isinstance(n, str))
                return original(array_dim_names, rules)

            spmd._logical_to_mesh_axes = recording
        _hook["sections"] += 1
    outer = getattr(_asking, "names", None)
    _asking.names = asked
    try:
        yield asked
    finally:
        _asking.names = outer
        if outer is not None:
            outer.update(asked)
        with _hook_lock:
            _hook["sections"] -= 1
            if _hook["sections"] == 0:
                spmd._logical_to_mesh_axes = _hook["original"]


# --- Explicit axes ---------------------------------------------------------------------------------------------------


def _typed(stage: State) -> Activations:
    """The forward pass under the layout with Explicit axes, on inputs typed with the rules' sharding of their names."""
    mesh, rules = stage.layout
    with collector.paused():
        with contexts.tracing(stage.key[0], explicit=True), contexts.under(mesh, rules, stage.framework):
            inputs = _typed_inputs(stage, mesh, rules)
            closed = forward_program(stage, inputs)
        values = types.program_values(closed, stage.framework)
    aval = closed.jaxpr.outvars[0].aval
    output = (tuple(aval.shape), str(aval.dtype), types.spec_of(aval))
    return Activations(values=values, inputs=tuple(types.spec_of(x) for x in inputs), output=output)


def _typed_inputs(stage: State, mesh, rules: tuple) -> tuple:
    """The step's inputs typed with the sharding the rules give their names (NNX semantics for an NNX model)."""
    typed = []
    for spec, array in zip(stage.built.inputs, stage.inputs):
        names = array.logical_axes
        entries = resolve(names, rules, len(spec.shape), semantics=stage.framework).spec if names else ()
        for entry in entries:
            for axis in (entry,) if isinstance(entry, str) else entry or ():
                if axis not in mesh.axis_names:
                    raise ExplorerError(
                        f"inputs/{spec.name}", list(names), f"would be sharded over {axis!r}, which the mesh {list(mesh.axis_names)} lacks"
                    )
        typed.append(jax.ShapeDtypeStruct(spec.shape, jnp.dtype(spec.dtype), sharding=NamedSharding(mesh, PartitionSpec(*entries))))
    return tuple(typed)
