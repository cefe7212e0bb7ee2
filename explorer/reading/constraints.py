"""Every sharding constraint a traced program declares, read from its jaxpr.

Flax turns ``nn.with_logical_constraint`` (and ``flax.linen.partitioning``'s
``with_sharding_constraint``, a boxed parameter read under a mesh, an NNX variable
created with ``out_sharding``) into JAX's ``sharding_constraint`` primitive, and so does
``jax.lax.with_sharding_constraint`` written by hand. Tracing the program under a *probe
mesh* makes all of them visible in the jaxpr without running anything: the probe is a
JAX ``AbstractMesh`` (no devices, so any number of axes) whose axes all have size 1, and
the probe's rules map each logical name ``n`` to its own probe axis ``PROBE_PREFIX + n``,
so a constraint's spec says which dimensions carried which logical name and which
were fixed to mesh axes by hand.

Each equation is read with:

- where it came from (the Flax module path in its name stack, or the user's function
  when there is none) and how many times it runs per call (a ``scan`` body of length n
  runs n times);
- which rule semantics resolved it, decided by the call, not by the model: a constraint
  made through ``flax.linen`` (``nn.with_logical_constraint``, even inside an NNX module)
  is resolved the Linen way, one made by ``flax.core.spmd`` (an NNX variable's
  ``out_sharding``) the NNX way;
- whether it constrains an activation: a value computed from a model input. A value
  computed from no model input (a parameter read, a cast, slice or transpose of a weight,
  a constant) is a weight's constraint. This is data flow over the whole program, into
  called programs and through loop carries.

Only constraints the program's wanted outputs need are read, as XLA keeps only those:
a liveness pass (backwards over each program, into called programs by position)
drops dead code. Parameters' values are taken as given: a cast of a parameter is still
that parameter, and only what the outputs need beyond it is live.

A *tagged layout* (``tagged_mesh``, ``tagged_rules``) is a layout's own mesh and rules
with a size-1 probe axis per logical name added to both: one trace under it gives each
constraint the mesh axes JAX receives under the layout and the names that put them there.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Sequence

from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from explorer.hlo.sources import explorer_own, is_library, jax_shims

PROBE_PREFIX = "logical:"
_VALUE_PRESERVING = frozenset({"sharding_constraint", "convert_element_type", "copy", "copy_p"})

_FLAX_DIR = os.path.dirname(__import__("flax").__file__) + os.sep
# the Flax files that resolve logical names, and the semantics each applies
_RESOLVERS = {
    os.path.join(_FLAX_DIR, "linen", "spmd.py"): "linen",
    os.path.join(_FLAX_DIR, "linen", "partitioning.py"): "linen",
    os.path.join(_FLAX_DIR, "core", "spmd.py"): "nnx",
}


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One ``sharding_constraint`` equation of a traced program.

    ``dims`` has one entry per dimension of the constrained value: a logical name
    (``str``), a tuple of mesh axes fixed by hand, or ``None`` (replicated / no name).
    ``location`` is the Flax module path from the name stack, or the qualified name of
    the user's function that declared it when the name stack is empty. ``runs`` is how
    many times it runs per call of the program (the product of enclosing loop lengths);
    ``in_loop_without_length`` says a ``while`` loop with no static length encloses it.
    ``semantics`` is ``"linen"`` or ``"nnx"`` (the Flax code that resolved its names) or
    ``"hand"`` (``jax.lax.with_sharding_constraint`` called without Flax). ``activation``
    is False for a weight's constraint: its value is computed from no model input.
    """

    dims: tuple[str | tuple[str, ...] | None, ...]
    shape: tuple[int, ...]
    dtype: str
    location: str
    runs: int
    activation: bool
    semantics: str = "hand"
    in_loop_without_length: bool = False
    var: Any = dataclasses.field(default=None, compare=False, repr=False)
    spec: Any = dataclasses.field(default=None, compare=False, repr=False)  # the equation's PartitionSpec, as traced


def probe_axis(logical: str) -> str:
    return PROBE_PREFIX + logical


def probe_mesh(logical_names: Iterable[str], mesh_axes: Sequence[str]) -> AbstractMesh:
    """An ``AbstractMesh`` with a size-1 Auto axis per real mesh axis and per logical name (any number of them).

    Trace under it with ``jax.sharding.use_abstract_mesh``: Flax reads the mesh from there.
    """
    axes = tuple(dict.fromkeys([*mesh_axes, *(probe_axis(n) for n in sorted(set(logical_names)))]))
    return AbstractMesh((1,) * len(axes), axes, axis_types=(AxisType.Auto,) * len(axes))


