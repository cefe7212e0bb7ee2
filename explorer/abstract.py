"""The abstract model: every array of the train state and the step, without allocating any.

One ``jax.eval_shape`` of the Flax guide's ``init_fn`` (``model.init`` then
``TrainState.create`` with Adam) gives the shape, dtype and logical axes of every
parameter and optimizer-state leaf. The same trace runs the forward pass, so it also
records every ``nn.with_logical_constraint`` the model declares (the activations),
and the model output. The result depends only on the model configuration and is
cached on it: editing rules or the mesh never re-traces the model.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Literal

import flax.linen as nn
import flax.linen.spmd as flax_spmd
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from explorer.errors import ExplorerError
from explorer.models import BuiltModel, build_model

Kind = Literal["param", "opt_state", "input", "activation"]
LEARNING_RATE = 1e-3


@dataclasses.dataclass(frozen=True)
class AbstractArray:
    """One array the train step touches, before any mesh or rule is applied."""

    path: str
    kind: Kind
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | None, ...] | None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class AbstractModel:
    """The cached result of tracing a model configuration once."""

    key: tuple
    built: BuiltModel
    optimizer: optax.GradientTransformation  # the instance in state_shapes' tree (trees must match it)
    state_shapes: Any  # the TrainState of ShapeDtypeStructs, logical boxes kept
    state_arrays: tuple[AbstractArray, ...]  # params, opt_state (and step), in tree order
    inputs: tuple[AbstractArray, ...]
    activations: tuple[AbstractArray, ...]
    output: AbstractArray

    @property
    def arrays(self) -> tuple[AbstractArray, ...]:
        return self.state_arrays + self.inputs + self.activations + (self.output,)


def make_optimizer() -> optax.GradientTransformation:
    """The guide's optimizer: Adam with learning rate 1e-3."""
    return optax.adam(LEARNING_RATE)


def init_fn(key, *inputs, model: nn.Module, optimizer: optax.GradientTransformation):
    """The Flax guide's init_fn: initialise the variables and wrap them in a TrainState."""
    variables = model.init(key, *inputs)
    return _train_state(model, variables, optimizer)


def _train_state(model: nn.Module, variables, optimizer: optax.GradientTransformation) -> train_state.TrainState:
    return train_state.TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optimizer)


_CACHE_SIZE = 16
_cache: collections.OrderedDict[tuple, AbstractModel] = collections.OrderedDict()
_cache_lock = threading.Lock()


def abstract_model(model_spec) -> AbstractModel:
    """The abstract model for a validated ``ModelSpec``, traced once per configuration."""
    key = model_spec.key()
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    model = _trace(key, model_spec)
    with _cache_lock:
        _cache[key] = model
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return model


def _trace(key: tuple, model_spec) -> AbstractModel:
    built = build_model(model_spec)
    inputs = tuple(jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in built.inputs)
    optimizer = make_optimizer()
    found: dict[str, Any] = {}

    def init_with_output(rng, *xs):
        output, variables = built.module.init_with_output(rng, *xs)
        found["output_record"] = _record_of(output)
        return output, _train_state(built.module, variables, optimizer)

    with _recording() as records:
        try:
            output, state = jax.eval_shape(init_with_output, jax.random.key(0), *inputs)
        except ExplorerError:
            raise
        except Exception as error:  # a model that cannot be traced is bad input, not a crash
            raise ExplorerError("model", model_spec.name, f"could not be traced: {type(error).__name__}: {error}") from None
    activations = _activation_arrays(records)
    return AbstractModel(
        key=key,
        built=built,
        optimizer=optimizer,
        state_shapes=state,
        state_arrays=_state_arrays(state),
        inputs=tuple(
            AbstractArray(f"inputs/{i.name}", "input", tuple(i.shape), i.dtype, i.logical_axes) for i in built.inputs
        ),
        activations=activations,
        output=_output_array(output, found.get("output_record"), records),
    )


def _is_box(x: Any) -> bool:
    return isinstance(x, nn.Partitioned)


