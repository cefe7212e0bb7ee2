"""Pipeline parallelism over a stack of identical blocks, run the way MaxText's ``layers/pipeline.py`` runs it.

The blocks are split into ``stages`` groups; with ``repeats`` > 1 (MaxText's circular pipeline) each stage holds
``repeats`` non-adjacent groups: block ``r * stages * per + s * per + l`` lives at repeat ``r``, stage ``s``,
position ``l`` (``per = layers / (stages * repeats)``). The weights are stacked with the logical names
``circular_repeats`` (only when repeats > 1), ``stage`` and ``layer`` in front of each block weight's own names, so a
rule ``stage -> <mesh axis>`` places the stages.

The batch is cut into ``microbatches``. The loop runs ``microbatches * repeats + stages - 1`` iterations (its trip
count); in each one every stage runs its group of blocks on the microbatch in front of it (a ``vmap`` over the stage
dimension, ``spmd_axis_name`` the stage's mesh axis, so each device runs only its stage), then the outputs move one
stage on (``jnp.roll`` over the stage dimension: XLA compiles it to a collective-permute over the stage axis). Stage
``s`` works on the ``k``-th microbatch pass (``k = t - s``) when ``0 <= k < microbatches * repeats``; otherwise it
computes on a placeholder: the bubble, ``(stages - 1) / (microbatches * repeats + stages - 1)`` of the loop.
The last stage's output is stored per microbatch in a buffer whose microbatch dimension is whole on every device; in
a circular pipeline the first stage reads it back for the next repeat (so microbatches >= stages there, checked by
the options). On Auto axes microbatch ``k`` is rows ``k, k + microbatches, ...`` of the batch (the buffer
``[batch, microbatch, ...]``, so cutting the batch and joining it back are local to each data shard) and the store is
an elementwise ``where`` over the microbatches: with contiguous microbatches and a read and update of one dynamic
index, XLA's TPU partitioner gathered the whole buffer over the data axis every iteration.

On a mesh of Explicit axes (``jax.make_mesh``'s default) the same loop is written in types: the stacked weights are
created typed by stage (the vmap's ``spmd_axis_name`` over the initializers' ``out_sharding=``), the state is typed
``[stage on the stage's mesh axis, one microbatch laid out as the input]``, and the first stage's input is put in by an
elementwise ``where`` over the stages (MaxText's way; it needs no update of one index of the sharded stage dimension). What Explicit types cannot say
(a roll or a slice of a sharded dimension, a reshape across shards) runs in ``jax.sharding.auto_axes`` regions with an
``out_sharding``: the shift (still a collective-permute), reading the last stage's output, and cutting the batch into
microbatches and back.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from explorer.models.base import on_explicit_axes
from explorer.models.schedule import iterations

STAGE = "stage"
REPEATS = "circular_repeats"


def stage_axis() -> str | tuple[str, ...] | None:
    """The mesh axis (or axes) the layout's rules give the logical name ``stage``; None when it is not placed."""
    return nn.logical_to_mesh_axes((STAGE,))[0]


class _StageGroup(nn.Module):
    """One stage's group of ``per`` consecutive blocks (an ``nn.scan``; its stacked dimension is named ``layer``)."""

    block: Any
    options: Any
    per: int

    @nn.compact
    def __call__(self, x):
        scanned = nn.scan(
            self.block,
            length=self.per,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            metadata_params={nn.PARTITION_NAME: "layer"},
        )
        x, _ = scanned(self.options, name="blocks")(x, None)
        return x


