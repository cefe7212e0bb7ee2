"""Every sharding constraint a traced program declares, read from its jaxpr.

Flax turns ``nn.with_logical_constraint`` (and ``flax.linen.partitioning``'s
``with_sharding_constraint``, and a boxed parameter read under a mesh) into JAX's
``sharding_constraint`` primitive, and so does ``jax.lax.with_sharding_constraint``
written by hand. Tracing the program under a *probe mesh* makes all of them visible
in the jaxpr without running anything: every axis of the probe mesh has size 1, and
the probe's rules map each logical name ``n`` to a probe axis ``PROBE_PREFIX + n``,
so a constraint's spec says which dimensions carried which logical name and which
were fixed to mesh axes by hand.

Each equation is read with where it came from (the Flax module path in its name
stack, or the user's function when there is none) and how many times it runs per
call: a constraint in a ``scan`` body of length n runs n times. Constraints applied
to parameters (a parameter read through ``param_with_axes`` or unboxed under a
mesh) are told apart by data flow: their operand is a parameter itself.

Only constraints the program's wanted outputs need are read, as XLA keeps only those:
a liveness pass (backwards over each program, into called programs by position)
drops dead code. With the values of parameters taken as given, that same pass reads
a whole ``init`` as its forward pass alone: the parameters' initialisers (and the
dead copies of a body Flax's ``nn.scan`` traces while initialising) are not the
step's. So one trace of ``init_with_output`` gives the state and the activations.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Sequence

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

PROBE_PREFIX = "logical:"
_VALUE_PRESERVING = frozenset({"sharding_constraint", "convert_element_type", "copy", "copy_p"})

_LIBRARY_DIRS = tuple(
    os.path.dirname(module.__file__) + os.sep
    for module in (jax, __import__("jaxlib"), __import__("flax"), __import__("optax"))
) + (os.path.dirname(os.path.abspath(__file__)) + os.sep,)
_MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models") + os.sep  # the built-in models are user code


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One ``sharding_constraint`` equation of a traced program.

    ``dims`` has one entry per dimension of the constrained value: a logical name
    (``str``), a tuple of mesh axes fixed by hand, or ``None`` (replicated / no name).
    ``location`` is the Flax module path from the name stack, or the qualified name of
    the user's function that declared it when the name stack is empty. ``runs`` is how
    many times it runs per call of the program (the product of enclosing loop lengths);
    ``in_loop_without_length`` says a ``while`` loop with no static length encloses it.
    """

    dims: tuple[str | tuple[str, ...] | None, ...]
    shape: tuple[int, ...]
    dtype: str
    location: str
    runs: int
    on_parameter: bool
    in_loop_without_length: bool = False
    var: Any = dataclasses.field(default=None, compare=False, repr=False)


def probe_axis(logical: str) -> str:
    return PROBE_PREFIX + logical


def probe_mesh(logical_names: Iterable[str], mesh_axes: Sequence[str]) -> Mesh:
    """A one-device mesh with a size-1 Auto axis per logical name and per real mesh axis."""
    axes = tuple(dict.fromkeys([*mesh_axes, *(probe_axis(n) for n in sorted(set(logical_names)))]))
    device = jax.devices()[:1]
    return jax.make_mesh((1,) * len(axes), axes, axis_types=(AxisType.Auto,) * len(axes), devices=device)