def _state_arrays(state) -> tuple[AbstractArray, ...]:
    leaves = jax.tree_util.tree_flatten_with_path(state, is_leaf=_is_box)[0]
    arrays = []
    for path, leaf in leaves:
        names = tuple(leaf.names) if _is_box(leaf) else None
        value = leaf.value if _is_box(leaf) else leaf
        text = path_to_str(path)
        kind: Kind = "param" if text.startswith("params/") else "opt_state"
        if names is None and value.ndim == 0:
            names = ()
        note = "train step counter" if text == "step" else ""
        arrays.append(AbstractArray(text, kind, tuple(value.shape), str(value.dtype), names, note))
    return tuple(arrays)


def path_to_str(path) -> str:
    """``params/LogicalDotReluDot_0/Dense_0/kernel`` from a JAX key path."""
    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            if key.name != "value":
                parts.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        else:
            parts.append(str(key))
    return "/".join(parts)


# --- recording the logical constraints a forward pass declares --------------------------

@dataclasses.dataclass
class _Record:
    module_path: tuple[str, ...]
    names: tuple | None
    shape: tuple[int, ...]
    dtype: str
    result: Any = None


_local = threading.local()
_original_constraint = flax_spmd._with_sharding_constraint_one_fallback


def _recording_constraint(axis_resources, x, *args, **kwargs):
    """Flax's single funnel for ``with_logical_constraint``; records the call when asked."""
    result = _original_constraint(axis_resources, x, *args, **kwargs)
    records = getattr(_local, "records", None)
    if records is not None:
        module = nn.module._context.module_stack[-1]
        path = tuple(module.path) if module is not None else ()
        path = path or (type(module).__name__,)
        names = None if axis_resources is None else tuple(axis_resources)
        records.append(_Record(path, names, tuple(x.shape), str(x.dtype), result))
    return result


flax_spmd._with_sharding_constraint_one_fallback = _recording_constraint


class _recording:
    """Record logical constraints in this thread; non-empty rules make Flax call the funnel."""

    def __enter__(self) -> list[_Record]:
        self._rules = nn.logical_axis_rules([("__explorer_probe__", None)])
        self._rules.__enter__()
        _local.records = []
        return _local.records

    def __exit__(self, *exc) -> None:
        _local.records = None
        self._rules.__exit__(*exc)


def _record_of(output) -> int | None:
    """Which record, if any, produced the model output (the same traced value)."""
    records = getattr(_local, "records", None) or []
    leaves = jax.tree_util.tree_leaves(output)
    if len(leaves) != 1:
        return None
    for index in range(len(records) - 1, -1, -1):
        if records[index].result is leaves[0]:
            return index
    return None


def _deduplicate(records: list[_Record]) -> list[tuple[int, _Record]]:
    """Drop repeated traces of one module body (``nn.scan`` traces its body twice).

    Per module path, the recorded signatures are cut to their shortest period: a
    body traced k times records the same sequence k times.
    """
    by_path: dict[tuple, list[int]] = {}
    for index, record in enumerate(records):
        by_path.setdefault(record.module_path, []).append(index)
    kept = []
    for indices in by_path.values():
        signatures = [(records[i].names, records[i].shape, records[i].dtype) for i in indices]
        period = _shortest_period(signatures)
        kept.extend(indices[:period])
    return [(i, records[i]) for i in sorted(kept)]


def _shortest_period(items: list) -> int:
    for period in range(1, len(items) + 1):
        if len(items) % period == 0 and items == items[:period] * (len(items) // period):
            return period
    return len(items)


def _activation_arrays(records: list[_Record]) -> tuple[AbstractArray, ...]:
    arrays = []
    counters: dict[tuple, int] = {}
    for _, record in _deduplicate(records):
        ordinal = counters.get(record.module_path, 0)
        counters[record.module_path] = ordinal + 1
        location = "/".join(record.module_path)
        arrays.append(
            AbstractArray(
                f"activations/{location}/{ordinal}", "activation", record.shape, record.dtype, record.names,
                note="declared by nn.with_logical_constraint",
            )
        )
    return tuple(arrays)


def _output_array(output, record_index: int | None, records: list[_Record]) -> AbstractArray:
    leaf = jax.tree_util.tree_leaves(output)[0]
    if record_index is not None:
        names = records[record_index].names
        note = "model output; its sharding is the last constraint the model declares on it"
    else:
        names = None
        note = "model output; no constraint declared on it, so XLA chooses its sharding (shown replicated)"
    return AbstractArray("activations/output", "activation", tuple(leaf.shape), str(leaf.dtype), names, note)
