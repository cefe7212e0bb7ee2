"""What the reading keeps in memory for the rest of the process: one bounded registry per kind of result.

- ``models``: per (model key, mesh axes), the traced models (``Traced``), newest first, two at most;
- ``received``: per model and layout (``Request.received_key``), the activations JAX receives under that layout;
- ``stages``: per (model key, mesh axes), the built model and its train state read (``state.State``), the live
  objects a compile needs;
- ``typed``: per model and Explicit-axis layout (its key), the model read from its values' types.

``through(request, run)`` is the entry's one call here: what is kept for the request, else what ``run`` (the disk,
then the stages) gives with what was kept, kept. Nothing here traces or imports Flax. Each registry registers
itself with ``explorer.caches``, whose ``clear()`` empties them with every other cache of the explorer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from explorer.caches import Registry
from explorer.reading.arrays import Reading, Request

models: Registry[tuple] = Registry(32, "reading.memory.models")
received: Registry[Any] = Registry(64, "reading.memory.received")
stages: Registry[Any] = Registry(32, "reading.memory.stages")
typed: Registry[Any] = Registry(16, "reading.memory.typed")
REGISTRIES = {"models": models, "received": received, "stages": stages, "typed": typed}


def through(request: Request, run: Callable[[Reading], Reading]) -> Reading:
    """What memory keeps for ``request`` when it answers it, else ``run(kept)``'s reading, kept."""
    kept = _kept(request)
    if request.answered_by(kept):
        return kept
    reading = run(kept)
    place = (request.key, request.mesh_axes)
    stage = stages.keep_first(place, reading.stage) if reading.stage is not None else None
    if request.explicit and reading.model is not None:
        typed.put(request.key, reading.model)
    if reading.traced is not None:
        models.put(place, reading.traced)
    if reading.received is not None and request.received_key is not None:
        received.put(request.received_key, reading.received)
    return dataclasses.replace(reading, stage=stage)


def _kept(request: Request) -> Reading:
    place = (request.key, request.mesh_axes)
    stage = stages.get(place)
    if request.explicit:
        return Reading(request.model or typed.get(request.key), None, None, stage)
    traced = models.get(place)
    found = received.get(request.received_key) if request.received_key is not None else None
    return Reading(request.told_apart(traced), found, traced, stage)
