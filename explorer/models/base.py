"""What every model, built-in or a user's factory, hands to the explorer."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of the train step: name, shape, dtype and logical axis names (or None)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | None, ...] | None


@dataclasses.dataclass(frozen=True)
class BuiltModel:
    """A Linen module, its example inputs, and ``loss(output, *inputs) -> scalar``.

    The module is called as ``module.apply(variables, *inputs)`` with the inputs in order.
    """

    module: nn.Module
    inputs: tuple[InputSpec, ...]
    loss: Callable[..., Any]
