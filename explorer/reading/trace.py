"""Tracing a model configuration into an ``AbstractModel``, without allocating any array.

- Linen: the Flax guide's ``init_fn`` (``model.init`` then ``TrainState.create`` with
  Adam), evaluated by ``jax.eval_shape`` without a mesh, as the guide does. Its output
  shapes are the train state: every
  ``flax.core.meta.AxisMetadata`` box (``nn.with_logical_partitioning``,
  ``nn.with_partitioning``, NNX-in-Linen bridges) gives its names through
  ``get_partition_spec()``; ``flax.linen.partitioning.param_with_axes`` models give theirs
  through ``nn_partitioning.get_axis_names`` on the ``params_axes`` collection (their
  parameters stay unboxed, as T5X keeps them: Flax's lifted transforms refuse boxes
  without a partition name), and Adam's moments take their parameter's names from
  ``optimizer.init`` of the parameters boxed with those names.
- NNX: ``nnx.eval_shape`` of the factory's builder and of ``nnx.Optimizer`` (Adam, on
  ``nnx.Param``), names from ``out_sharding`` metadata as ``nnx.get_partition_spec`` reads each Variable (``get_var_pspec``);
  the forward pass traced on that state.

Activations are every live ``sharding_constraint`` of the forward pass on a value
computed from a model input, traced under the layout tagged with the logical names (or
under the probe, ``constraints.py``): logical constraints and constraints
fixed to mesh axes by hand alike, each with its module, the rule semantics of the call
that made it, in program order, a scanned body once with how many times it runs per
step. Constraints on weights (parameter reads, casts and transposes of weights) are
counted, not listed.

What JAX receives under a layout can differ from the rules applied to the names the probe
read: a model may resolve names with code of its own (MaxText's ``maybe_shard_with_logical``
drops mesh axes of size 1 and shards on the mesh the model holds), pass rules of its own, or
refuse the probe altogether. ``received_by_forward`` traces the forward pass in the layout's
own context, its mesh (this process's devices, or an ``AbstractMesh`` of the same shape) and
``nn.logical_axis_rules``, and reads every live activation constraint as JAX received it; a
first ``traced`` under a layout gives the same at no extra cost (the tagged layout).

Every function here traces and returns values: nothing is kept. The doors in
``explorer/reading/__init__.py`` keep what they return (``memory.py``, ``disk.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import threading
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.core import meta
from flax.linen import partitioning as nn_partitioning
from flax.training import train_state

from explorer.reading import collector, constraints as program
from explorer.train_step import make_optimizer
from explorer.reading.arrays import (
    AbstractArray,
    AbstractModel,
    AxisName,
    Kind,
    Resolved,
    Traced,
    activation_arrays,
    names_of,
    semantics_of,
)
from explorer.errors import ExplorerError, NeedsExplicitAxes
from explorer.models import BuiltModel, build_model


def _boxed_with_axes(params, params_axes) -> Any:
    """``param_with_axes`` parameters boxed with their ``params_axes`` names (for reading names, never traced)."""
    names = nn_partitioning.get_axis_names(params_axes)
    flat_names = {
        path: spec
        for path, spec in jax.tree_util.tree_flatten_with_path(names, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))[0]
    }

    def box(path, leaf):
        spec = flat_names.get(path)
        if spec is None or isinstance(leaf, meta.AxisMetadata):
            return leaf
        return nn.LogicallyPartitioned(leaf, tuple(spec))

    return jax.tree_util.tree_map_with_path(box, params, is_leaf=lambda x: isinstance(x, meta.AxisMetadata))


@dataclasses.dataclass(frozen=True)
class State:
    """The model built and its train state traced: everything but the activations."""

    built: BuiltModel
    framework: str
    optimizer: optax.GradientTransformation
    state: Any
    state_arrays: tuple[AbstractArray, ...]
    forward: Any  # forward(variables, *inputs): the model's forward pass on the state's variables
    variables: Any  # the forward's first argument, abstract
    root: str = ""
    graphdefs: Any = None  # NNX: the model's and the optimizer's


@dataclasses.dataclass(frozen=True)
class Reading:
    """What one ``traced`` gives: the model with the names its probe told apart, the layout's activations
    (None where they were not read), and the state the forward pass ran on."""

    traced: Traced
    received: Resolved | None
    stage: State


def state(key: tuple, layout: tuple | None = None) -> State:
    """The model of ``key`` built and its train state traced (Linen: the guide's ``init``, evaluated without a mesh,
    or under ``layout``'s mesh and rules where its init needs one; NNX: ``nnx.eval_shape``)."""
    built = _built(key)
    with _tracing(key):
        return _linen_state(built, layout) if built.framework == "linen" else _nnx_state(built)


def traced(
    key: tuple, names: frozenset[str], mesh_axes: tuple[str, ...], layout: tuple | None = None, stage: State | None = None
) -> Reading:
    """The model of ``key`` traced, with its activations' names read under a probe telling ``names`` apart.

    A model seen for the first time is traced twice, as a user of Flax's recipe does: the
    state (``state``), then the forward pass. With ``layout``, a ``(mesh, rules)`` pair,
    that forward pass runs under the layout tagged with a size-1 probe axis per name
    (``constraints.tagged_mesh``/``tagged_rules``): each constraint then says both the mesh
    axes JAX receives under the layout and the names they came from, so the layout's
    activations (``Resolved``) come at no extra cost. Without a layout, or where the tagged
    trace is refused, the forward pass runs under the probe alone and the layout's
    activations are left to ``received_by_forward`` (None is returned for them).
    Given the ``stage`` of an earlier trace, only the forward pass is traced.
    """
    if stage is None:
        stage = state(key, layout)
    with _tracing(key):
        names = frozenset(names | _input_names(stage.built) | names_of(stage.state_arrays))
        if layout is not None:
            with _names_asked() as asked:
                found = _tagged_forward(key, mesh_axes, stage, names, *layout)
            if found is not None:
                named, received = found
                return Reading(Traced(dataclasses.replace(named, asked_names=frozenset(asked)), names), received, stage)
        try:
            with _names_asked() as asked, _probe(names, mesh_axes):
                closed = forward_program(stage)
        except Exception as error:  # the model's own code refuses the probe: names are not recoverable
            return Reading(Traced(_unprobed(key, mesh_axes, stage, error_text(error)), names), None, stage)
        found = program.constraints(closed, **_forward_positions(stage))
    model = dataclasses.replace(_model(key, mesh_axes, stage, found, closed), asked_names=frozenset(asked))
    return Reading(Traced(model, names), None, stage)


_asking = threading.local()  # the names one thread's trace is recording (``_names_asked``)
_hook_lock = threading.Lock()
_hook: dict[str, Any] = {"sections": 0, "original": None}


@contextlib.contextmanager
def _names_asked():
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


def _tagged_forward(
    key: tuple, mesh_axes: tuple[str, ...], stage: State, names: frozenset[str], mesh: Any, rules: tuple
) -> tuple[AbstractModel, Resolved | None] | None:
    """The forward pass under the layout tagged with the names: the model with its names, and the layout's activations.

    None where the tagged layout is refused (a dimension an axis does not divide, code that
    wants the layout's devices): the probe and the layout are then traced apart. The layout's
    activations are None where a constraint resolved the NNX way carries a name with no rule
    (NNX reads such a name as a mesh axis; the tag hid that): the layout alone says what JAX does.
    """
    rules = _flax_rules(rules)
    ruled = {name for name, _ in rules}
    names = names | ruled
    tagged_mesh = program.tagged_mesh(names, tuple(mesh.axis_names), tuple(mesh.axis_sizes))
    try:
        with jax.sharding.use_abstract_mesh(tagged_mesh), nn.logical_axis_rules(program.tagged_rules(rules, names)):
            closed = forward_program(stage)
    except Exception:
        return None
    found = program.constraints(closed, **_forward_positions(stage))
    named = [dataclasses.replace(c, dims=program.decode_spec(c.spec, len(c.shape), tagged=True)) for c in found]
    model = _model(key, mesh_axes, stage, named, closed)
    if any(c.semantics == "nnx" and any(isinstance(d, str) and d not in ruled for d in c.dims) for c in named):
        return model, None
    on_mesh = [dataclasses.replace(c, dims=program.mesh_spec(c.spec, len(c.shape))) for c in found]
    return model, _received(on_mesh, closed, stage, model.framework)


def _forward_positions(stage: State) -> dict:
    """Where a forward program's model inputs and parameters sit among its inputs."""
    n_variables = len(jax.tree_util.tree_leaves(stage.variables))
    n_inputs = len(stage.built.inputs)
    return {"input_invars": range(n_variables, n_variables + n_inputs), "parameter_invars": range(n_variables)}


def received_by_forward(stage: State, mesh: Any, rules: tuple) -> Resolved:
    """A layout's activations as JAX receives them: the forward pass traced under its mesh and rules."""
    try:
        with collector.paused(), _layout_context(mesh, rules):
            closed = forward_program(stage)
    except Exception as error:  # a layout JAX refuses (an axis used twice, ...): the analysis says so
        return Resolved(error=error_text(error))
    return _received(program.constraints(closed, **_forward_positions(stage)), closed, stage, stage.framework)


def _received(found: list, closed, stage: State, framework: str) -> Resolved:
    return Resolved(activation_arrays(found, stage.root), _output_array(closed, found, framework))


@contextlib.contextmanager
def _layout_context(mesh: Any, rules: tuple):
    """A layout's mesh (this process's devices, or an AbstractMesh of the same shape) and rules, as Flax reads them."""
    from jax.sharding import Mesh

    with jax.set_mesh(mesh) if isinstance(mesh, Mesh) else jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(_flax_rules(rules)):
        yield


def _flax_rules(rules: tuple) -> tuple:
    """Rules as Flax reads them: a rule's mesh axes a tuple, not a list (as a layout file writes them)."""
    return tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in rules)


