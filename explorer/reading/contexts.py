"""The contexts a trace runs in, and a model JAX refuses to trace as one ``ExplorerError``.

A helper of the two stages that trace (``trace.py``, the train state; ``activations.py``, the forward pass):

- ``layout(mesh, rules)``: a layout's mesh (this process's devices, or an ``AbstractMesh``) and rules as Flax reads
  them (``flax_rules``); ``under(mesh, rules, framework)``: the same for a mesh with Explicit axes, NNX's rules too;
  ``no_eager_sharding()``: NNX's eager sharding off, where NNX is loaded;
- ``tracing(model_name, explicit)``: the ``with`` block a model is traced in (the collector paused): under Auto axes
  a model written for Explicit axes is told to make its mesh explicit (``NeedsExplicitAxes``), any other failure is
  bad input; under Explicit axes JAX's refusal is ``refusal``'s message;
- ``refusal(model_name, error)``: JAX's Explicit-mode refusals (an ambiguous contraction, ``with_sharding_constraint``
  acting as an assert, a shape the mesh does not divide), whose own message names neither the op nor the line;
- ``error_text(error)``: JAX's message without its note on filtered frames.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import traceback
from typing import Any

import jax

from explorer.errors import ExplorerError, NeedsExplicitAxes
from explorer.reading import collector
from explorer.hlo.sources import is_library

# What JAX says when a model written for Explicit axes is traced without a mesh or on Auto axes.
_EXPLICIT_SIGNS = (
    "Using PartitionSpec when you are not under a mesh context",
    "reshard is only allowed",
    "can only be used with Explicit",
    "Explicit mesh axes",
)

_FIXES = (
    (
        "Contracting dimensions are sharded",
        "its contracting dimensions are sharded and JAX cannot tell how to shard the output. Fix: pass "
        "out_sharding=P(...) to that call, or change the rule that shards its contracting dimension",
    ),
    (
        "acts as an assert",
        "on a mesh whose axes are all Explicit, with_sharding_constraint is an assert and the value is sharded "
        "otherwise (Flax Linen's logical constraints and boxed parameters do this). Fix: use Auto axes for this "
        "model, or jax.sharding.reshard in its code",
    ),
    ("evenly divide", "a dimension the mesh does not divide evenly. Fix: change the rule that shards it, or the mesh or the model's size"),
)


def flax_rules(rules: tuple) -> tuple:
    """Rules as Flax reads them: a rule's mesh axes a tuple, not a list (as a layout file writes them)."""
    return tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in rules)


@contextlib.contextmanager
def layout(mesh: Any, rules: tuple):
    """A layout's mesh (this process's devices, or an AbstractMesh of the same shape) and rules, as Flax reads them."""
    import flax.linen as nn
    from jax.sharding import Mesh

    with jax.set_mesh(mesh) if isinstance(mesh, Mesh) else jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(flax_rules(rules)):
        yield


@contextlib.contextmanager
def under(mesh: Any, rules: tuple, framework: str):
    """A mesh with Explicit axes (an ``AbstractMesh``) and its rules, as the framework reads them (NNX:
    ``nnx.logical_axis_rules`` for Variable metadata; Linen: ``nn.logical_axis_rules``)."""
    import flax.linen as nn

    with jax.sharding.use_abstract_mesh(mesh), nn.logical_axis_rules(rules):
        if framework == "nnx":
            from flax import nnx

            with nnx.logical_axis_rules(rules):
                yield
        else:
            yield


def type_names(mesh) -> tuple[str, ...]:
    """The mesh's axis types as a layout spells them (``"explicit"``/``"auto"``)."""
    from jax.sharding import AxisType

    return tuple("explicit" if t == AxisType.Explicit else "auto" for t in mesh.axis_types)


def no_eager_sharding():
    """NNX's eager sharding off, where NNX is loaded: a model without NNX parts never imported it (and need not)."""
    nnx = sys.modules.get("flax.nnx")
    return nnx.use_eager_sharding(False) if nnx is not None else contextlib.nullcontext()


def error_text(error: Exception) -> str:
    text = str(error).split("\n--------------------")[0].strip()  # JAX's note on filtered frames is not the error
    return f"{type(error).__name__}: {text}"


@contextlib.contextmanager
def tracing(model_name: str, explicit: bool = False):
    """A model that cannot be traced is bad input, not a crash: one message naming the model (the collector paused).

    Under Explicit axes (``explicit``) JAX's refusal becomes ``refusal``'s message; under Auto axes a model written
    for Explicit axes is told to make its mesh explicit (``NeedsExplicitAxes``).
    """
    try:
        with collector.paused():
            yield
    except ExplorerError:
        raise
    except Exception as error:
        if explicit:
            raise refusal(model_name, error) from None
        if any(sign in str(error) for sign in _EXPLICIT_SIGNS):
            raise NeedsExplicitAxes(
                "model",
                model_name,
                "sets shardings in its values' types (out_sharding=, reshard), which needs a mesh with Explicit axes; "
                "this layout's mesh has Auto axes. Fix: make the mesh's axes explicit (mesh.axis_types: "
                f'["explicit", ...]). (JAX: {type(error).__name__}: {error})',
            ) from None
        raise ExplorerError("model", model_name, f"could not be traced: {type(error).__name__}: {error}") from None


def refusal(model_name: str, error: Exception) -> ExplorerError:
    """JAX's refusal of an Explicit-axis program as one message naming the operation, the model's line and the fix."""
    text = error_text(error)
    where, op = _where(error)
    for needle, fix in _FIXES:
        if needle in text:
            return ExplorerError("model", model_name, f"is refused by JAX under Explicit axes at {where}{op}: {fix}. (JAX: {text})")
    return ExplorerError("model", model_name, f"could not be traced under Explicit axes at {where}{op}: {text}")


def _where(error: Exception) -> tuple[str, str]:
    """The model's source line the error came from (``file:line `code```) and the library call made there."""
    frames = traceback.extract_tb(error.__traceback__)
    index = max((i for i, f in enumerate(frames) if not is_library(f.filename)), default=None)
    if index is None:
        return "an unknown line", ""
    frame = frames[index]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    where = f"{os.path.basename(frame.filename)}:{frame.lineno} ({frame.name}: `{code}`)"
    call = next((f.name for f in frames[index + 1 :] if is_library(f.filename)), "")
    return where, f" in {call}()" if call else ""
