"""Every cache the explorer keeps for the rest of a process, and one way to clear them all.

A module that memoizes a function registers it where it is defined::

    @caches.register
    @functools.lru_cache(maxsize=64)
    def jax_mesh(shape, axes, types=None): ...

and ``clear()`` empties it with everything else. Nothing here imports JAX or Flax.
"""

from __future__ import annotations

from typing import Callable, TypeVar

Memoized = TypeVar("Memoized", bound=Callable)

_registered: list[Callable] = []


def register(function: Memoized) -> Memoized:
    """Have ``clear()`` empty ``function``'s cache (a ``functools.lru_cache``, or anything with ``cache_clear``)."""
    _registered.append(function)
    return function


def registered() -> tuple[Callable, ...]:
    """The memoized functions ``clear()`` empties (those of the modules imported so far)."""
    return tuple(_registered)


def clear(*, disk: bool = False) -> None:
    """Clear every cache, as if the process had just started.

    - the reading's registries (``explorer/reading/memory.py``): the traced models
      (``models``), the activations received per layout (``received``), the traced stages,
      each a built model and its train state (``stages``), and the models read under
      Explicit axes (``typed``);
    - the ``lru_cache``s registered here: in ``analysis`` (meshes), ``plots`` (figures and
      colour scales) and ``compiled`` (compiled train steps);
    - with ``disk=True``, the files kept on disk (``explorer/reading/disk.py``: ``traces/``,
      ``resolved/`` and ``compiles/`` under the cache folder; the folder itself stays).

    Not cleared: what cannot change while the process runs (the library versions and source
    hash that name the files on disk, which files are library code), and JAX's own caches.
    """
    from explorer.reading import disk as on_disk, memory

    memory.clear()
    for function in _registered:
        function.cache_clear()
    if disk:
        on_disk.clear()