def forward_program(stage: State):
    """The forward pass on the state's variables, traced in the current mesh and rules context.

    A new function each time: JAX caches a traced function by its identity and the mesh, and
    Flax's rules are not part of that key, so tracing the same function under other rules
    would hand back the program of the first ones.
    """

    def forward(variables, *xs):
        return stage.forward(variables, *xs)

    return jax.make_jaxpr(forward)(stage.variables, *_abstract_inputs(stage.built))


def error_text(error: Exception) -> str:
    text = str(error).split("\n--------------------")[0].strip()  # JAX's note on filtered frames is not the error
    return f"{type(error).__name__}: {text}"


@contextlib.contextmanager
def _probe(names: frozenset[str], mesh_axes: tuple[str, ...]):
    """The probe: an abstract mesh with a size-1 axis per real mesh axis and logical name, and rules naming each."""
    with jax.sharding.use_abstract_mesh(program.probe_mesh(names, mesh_axes)), nn.logical_axis_rules(program.probe_rules(names)):
        yield


def _built(key: tuple) -> BuiltModel:
    from explorer.layout import ModelSpec

    model_spec = ModelSpec(name=key[0], options=json.loads(key[1]))
    built = build_model(model_spec)
    if built.framework not in ("linen", "nnx"):
        raise ExplorerError("model.name", model_spec.name, "did not give a Linen nn.Module or a function building an nnx.Module")
    return built