class Pipeline(nn.Module):
    """``layers`` blocks (``block(options)(x, None) -> (x, None)``) pipelined over ``stages`` stages."""

    block: Any
    options: Any
    layers: int
    stages: int
    microbatches: int
    repeats: int = 1
    activation_names: tuple = ("batch", "length", "embed")

    def _stacked(self, axis):
        """The stacked weights' module: a vmap over stages (and over repeats) of a stage's group of blocks."""
        lift = dict(in_axes=0, out_axes=0, variable_axes={"params": 0}, split_rngs={"params": True})
        stacked = nn.vmap(_StageGroup, metadata_params={nn.PARTITION_NAME: STAGE}, spmd_axis_name=axis, **lift)
        if self.repeats > 1:
            stacked = nn.vmap(stacked, metadata_params={nn.PARTITION_NAME: REPEATS}, **lift)
        return stacked(self.block, self.options, self.layers // (self.stages * self.repeats), name="layers")

    @nn.compact
    def __call__(self, x):
        stages, repeats, microbatches = self.stages, self.repeats, self.microbatches
        axis = stage_axis()
        explicit = on_explicit_axes()
        shape = (microbatches, x.shape[0] // microbatches, *x.shape[1:])
        micro_names = (self.activation_names[0], None, *self.activation_names[1:])  # Auto axes: [batch, microbatch, ...]
        at = 0 if explicit else 1  # the microbatch dimension of the input's microbatches and of the outputs
        if explicit:  # x's batch split into microbatches, each laid out as x's batch (a reshape across the data shards)
            spec = _spec(x)
            micro = _auto(lambda v: v.reshape(shape), P(None, *spec))(x)
            state_spec = P(axis, *spec)  # the stages on the stage's mesh axis, each one microbatch laid out as x
        else:  # microbatch k is rows k, k + microbatches, ... of x: the split (and the join after the loop) is local to
            # each data shard, and the microbatch dimension (1) whole on every device, read and written at a dynamic index
            micro = nn.with_logical_constraint(x.reshape(x.shape[0] // microbatches, microbatches, *x.shape[1:]), micro_names)
        stacked = self._stacked(axis)
        if self.is_initializing():  # creates the stacked weights (MaxText initialises its stages' vmap the same way)
            front = ((repeats,) if repeats > 1 else ()) + (stages,)
            layout = {"out_sharding": P(*(None,) * (len(front) - 1), *state_spec)} if explicit else {}
            one = jax.lax.index_in_dim(micro, 0, at, keepdims=False)
            stacked(jnp.broadcast_to(one, front + one.shape, **layout))
        weights = nn.meta.unbox(stacked.variables["params"])
        group = _StageGroup(self.block, self.options, self.layers // (stages * repeats))
        run = jax.vmap(lambda w, h: group.apply({"params": w}, h), spmd_axis_name=axis)
        pick = jax.vmap(lambda w, r: jax.lax.dynamic_index_in_dim(w, r, 0, keepdims=False), in_axes=(1, 0), spmd_axis_name=axis)
        state_names = (STAGE, *self.activation_names)
        index = jax.lax.broadcasted_iota(jnp.int32, (stages,), 0, out_sharding=P(axis)) if explicit else jnp.arange(stages)

        def constrained(v, names=state_names):
            return v if explicit else nn.with_logical_constraint(v, names)

        def store(outputs, done, value):
            """The last stage's output kept at its microbatch's slot of ``outputs`` (none while ``done`` is negative). On
            Auto axes by an elementwise ``where`` over the microbatches (no read and update of one dynamic index, which
            XLA's TPU partitioner compiled to an all-gather of the whole buffer every iteration)."""
            slot = done % microbatches
            if explicit:
                kept = jax.lax.dynamic_index_in_dim(outputs, slot, 0, keepdims=False)
                return jax.lax.dynamic_update_index_in_dim(outputs, jnp.where(done >= 0, value, kept), slot, 0)
            mask = jnp.expand_dims((jnp.arange(microbatches) == slot) & (done >= 0), (0, *range(2, outputs.ndim)))
            return constrained(jnp.where(mask, jnp.expand_dims(value, 1), outputs), micro_names)

        def shift(v):
            """The stages' outputs one stage on: ``jnp.roll`` over the stage dimension, a collective-permute over the
            stage axis (on Explicit axes in an ``auto_axes`` region, whose ``out_sharding`` keeps the stages placed:
            Explicit types have no roll of a sharded dimension)."""
            return _auto(lambda o: jnp.roll(o, 1, axis=0), state_spec)(v) if explicit else jnp.roll(v, 1, axis=0)

        def enter(v, entering):
            """The first stage's input put in: on Explicit axes by an elementwise ``where`` over the stages (MaxText's way;
            Explicit types have no update of one index of a sharded dimension)."""
            if explicit:
                return jnp.where(jnp.expand_dims(index == 0, tuple(range(1, v.ndim))), entering[None], v)
            return v.at[0].set(entering)

        def last(v):
            """The last stage's output (on Explicit axes read out of the stage-sharded state in an ``auto_axes`` region)."""
            return _auto(lambda o: o[stages - 1], P(*spec))(v) if explicit else v[stages - 1]

        def iteration(t, carry):
            state, outputs = carry
            first = jax.lax.dynamic_index_in_dim(micro, t % microbatches, at, keepdims=False)
            back = jax.lax.dynamic_index_in_dim(outputs, t % microbatches, at, keepdims=False)
            # the first stage's input: a new microbatch or one coming back
            entering = constrained(jnp.where(t < microbatches, first, back), self.activation_names)
            state = constrained(enter(state, entering))
            repeat = jnp.clip((t - index) // microbatches, 0, repeats - 1)  # the repeat each stage is on
            # Without repeats every iteration runs the same weights: used as they are (loop-invariant), the backward
            # loop reads them, where a per-iteration pick of them was kept for it once per iteration (XLA's peak grew
            # by about the stage's weights every iteration).
            here = weights if repeats == 1 else jax.tree_util.tree_map(lambda w: pick(w, repeat), weights)
            out = run(here, state)
            done = t - (stages - 1)  # the microbatch pass leaving the last stage (none while negative)
            outputs = store(outputs, done, constrained(last(out), self.activation_names))
            return constrained(shift(out)), outputs

        state = jnp.zeros((stages, shape[1], *x.shape[1:]), x.dtype, **({"out_sharding": state_spec} if explicit else {}))
        outputs = constrained(jnp.zeros_like(micro), micro_names)
        _, outputs = jax.lax.fori_loop(0, iterations(stages, microbatches, repeats), iteration, (state, outputs))
        if explicit:
            return _auto(lambda o: o.reshape(x.shape), P(*spec))(outputs)
        return outputs.reshape(x.shape)


def _spec(x) -> tuple:
    """``x``'s type's spec, one entry per dimension (Explicit axes)."""
    spec = tuple(jax.typeof(x).sharding.spec)
    return spec + (None,) * (x.ndim - len(spec))


def _auto(f, out_sharding: P):
    """``f`` in an ``auto_axes`` region over every mesh axis: XLA lays out what Explicit types cannot say (a roll or a
    slice of a sharded dimension, a reshape across shards), and the result comes back typed ``out_sharding``."""
    return jax.sharding.auto_axes(f, out_sharding=out_sharding)
