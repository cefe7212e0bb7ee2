"""Every cache the explorer keeps for the rest of a process, and one way to clear them all.

A module that memoizes a function registers it where it is defined::

    @caches.register
    @functools.lru_cache(maxsize=64)
    def jax_mesh(shape, axes, types=None): ...

and ``clear()`` empties it with everything else; a ``Registry`` (a bounded dict, for what a plain
function cache cannot key, such as a compiled step built from a layout and its report) registers
itself. Nothing here imports JAX or Flax.
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, TypeVar

Memoized = TypeVar("Memoized", bound=Callable)
Value = TypeVar("Value")

_registered: list[Callable] = []
_registries: list["Registry"] = []
_disk_clearers: list[Callable[[], None]] = []


class Registry(Generic[Value]):
    """A dict that keeps at most ``size`` entries (the oldest first out), safe across threads; ``clear()`` empties it."""

    def __init__(self, size: int, name: str):
        self.size = size
        self.name = name  # where it lives, e.g. "reading.memory.models"
        self._entries: dict[Hashable, Value] = {}
        self._lock = threading.Lock()
        _registries.append(self)

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


def registries() -> tuple[Registry, ...]:
    """Every ``Registry`` made so far (the reading's, the compiled steps')."""
    return tuple(_registries)


def register(function: Memoized) -> Memoized:
    """Have ``clear()`` empty ``function``'s cache (a ``functools.lru_cache``, or anything with ``cache_clear``)."""
    _registered.append(function)
    return function


def registered() -> tuple[Callable, ...]:
    """The memoized functions ``clear()`` empties (those of the modules imported so far)."""
    return tuple(_registered)


def register_disk(clear_files: Callable[[], None]) -> Callable[[], None]:
    """Have ``clear(disk=True)`` call ``clear_files`` (``explorer/reading/disk.py`` registers its own on import, so this
    module, at the bottom of the stages, never imports the reading)."""
    _disk_clearers.append(clear_files)
    return clear_files


def clear(*, disk: bool = False) -> None:
    """Clear every cache, as if the process had just started.

    - every ``Registry``: the reading's (``explorer/reading/memory.py``: the traced models
      (``models``), the activations received per layout (``received``), the traced stages,
      each a built model and its train state (``stages``), and the models read under
      Explicit axes (``typed``)), and ``compiled``'s compiled train steps;
    - the ``lru_cache``s registered here: in ``meshes`` and ``plots.grid`` (figures and
      colour scales);
    - with ``disk=True``, the files kept on disk (``explorer/reading/disk.py``: ``traces/``,
      ``resolved/`` and ``compiles/`` under the cache folder; the folder itself stays).

    Not cleared: what cannot change while the process runs (the library versions and source
    hash that name the files on disk, which files are library code), and JAX's own caches.
    """
    for registry in _registries:
        registry.clear()
    for function in _registered:
        function.cache_clear()
    if disk:
        for clear_files in _disk_clearers:
            clear_files()