@contextlib.contextmanager
def _tracing(key: tuple):
    """A model that cannot be traced is bad input, not a crash: one message naming the model."""
    try:
        with collector.paused():
            yield
    except ExplorerError:
        raise
    except Exception as error:
        if any(sign in str(error) for sign in _EXPLICIT_SIGNS):
            raise NeedsExplicitAxes(
                "model",
                key[0],
                "sets shardings in its values' types (out_sharding=, reshard), which needs a mesh with Explicit axes; "
                "this layout's mesh has Auto axes. Fix: make the mesh's axes explicit (mesh.axis_types: "
                f'["explicit", ...]). (JAX: {type(error).__name__}: {error})',
            ) from None
        raise ExplorerError("model", key[0], f"could not be traced: {type(error).__name__}: {error}") from None


# What JAX says when a model written for Explicit axes is traced without a mesh or on Auto axes.
_EXPLICIT_SIGNS = (
    "Using PartitionSpec when you are not under a mesh context",
    "reshard is only allowed",
    "can only be used with Explicit",
    "Explicit mesh axes",
)


def _input_names(built: BuiltModel) -> frozenset[str]:
    return frozenset(n for i in built.inputs if i.logical_axes for n in i.logical_axes if isinstance(n, str))


def _abstract_inputs(built: BuiltModel) -> tuple[jax.ShapeDtypeStruct, ...]:
    return tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in built.inputs)


def _input_arrays(built: BuiltModel) -> tuple[AbstractArray, ...]:
    return tuple(
        AbstractArray(
            f"inputs/{i.name}", "input", tuple(i.shape), i.dtype, _padded(i.logical_axes, len(i.shape)), semantics=built.framework
        )
        for i in built.inputs
    )


def _padded(names, ndim: int) -> tuple[AxisName, ...] | None:
    """Names padded with None to the rank: JAX replicates the trailing dimensions."""
    if names is None:
        return None
    names = tuple(tuple(n) if isinstance(n, list) else n for n in names)
    if len(names) > ndim:
        raise ExplorerError("logical axes", list(names), f"name {len(names)} dimensions of an array of rank {ndim}")
    return names + (None,) * (ndim - len(names))


# --- Linen ---------------------------------------------------------------------------------


