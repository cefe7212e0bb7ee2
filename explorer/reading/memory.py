"""What the reading keeps in memory for the rest of the process: one bounded registry per kind of result.

- ``models``: per (model key, mesh axes), the traced models (``Traced``), newest first, two at most;
- ``received``: per model and layout (``received_key``), the activations JAX receives under that layout;
- ``stages``: per (model key, mesh axes), the built model and its traced train state (``trace.State``),
  the live objects a compile needs;
- ``typed``: per model and Explicit-axis layout (``typed.key_of``), the model read from its values' types.

The doors in ``explorer/reading/__init__.py`` look here first and store here what the pipeline
returned; nothing here traces or imports Flax. ``clear()`` empties them all (``explorer.caches.clear``
clears them with every other cache of the explorer).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Generic, Hashable, TypeVar

Value = TypeVar("Value")


class Registry(Generic[Value]):
    """A dict that keeps at most ``size`` entries (the oldest first out), safe across threads."""

    def __init__(self, size: int):
        self.size = size
        self._entries: dict[Hashable, Value] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Value | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Hashable, value: Value) -> Value:
        """Keep ``value`` for ``key`` (replacing what was there) and give it back."""
        return self.update(key, lambda _: value)

    def keep_first(self, key: Hashable, value: Value) -> Value:
        """Keep ``value`` unless ``key`` has one already; give back the one kept."""
        return self.update(key, lambda kept: value if kept is None else kept)

    def update(self, key: Hashable, change: Callable[[Value | None], Value]) -> Value:
        """Keep ``change(what key has, or None)`` for ``key``, in one step, and give it back."""
        with self._lock:
            value = self._entries[key] = change(self._entries.get(key))
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
            return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


models: Registry[tuple] = Registry(32)
received: Registry[Any] = Registry(64)
stages: Registry[Any] = Registry(32)
typed: Registry[Any] = Registry(16)
REGISTRIES = {"models": models, "received": received, "stages": stages, "typed": typed}


def clear() -> None:
    """Empty every registry: the next reading traces again, or reads the disk."""
    for registry in REGISTRIES.values():
        registry.clear()


def received_key(model_key: tuple, mesh: Any, rules: tuple) -> tuple:
    """A model under one layout: its key, the mesh's axis names and sizes, the rules as JSON (``disk`` takes all but the key)."""
    rules = tuple((name, list(axes) if isinstance(axes, tuple) else axes) for name, axes in rules)
    return (model_key, tuple(mesh.axis_names), tuple(int(n) for n in mesh.axis_sizes), json.dumps(rules))