def probe_rules(logical_names: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Rules sending each logical name to its own probe axis (so no rule ever conflicts)."""
    return tuple((name, probe_axis(name)) for name in sorted(set(logical_names)))


def decode_spec(spec: PartitionSpec, ndim: int, tagged: bool = False) -> tuple[str | tuple[str, ...] | None, ...]:
    """Probe-mesh spec entries back to logical names / fixed mesh axes, padded to ``ndim``.

    Under the probe a dimension with a probe axis and a mesh axis is not recoverable. Under a
    tagged layout (``tagged``: ``tagged_mesh`` and ``tagged_rules``) it is a name the rules
    placed on those mesh axes: the name is kept (``mesh_spec`` gives the axes).
    """
    dims: list[str | tuple[str, ...] | None] = []
    for axes in _entries(spec, ndim):
        logical = [a[len(PROBE_PREFIX) :] for a in axes if a.startswith(PROBE_PREFIX)]
        fixed = tuple(a for a in axes if not a.startswith(PROBE_PREFIX))
        if len(logical) == 1 and (tagged or not fixed):
            dims.append(logical[0])
        elif fixed and not logical:
            dims.append(fixed)
        else:
            dims.append(None)
    return tuple(dims)


def mesh_spec(spec: PartitionSpec, ndim: int) -> tuple[tuple[str, ...] | None, ...]:
    """A tagged layout's spec entries without their probe axes: the mesh axes each dimension is sharded over."""
    out = []
    for axes in _entries(spec, ndim):
        fixed = tuple(a for a in axes if not a.startswith(PROBE_PREFIX))
        out.append(fixed or None)
    return tuple(out)


def _entries(spec: PartitionSpec, ndim: int) -> list[tuple[str, ...]]:
    return [
        () if entry is None or entry is PartitionSpec.UNCONSTRAINED else (entry,) if isinstance(entry, str) else tuple(entry)
        for entry in tuple(spec) + (None,) * (ndim - len(spec))
    ]


def tagged_mesh(logical_names: Iterable[str], mesh_axes: Sequence[str], mesh_sizes: Sequence[int]) -> AbstractMesh:
    """A layout's mesh with a size-1 probe axis per logical name added: sharding is unchanged, names are kept.

    Traced under it with ``tagged_rules``, one forward pass gives each constraint both the
    mesh axes JAX receives under the layout and the logical names they came from.
    """
    probes = [probe_axis(n) for n in sorted(set(logical_names))]
    axes = (*mesh_axes, *probes)
    return AbstractMesh((*map(int, mesh_sizes), *(1,) * len(probes)), axes, axis_types=(AxisType.Auto,) * len(axes))


def tagged_rules(rules: Sequence[tuple[str, Any]], logical_names: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A layout's rules, each also sending its name to the name's probe axis, resolving as the rules do.

    Linen takes a name's first rule whose mesh axes are all still free in the array (a probe
    axis is only ever its own name's, so freeness is unchanged); a last rule of the probe
    axis alone tags a name no rule placed (Linen leaves it replicated). NNX reads the rules
    as a dict, the last rule of a name winning: a name's last tagged rule is repeated after
    that. A name with no rule is tagged too, which NNX would have read as a mesh axis of that
    name: the caller checks such constraints (``activations.py``).
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    last: dict[str, tuple[str, ...]] = {}
    for name, axes in rules:
        axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        tagged = axes + (probe_axis(name),)
        out.append((name, tagged))
        last[name] = tagged
    for name in sorted(set(logical_names) | set(last)):
        out.append((name, (probe_axis(name),)))
        if name in last:
            out.append((name, last[name]))
    return tuple(out)


def constraints(closed_jaxpr, input_invars: Sequence[int], parameter_invars: Sequence[int] = ()) -> list[Constraint]:
    """The live sharding constraints of ``closed_jaxpr`` in program order.

    ``input_invars`` are the positions of the program's inputs that are model inputs:
    a constraint on a value computed from none of them is a weight's (``activation``
    False). ``parameter_invars`` are the positions of the program's inputs that are
    parameters (a forward pass's parameter arguments): how a parameter's value was made
    does not count, only what the outputs need beyond it.
    """
    jaxpr = closed_jaxpr.jaxpr
    found: list[Constraint] = []
    parameters = {jaxpr.invars[i] for i in parameter_invars}
    live_out = {v for v in jaxpr.outvars if not _is_literal(v)}
    inputs = set(input_invars)
    marks = tuple(i in inputs for i in range(len(jaxpr.invars)))
    _walk(jaxpr, parameters, marks, live_out, "", 1, False, found, {})
    return found


def _is_literal(var) -> bool:
    return not hasattr(var, "count") and hasattr(var, "val")


def _walk(
    jaxpr,
    parameters: set,
    marks: tuple[bool, ...],
    live_out: set,
    prefix: str,
    runs: int,
    unbounded: bool,
    found: list[Constraint],
    memo: dict,
) -> None:
    parameters = _propagated(jaxpr, parameters)
    dependent = _dependent(jaxpr, marks, memo)
    live, needed = _liveness(jaxpr, live_out, parameters)
    for index, eqn in enumerate(jaxpr.eqns):
        if index not in live:
            continue
        if eqn.primitive.name == "sharding_constraint":
            found.append(_constraint(eqn, dependent, prefix, runs, unbounded))
        ins = tuple(not _is_literal(v) and v in dependent for v in eqn.invars)
        for sub, times, loop_unbounded, sub_marks in _sub_programs(eqn, ins, memo):
            inner = _map_parameters(eqn, sub, parameters)
            stack = _join(prefix, str(eqn.source_info.name_stack))
            inner_live = _map_live(eqn, sub, needed - parameters)
            _walk(sub, inner, sub_marks, inner_live, stack, runs * times, unbounded or loop_unbounded, found, memo)


# --- data flow from the model's inputs ------------------------------------------------------


def _dependent(jaxpr, marks: tuple[bool, ...], memo: dict) -> set:
    """Every variable of ``jaxpr`` computed from an input marked in ``marks`` (one flag per invar)."""
    dependent = {v for v, marked in zip(jaxpr.invars, marks) if marked}
    for eqn in jaxpr.eqns:
        ins = tuple(not _is_literal(v) and v in dependent for v in eqn.invars)
        if not any(ins):
            continue
        outs = _out_marks(eqn, ins, memo)
        dependent.update(v for v, marked in zip(eqn.outvars, outs) if marked)
    return dependent


def _program_outs(sub, marks: tuple[bool, ...], memo: dict) -> tuple[bool, ...]:
    key = (id(sub), marks)
    if key not in memo:
        dependent = _dependent(sub, marks, memo)
        memo[key] = (tuple(not _is_literal(v) and v in dependent for v in sub.outvars), sub)  # keep sub alive for its id
    return memo[key][0]


def _out_marks(eqn, ins: tuple[bool, ...], memo: dict) -> tuple[bool, ...]:
    """Which outputs of ``eqn`` depend on a marked input, given which of its inputs do."""
    name = eqn.primitive.name
    if name == "scan":
        body, (consts, carries) = _inner(eqn.params["jaxpr"]), _scan_counts(eqn)
        marks = _loop_fixpoint(body, ins, consts, carries, memo)
        return _program_outs(body, marks, memo)
    if name == "while":
        body = _inner(eqn.params["body_jaxpr"])
        cond_consts, body_consts = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        marks = _loop_fixpoint(body, ins[cond_consts:], body_consts, len(eqn.outvars), memo)
        cond_marks = ins[:cond_consts] + marks[body_consts:]
        if any(_program_outs(_inner(eqn.params["cond_jaxpr"]), cond_marks, memo)):
            return (True,) * len(eqn.outvars)  # how often the loop runs depends on an input
        return marks[body_consts:]
    if name == "cond":
        if ins[0]:
            return (True,) * len(eqn.outvars)
        outs = [False] * len(eqn.outvars)
        for branch in eqn.params["branches"]:
            outs = [a or b for a, b in zip(outs, _program_outs(_inner(branch), ins[1:], memo))]
        return tuple(outs)
    for sub in _called(eqn):
        if len(sub.invars) == len(ins) and len(sub.outvars) == len(eqn.outvars):
            return _program_outs(sub, ins, memo)
    return (any(ins),) * len(eqn.outvars)  # no program that lines up: every output may depend on every input


def _loop_fixpoint(body, ins: tuple[bool, ...], consts: int, carries: int, memo: dict) -> tuple[bool, ...]:
    """A loop body's input marks once carries that come to depend on an input are marked too."""
    marks = tuple(ins)
    while True:
        outs = _program_outs(body, marks, memo)
        carried = tuple(m or o for m, o in zip(marks[consts : consts + carries], outs[:carries]))
        updated = marks[:consts] + carried + marks[consts + carries :]
        if updated == marks:
            return marks
        marks = updated


def _scan_counts(eqn) -> tuple[int, int]:
    """A scan's number of constants and of carries (JAX 0.12 keeps them in ``ft_in``, older JAX as numbers)."""
    if "num_consts" in eqn.params:
        return int(eqn.params["num_consts"]), int(eqn.params["num_carry"])
    consts, carries, _ = eqn.params["ft_in"].update(list(eqn.invars)).unpack()
    return len(list(consts)), len(list(carries))


def _inner(program):
    return getattr(program, "jaxpr", program)


def _called(eqn) -> list:
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = _inner(item)
            if hasattr(inner, "eqns"):
                found.append(inner)
    return found


def _sub_programs(eqn, ins: tuple[bool, ...], memo: dict) -> list[tuple[Any, int, bool, tuple[bool, ...]]]:
    """(program, runs per run of ``eqn``, unbounded loop, its inputs' marks) for every program ``eqn`` calls."""
    name = eqn.primitive.name
    if name == "scan":
        body = _inner(eqn.params["jaxpr"])
        marks = _loop_fixpoint(body, ins, *_scan_counts(eqn), memo)
        return [(body, int(eqn.params["length"]), False, marks)]
    if name == "while":
        body, cond = _inner(eqn.params["body_jaxpr"]), _inner(eqn.params["cond_jaxpr"])
        cond_consts, body_consts = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        marks = _loop_fixpoint(body, ins[cond_consts:], body_consts, len(eqn.outvars), memo)
        return [(cond, 1, True, ins[:cond_consts] + marks[body_consts:]), (body, 1, True, marks)]
    if name == "cond":
        return [(_inner(b), 1, False, ins[1:]) for b in eqn.params["branches"]]
    found = []
    for sub in _called(eqn):
        marks = ins if len(sub.invars) == len(ins) else (any(ins),) * len(sub.invars)
        found.append((sub, 1, False, marks))
    return found


# --- liveness --------------------------------------------------------------------------------


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
    carries = _scan_counts(eqn)[1] if eqn.primitive.name == "scan" else 0
    return {
        inner
        for position, (outer, inner) in enumerate(zip(eqn.outvars, outvars))
        if not _is_literal(inner) and (position < carries or outer in needed)
    }


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


# --- one constraint --------------------------------------------------------------------------


def _constraint(eqn, dependent: set, prefix: str, runs: int, unbounded: bool) -> Constraint:
    operand = eqn.invars[0]
    aval = operand.aval
    sharding = eqn.params["sharding"]
    spec = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
    location = _join(prefix, str(eqn.source_info.name_stack)) or _user_function(eqn.source_info)
    activation = not _is_literal(operand) and operand in dependent
    return Constraint(
        decode_spec(spec, len(aval.shape)),
        tuple(aval.shape),
        str(aval.dtype),
        location,
        runs,
        activation,
        _semantics(eqn.source_info),
        unbounded,
        eqn.outvars[0],
        spec,
    )


def _raw_frames(source_info) -> tuple:
    """An equation's traceback as its frames' code objects and last instructions, innermost first; none without one
    (read raw: building every frame of every equation is most of a big program's reading time)."""
    traceback = getattr(source_info, "traceback", None)
    if traceback is None:
        return (), ()
    return traceback.raw_frames()


def _semantics(source_info) -> str:
    """Which Flax code resolved the constraint's names: the innermost resolving Flax frame, else a hand-written call."""
    for code in _raw_frames(source_info)[0]:
        semantics = _RESOLVERS.get(code.co_filename)
        if semantics:
            return semantics
    return "hand"


def _join(prefix: str, stack: str) -> str:
    return "/".join(part for part in (prefix, stack) if part)


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """Where a frame is: file, line and qualified function name (as ``jax``'s traceback frames say it)."""

    file_name: str
    line_num: int
    function_name: str


def user_frame(source_info) -> SourceLine | None:
    """The innermost frame of an equation's traceback outside JAX, Flax, optax, the standard library and the explorer
    (``sources.is_library``, the rule the collectives' lines follow) and outside a function installed over JAX's own
    (``sources.jax_shims``: MaxText's ``_compat_wsc``), or None (only the frame found is turned into a line)."""
    codes, lastis = _raw_frames(source_info)
    shims = jax_shims()
    for code, lasti in zip(codes, lastis):
        if not is_library(code.co_filename) and not (shims and (os.path.abspath(code.co_filename), code.co_qualname) in shims):
            return SourceLine(code.co_filename, type(source_info.traceback).code_addr2line(code, lasti), code.co_qualname)
    return None


def _user_function(source_info) -> str:
    """What names a constraint outside any module's name stack: the innermost method of the model's code outside JAX,
    Flax, optax and the explorer (``Attention.__call__``: the layer), else its innermost function. A model's helper that
    only applies a constraint (MaxText's ``maybe_shard_with_name``, called from every layer) would name them all alike."""
    codes, _ = _raw_frames(source_info)
    shims, first = jax_shims(), None
    for code in codes:
        if explorer_own(code.co_filename):  # the explorer's step and whoever called it: never the model
            break
        if is_library(code.co_filename) or (shims and (os.path.abspath(code.co_filename), code.co_qualname) in shims):
            continue
        parts = code.co_qualname.split(".")
        if len(parts) >= 2 and not parts[-2].startswith("<"):  # Class.method (a local class's too), not f.<locals>.g
            return code.co_qualname
        first = first or code.co_qualname
    return first or "program"