def _linen_state(built: BuiltModel, layout: tuple | None = None) -> State:
    """The state: the guide's ``init_fn``, evaluated without a mesh as Flax's guide evaluates shapes.

    A model whose init needs a mesh (a ``PartitionSpec`` constraint written by hand) is
    evaluated under ``layout``'s mesh and rules when given.
    """
    optimizer = make_optimizer()
    module = built.module

    def init(rng, *xs):
        variables = module.init(rng, *built.model_args(xs))
        state = train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=optimizer)
        return state, variables.get("params_axes")

    arguments = (jax.random.key(0), *_abstract_inputs(built))
    # NNX variables inside (bridges) would shard themselves as they are created; shapes need no mesh
    with _no_eager_sharding():
        try:
            state, params_axes = jax.eval_shape(init, *arguments)
        except Exception:
            if layout is None:
                raise
            with _layout_context(*layout):
                state, params_axes = jax.eval_shape(init, *arguments)

    def forward(params, *xs):
        return module.apply({"params": params}, *built.model_args(xs))

    return State(
        built,
        "linen",
        optimizer,
        state,
        _linen_state_arrays(state, optimizer, params_axes),
        forward,
        state.params,
        root=type(module).__name__,
    )


def _no_eager_sharding():
    """NNX's eager sharding off, where NNX is loaded: a model without NNX parts never imported it (and need not)."""
    nnx = sys.modules.get("flax.nnx")
    return nnx.use_eager_sharding(False) if nnx is not None else contextlib.nullcontext()


def _is_box(x: Any) -> bool:
    return isinstance(x, meta.AxisMetadata)


def _linen_state_arrays(state, optimizer: optax.GradientTransformation, params_axes: Any) -> tuple[AbstractArray, ...]:
    """The state's leaves with their names; ``param_with_axes`` names read from a copy whose parameters are boxed."""
    if params_axes:
        boxed = _boxed_with_axes(state.params, params_axes)
        state = state.replace(params=boxed, opt_state=jax.eval_shape(optimizer.init, boxed))
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_box)[0]
    arrays = []
    for path, leaf in leaves:
        value = jax.tree_util.tree_leaves(leaf)[0]  # a box's one leaf (unboxing an NNX bridge box builds a Variable)
        names, annotation = _box_names(leaf, value.ndim)
        text = path_to_str(path)
        kind: Kind = "param" if text.startswith("params/") else "opt_state"
        note = "train step counter" if text == "step" else ""
        semantics = "nnx" if annotation == "nnx" else "linen"
        arrays.append(AbstractArray(text, kind, tuple(value.shape), str(value.dtype), names, note, annotation, semantics=semantics))
    return tuple(arrays)


def _box_names(leaf: Any, ndim: int) -> tuple[tuple[AxisName, ...] | None, str]:
    """A box's names through Flax's public ``get_partition_spec``, padded to the rank."""
    if not _is_box(leaf):
        return ((), "logical") if ndim == 0 else (None, "logical")
    bridge = sys.modules.get("flax.nnx.bridge.variables")  # loaded by any model with NNX parts
    if bridge is not None and isinstance(
        leaf, bridge.NNXMeta
    ):  # its get_partition_spec builds an eagerly sharded Variable, which needs a mesh
        # Flax shards an NNX variable as it creates it, with NNX's rule semantics, even inside a Linen model
        return _padded(tuple(leaf.metadata.get("out_sharding") or ()), ndim), "nnx"
    else:
        spec = tuple(leaf.get_partition_spec())
    annotation = "logical" if isinstance(leaf, nn.LogicallyPartitioned) else "mesh-or-logical"
    return _padded(spec, ndim), annotation


def path_to_str(path) -> str:
    """``params/LogicalDotReluDot_0/Dense_0/kernel`` from a JAX key path.

    Only a box's own ``value`` attribute is dropped (``GetAttrKey('value')``); a module or
    dictionary entry named ``value`` (an attention layer's value projection) is a path part.
    """
    kept = tuple(key for key in path if not (isinstance(key, jax.tree_util.GetAttrKey) and key.name == "value"))
    return jax.tree_util.keystr(kept, simple=True, separator="/")


# --- NNX -----------------------------------------------------------------------------------


def _nnx_state(built: BuiltModel) -> State:
    from flax import nnx

    optimizer = make_optimizer()
    build = built.nnx_builder()
    with nnx.use_eager_sharding(False):
        model = nnx.eval_shape(build)
        if not isinstance(model, nnx.Module):
            raise ExplorerError("model", type(model).__name__, "is what the NNX builder returned, not an nnx.Module")
        opt = nnx.eval_shape(lambda: nnx.Optimizer(model, optimizer, wrt=nnx.Param))
    return nnx_split_state(built, optimizer, model, opt)


