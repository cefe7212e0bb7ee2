"""A user's own jitted step planned for a target: its arguments typed onto the target's mesh, and lowered there.

The explorer's train step is the Flax guides' recipe around a model; most JAX users train with their own (a loss of
their own, EMA weights, two optimizers, gradient accumulation, a ``shard_map``). This module lowers *their* jitted
function for a target's devices, with abstract arguments; ``xla_compile.compile_lowered`` then compiles and reads it
as it does a layout's step (XLA's verdict, memory, collectives by source line, the predicted step, the roofline).
Two doors lead here:

- ``explorer.plan(fn, *args, target=...)`` in a notebook (``notebook.plan``): ``fn`` a ``jax.jit``-ed function and
  its arguments (``jax.ShapeDtypeStruct``s or arrays, ``NamedSharding``s over any mesh); ``args_mesh`` reads that
  mesh's axis names and sizes, the explorer builds a mesh of the same names and sizes over the target's devices, and
  ``on_mesh`` gives every argument the same ``PartitionSpec`` on it.
- a step factory (``explorer compile --step module:factory``, the app's ``step`` model): ``factory(mesh, **options)``
  returns ``(fn, args)`` or ``(fn, args, kwargs)``; ``models.steps.factory_step`` calls it with the target's mesh,
  which the explorer built from the layout's mesh (its shape and axis names) over the target's devices.

Why the explorer hands the mesh in: a ``NamedSharding`` names the devices of its mesh, and a program lowered over one
set of devices cannot run on another: a sharding over the user's CPU mesh (``jax.make_mesh`` in the notebook) cannot be
lowered for a TPU slice's devices (JAX: "Received incompatible devices for jitted computation"), and only the explorer
has the slice's devices (libtpu's description of it, no TPU needed). So the factory writes its shardings on the mesh
it is given, as a training script writes them on ``jax.make_mesh``'s; ``plan`` moves the arguments' shardings over,
which it can do for arguments only: a sharding written into ``fn`` itself (``in_shardings=``, a constraint) over a
``NamedSharding`` of the user's mesh stays on that mesh. Written as a ``PartitionSpec`` (resolved against
``jax.set_mesh``'s mesh, under which ``lower_on`` lowers), it moves with the step.
"""

from __future__ import annotations

from typing import Any

from explorer.errors import ExplorerError, first_line

FIELD = "step"
MISMATCH_HINT = (
    "; a sharding written into the function itself names the devices of the mesh it was made on: write it as a "
    "PartitionSpec (resolved against the mesh the step is lowered under), or give a factory that builds the step "
    "on the mesh it is handed"
)


def args_mesh(tree: Any) -> tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...]] | None:
    """The mesh the arguments' ``NamedSharding``s are written on: its sizes, axis names and axis types (``"auto"`` or
    ``"explicit"``); None when none has one. Two different meshes among them are refused in one line."""
    import jax
    from jax.sharding import AxisType, NamedSharding

    found = None
    for leaf in jax.tree_util.tree_leaves(tree):
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, NamedSharding):
            continue
        mesh = sharding.mesh
        types = tuple("explicit" if t == AxisType.Explicit else "auto" for t in mesh.axis_types)
        this = (tuple(int(n) for n in mesh.axis_sizes), tuple(mesh.axis_names), types)
        if found is not None and this[:2] != found[:2]:
            raise ExplorerError(
                "args",
                dict(zip(this[1], this[0])),
                f"are sharded over two meshes ({dict(zip(found[1], found[0]))} too): a step runs on one",
            )
        found = found or this
    return found


def on_mesh(tree: Any, mesh) -> Any:
    """``tree`` with every array leaf an abstract argument on ``mesh``: its shape and dtype, and the ``PartitionSpec``
    (and memory kind) of its ``NamedSharding``, now over ``mesh``'s devices; an array without one replicated; an
    abstract leaf without a sharding left to jit; anything else (a Python number) as it is."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    def moved(leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            sharding = NamedSharding(mesh, sharding.spec, memory_kind=sharding.memory_kind)
        elif sharding is not None or isinstance(leaf, jax.Array):
            sharding = NamedSharding(mesh, PartitionSpec())
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    return jax.tree_util.tree_map(moved, tree)


def lower_on(fn, args: tuple, kwargs: dict, mesh):
    """``fn`` (jitted, or jitted here) lowered with ``args`` under ``jax.set_mesh(mesh)``; its failure one message."""
    import jax

    if not callable(fn):
        raise ExplorerError(FIELD, type(fn).__name__, "is not a function: give a jax.jit-ed function (or one to jit)")
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    try:
        with jax.set_mesh(mesh):
            return jitted.lower(*args, **kwargs)
    except Exception as error:  # the user's code: JAX's refusal or the function's own, one line
        hint = MISMATCH_HINT if "incompatible devices" in str(error) else ""
        raise ExplorerError(FIELD, name_of(fn), f"could not be lowered for the target's devices: {first_line(error)}{hint}") from None


def name_of(fn) -> str:
    """The step's name as JAX names its program (``jit(train_step)``)."""
    inner = getattr(fn, "__wrapped__", fn)
    return f"jit({getattr(inner, '__name__', type(inner).__name__)})"