def probe_rules(logical_names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Rules sending each logical name to its own probe axis (so no rule ever conflicts)."""
    return tuple((name, probe_axis(name)) for name in sorted(set(logical_names)))


def decode_spec(spec: PartitionSpec, ndim: int) -> tuple[str | tuple[str, ...] | None, ...]:
    """Probe-mesh spec entries back to logical names / fixed mesh axes, padded to ``ndim``."""
    dims: list[str | tuple[str, ...] | None] = []
    for entry in tuple(spec) + (None,) * (ndim - len(spec)):
        axes = () if entry is None or entry is PartitionSpec.UNCONSTRAINED else (entry,) if isinstance(entry, str) else tuple(entry)
        logical = [a[len(PROBE_PREFIX):] for a in axes if a.startswith(PROBE_PREFIX)]
        fixed = tuple(a for a in axes if not a.startswith(PROBE_PREFIX))
        if logical and not fixed and len(logical) == 1:
            dims.append(logical[0])
        elif fixed and not logical:
            dims.append(fixed)
        else:
            dims.append(None)
    return tuple(dims)


def constraints(closed_jaxpr, parameter_invars: Sequence[int] = (), parameter_outvars: Sequence[int] = ()) -> list[Constraint]:
    """The live sharding constraints of ``closed_jaxpr`` in program order.

    ``parameter_invars`` / ``parameter_outvars`` are the positions of the program's
    inputs / outputs that are parameters (for a forward pass, its parameter
    arguments; for ``init``, the parameters it returns): a constraint whose operand is
    one of them (across calls and loop bodies) is marked ``on_parameter``, and how a
    parameter's value was made does not count: only what the outputs need beyond it.
    """
    jaxpr = closed_jaxpr.jaxpr
    found: list[Constraint] = []
    marked_in = {jaxpr.invars[i] for i in parameter_invars}
    marked_out = {jaxpr.outvars[i] for i in parameter_outvars if not _is_literal(jaxpr.outvars[i])}
    live_out = {v for v in jaxpr.outvars if not _is_literal(v)}
    _walk(jaxpr, marked_in | marked_out, live_out, "", 1, False, found)
    return found


def _is_literal(var) -> bool:
    return not hasattr(var, "count") and hasattr(var, "val")


def _walk(jaxpr, parameters: set, live_out: set, prefix: str, runs: int, unbounded: bool, found: list[Constraint]) -> None:
    parameters = _propagated(jaxpr, parameters)
    live, needed = _liveness(jaxpr, live_out, parameters)
    for index, eqn in enumerate(jaxpr.eqns):
        if index not in live:
            continue
        if eqn.primitive.name == "sharding_constraint":
            found.append(_constraint(eqn, parameters, prefix, runs, unbounded))
        for sub, times, loop_unbounded in _sub_jaxprs(eqn):
            inner = _map_parameters(eqn, sub, parameters)
            stack = _join(prefix, str(eqn.source_info.name_stack))
            inner_live = _map_live(eqn, sub, needed - parameters)
            _walk(sub, inner, inner_live, stack, runs * times, unbounded or loop_unbounded, found)


def _propagated(jaxpr, parameters: set) -> set:
    """The parameter marks after value-preserving equations: a parameter constrained or cast is still that parameter."""
    parameters = set(parameters)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _VALUE_PRESERVING and eqn.invars and eqn.invars[0] in parameters:
            parameters.add(eqn.outvars[0])
    return parameters


def _liveness(jaxpr, live_out: set, given: set) -> tuple[set[int], set]:
    """The indices of the equations ``live_out`` needs, and every variable they need.

    A variable in ``given`` (a parameter) is needed without its making: the equation
    that computed it is live only if something else needs it too. Equations with
    effects are always live.
    """
    needed = set(live_out)
    live = set()
    for index in range(len(jaxpr.eqns) - 1, -1, -1):
        eqn = jaxpr.eqns[index]
        if eqn.effects or any(v in needed and v not in given for v in eqn.outvars):
            live.add(index)
            needed.update(v for v in eqn.invars if not _is_literal(v))
    return live, needed


def _map_live(eqn, sub, needed: set) -> set:
    """The outputs of a called program that its caller needs: by position, every loop carry (it feeds the next turn)."""
    outvars = sub.outvars
    if eqn.primitive.name == "while" or len(outvars) != len(eqn.outvars):
        return {v for v in outvars if not _is_literal(v)}
    carries = int(eqn.params.get("num_carry", 0)) if eqn.primitive.name == "scan" else 0
    return {
        inner for position, (outer, inner) in enumerate(zip(eqn.outvars, outvars))
        if not _is_literal(inner) and (position < carries or outer in needed)
    }


def _constraint(eqn, parameters: set, prefix: str, runs: int, unbounded: bool) -> Constraint:
    operand = eqn.invars[0]
    aval = operand.aval
    sharding = eqn.params["sharding"]
    spec = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
    location = _join(prefix, str(eqn.source_info.name_stack)) or _user_function(eqn.source_info)
    is_parameter = not _is_literal(operand) and operand in parameters or eqn.outvars[0] in parameters
    return Constraint(
        decode_spec(spec, len(aval.shape)), tuple(aval.shape), str(aval.dtype), location, runs,
        is_parameter, unbounded, eqn.outvars[0],
    )


def _join(prefix: str, stack: str) -> str:
    return "/".join(part for part in (prefix, stack) if part)


def _user_function(source_info) -> str:
    """The qualified name of the innermost frame outside JAX, Flax, optax and the explorer."""
    traceback = getattr(source_info, "traceback", None)
    for frame in getattr(traceback, "frames", ()) or ():
        library = frame.file_name.startswith(_LIBRARY_DIRS) and not frame.file_name.startswith(_MODELS_DIR)
        if not library and not frame.file_name.startswith("<"):
            return f"{frame.function_name}"
    return "program"


def _sub_jaxprs(eqn) -> list[tuple[Any, int, bool]]:
    """(jaxpr, runs per run of ``eqn``, unbounded loop) for every program ``eqn`` calls."""
    name = eqn.primitive.name
    found = []
    for key, value in eqn.params.items():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if not hasattr(inner, "eqns"):
                continue
            if name == "scan" and key == "jaxpr":
                found.append((inner, int(eqn.params["length"]), False))
            elif name == "while" and key == "body_jaxpr":
                found.append((inner, 1, True))
            else:
                found.append((inner, 1, False))
    return found


def _map_parameters(eqn, sub, parameters: set) -> set:
    """Carry parameter marks into a called program: inputs by position, outputs by position."""
    inner = set()
    invars = list(eqn.invars)
    if eqn.primitive.name == "cond":
        invars = invars[1:]
    elif eqn.primitive.name == "while":
        cond_consts = eqn.params.get("cond_nconsts", 0)
        invars = invars[cond_consts:] if len(sub.invars) != len(invars) else invars
    if len(sub.invars) == len(invars):
        inner |= {v for outer, v in zip(invars, sub.invars) if not _is_literal(outer) and outer in parameters}
    if len(sub.outvars) == len(eqn.outvars):
        inner |= {v for outer, v in zip(eqn.outvars, sub.outvars) if outer in parameters and not _is_literal(v)}
    return inner