def nnx_split_state(built: BuiltModel, optimizer, model, opt) -> State:
    """The ``State`` of an abstract NNX model and its optimizer: split into graph and state, their arrays read from the
    Variables' metadata (under whatever logical-axis rules the caller has set), and the forward pass on the model's."""
    from flax import nnx

    model_def, model_state = nnx.split(model)
    opt_def, opt_state = nnx.split(opt)
    state_arrays = _nnx_state_arrays(model_state, "param") + _nnx_state_arrays(opt_state, "opt_state")

    def forward(variables, *xs):
        return nnx.merge(model_def, variables)(*built.model_args(xs))

    return State(
        built,
        "nnx",
        optimizer,
        (model_state, opt_state),
        state_arrays,
        forward,
        model_state,
        root=type(model).__name__,
        graphdefs=(model_def, opt_def),
    )


def _nnx_state_arrays(state, kind: Kind) -> tuple[AbstractArray, ...]:
    from flax import nnx

    def is_variable(x):
        return isinstance(x, nnx.Variable)

    from flax.nnx.spmd import get_var_pspec  # nnx.get_partition_spec's own reading of one Variable

    variables = jax.tree_util.tree_flatten_with_path(state, is_leaf=is_variable)[0]
    arrays = []
    for path, variable in variables:
        text = path_to_str(path)
        if not is_variable(variable):  # a plain array a module holds as an attribute (bonsai's position ids)
            arrays.append(
                AbstractArray(
                    text,
                    kind,
                    tuple(variable.shape),
                    str(variable.dtype),
                    () if variable.ndim == 0 else None,
                    "a plain array attribute, not an nnx.Variable",
                    semantics="nnx",
                )
            )
            continue
        value = variable.get_value()
        annotated = variable.has_metadata("out_sharding") and variable.get_metadata("out_sharding")
        names = _padded(tuple(get_var_pspec(variable)), value.ndim) if annotated else (() if value.ndim == 0 else None)
        variable_type = type(variable).__name__
        note = "" if variable_type in ("Param", "OptVariable") else f"nnx.{variable_type}"
        arrays.append(AbstractArray(text, kind, tuple(value.shape), str(value.dtype), names, note, semantics="nnx"))
    return tuple(arrays)


# --- activations ---------------------------------------------------------------------------


def _model(key: tuple, mesh_axes: tuple[str, ...], stage: State, found: list[program.Constraint], closed) -> AbstractModel:
    return AbstractModel(
        key=key,
        mesh_axes=mesh_axes,
        framework=stage.framework,
        state_arrays=stage.state_arrays,
        inputs=_input_arrays(stage.built),
        activations=activation_arrays(found, stage.root),
        output=_output_array(closed, found, stage.framework),
        loops_without_length=sum(1 for c in found if c.in_loop_without_length and c.activation),
        weight_constraints=sum(1 for c in found if not c.activation),
    )


def _unprobed(key: tuple, mesh_axes: tuple[str, ...], stage: State, probe_error: str) -> AbstractModel:
    """The state alone: the model's code refused the probe, so its activations come from the resolved trace only."""
    output = jax.eval_shape(stage.forward, stage.variables, *_abstract_inputs(stage.built))
    leaf = jax.tree_util.tree_leaves(output)[0]
    note = "model output; its sharding is read from the trace under the layout's rules"
    return AbstractModel(
        key=key,
        mesh_axes=mesh_axes,
        framework=stage.framework,
        state_arrays=stage.state_arrays,
        inputs=_input_arrays(stage.built),
        activations=(),
        output=AbstractArray(
            "activations/output", "activation", tuple(leaf.shape), str(leaf.dtype), None, note, module="output", semantics=stage.framework
        ),
        probe_error=probe_error,
    )


def _output_array(closed, found: list[program.Constraint], framework: str) -> AbstractArray:
    output_var = closed.jaxpr.outvars[0]
    aval = output_var.aval
    declared = next((c for c in reversed(found) if c.var is output_var and c.activation), None)
    if declared is not None:
        names, semantics = declared.dims, semantics_of(declared)
        note = "model output; its sharding is the last constraint the model declares on it"
    else:
        names, semantics = None, "linen" if framework == "linen" else "nnx"
        note = "model output; no constraint declared on it, so XLA chooses its sharding (shown replicated)"
    return AbstractArray(
        "activations/output", "activation", tuple(aval.shape), str(aval.dtype), names, note, module="output", semantics=semantics
    )
