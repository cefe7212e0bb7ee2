"""What the reading keeps in memory for the rest of the process: one bounded registry per kind of result.

- ``models``: per (model key, mesh axes), the traced models (``Traced``), newest first, two at most;
- ``received``: per model and layout (``received_key``), the activations JAX receives under that layout;
- ``stages``: per (model key, mesh axes), the built model and its traced train state (``trace.State``),
  the live objects a compile needs;
- ``typed``: per model and Explicit-axis layout (``typed.key_of``), the model read from its values' types.

The doors in ``explorer/reading/__init__.py`` look here first and store here what the pipeline
returned; nothing here traces or imports Flax. Each registry registers itself with ``explorer.caches``,
whose ``clear()`` empties them with every other cache of the explorer.
"""

from __future__ import annotations

import json
from typing import Any

from explorer.caches import Registry


models: Registry[tuple] = Registry(32, "reading.memory.models")
received: Registry[Any] = Registry(64, "reading.memory.received")
stages: Registry[Any] = Registry(32, "reading.memory.stages")
typed: Registry[Any] = Registry(16, "reading.memory.typed")
REGISTRIES = {"models": models, "received": received, "stages": stages, "typed": typed}


def received_key(model_key: tuple, mesh: Any, rules: tuple) -> tuple:
    """A model under one layout: its key, the mesh's axis names and sizes, the rules as JSON (``disk`` takes all but the key)."""
    rules = tuple((name, list(axes) if isinstance(axes, tuple) else axes) for name, axes in rules)
    return (model_key, tuple(mesh.axis_names), tuple(int(n) for n in mesh.axis_sizes), json.dumps(rules))
