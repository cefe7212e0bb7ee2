"""What every model, built-in or a user's factory, hands to the explorer."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

Framework = Literal["linen", "nnx"]


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of the train step: name, shape, dtype and its annotation (or None).

    ``logical_axes`` has one entry per dimension: a logical name the rules resolve, a
    tuple of mesh axes the input is fixed to (as ``jax.device_put(x, P('data', None))``
    in the Flax NNX guide), or None (replicated).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | tuple[str, ...] | None, ...] | None
    model_arg: bool = True  # False for a label: passed to the loss only, not to the model


@dataclasses.dataclass(frozen=True)
class BuiltModel:
    """A model, its example inputs, and ``loss(output, *inputs) -> scalar``.

    Linen: ``module`` is an ``nn.Module``, called as ``module.apply(variables, *inputs)``.
    NNX: ``module`` is a function of no arguments that builds the ``nnx.Module`` (the
    explorer calls it under ``nnx.eval_shape`` or under the layout's mesh, because
    Flax's eager sharding needs a mesh when variables are created); the model is
    called as ``model(*inputs)``. Inputs with ``model_arg=False`` (labels) are passed to
    the loss only.

    ``mesh``: the JAX Mesh the model's own code holds, where it holds one (MaxText's layers pass theirs to
    ``shard_map``, which refuses to trace under any other mesh, devices included): a layout of its shape and axes
    traces the forward pass under it rather than over this process's devices.

    ``optimizer``: the model's own optimizer, ``optimizer(model) -> optax.GradientTransformation`` given the abstract
    NNX model (MaxText's ``optimizers.get_optimizer``, which reads it for Muon); None: the guides' Adam
    (``make_optimizer``). The reading traces its state, so every optimizer-state leaf shown is that optimizer's.
    """

    module: Any
    inputs: tuple[InputSpec, ...]
    loss: Callable[..., Any]
    framework: Framework = "linen"
    mesh: Any = None
    optimizer: Callable[[Any], Any] | None = None

    def nnx_builder(self) -> Callable[[], Any]:
        """NNX: the function that builds the module (a factory may hand over a built ``nnx.Module`` instead)."""
        from flax import nnx

        return (lambda: self.module) if isinstance(self.module, nnx.Module) else self.module

    def model_args(self, inputs: tuple) -> tuple:
        """The inputs the model itself takes (labels go to the loss only)."""
        return tuple(x for x, spec in zip(inputs, self.inputs) if spec.model_arg)


def on_explicit_axes() -> bool:
    """The model is being traced on a mesh whose axes are all Explicit (``jax.make_mesh``'s default since JAX 0.9):
    shardings live in the values' types, so a model writes them as ``out_sharding=`` and ``jax.sharding.reshard``
    (Flax's ``examples/gemma``, bonsai's qwen3), and ``with_sharding_constraint`` is an assert."""
    import jax

    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and mesh.are_all_axes_explicit


LEARNING_RATE = 1e-3


def make_optimizer():
    """The guides' optimizer: Adam with learning rate 1e-3 (the reading traces its state, the train step applies it)."""
    import optax

    return optax.adam(LEARNING_RATE)
