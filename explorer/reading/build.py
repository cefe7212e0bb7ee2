"""Stage 1, build: the model of a reading's key, built by the registry (``explorer.models``).

``build(key)`` takes the key of a ``ModelSpec`` (its name and its options as JSON, then, for a reading under
Explicit axes, the mesh and rules) and gives the registry's frozen ``BuiltModel``: the Linen module or the NNX
builder, the example inputs, the loss. Nothing is traced here. The collector is paused: a user's factory imports
its modules on first use (``collector.py``).
"""

from __future__ import annotations

import json

from explorer.errors import ExplorerError
from explorer.models import BuiltModel, build_model
from explorer.reading import collector


def build(key: tuple) -> BuiltModel:
    """The model of ``key`` built: a Linen ``nn.Module`` or a function building an ``nnx.Module``, with its inputs."""
    from explorer.layout import ModelSpec

    model_spec = ModelSpec(name=key[0], options=json.loads(key[1]))
    with collector.paused():
        built = build_model(model_spec)
    if built.framework not in ("linen", "nnx"):
        raise ExplorerError("model.name", model_spec.name, "did not give a Linen nn.Module or a function building an nnx.Module")
    return built
