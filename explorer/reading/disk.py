"""The traced abstract model on disk, so a second run (or a restarted server) skips the trace.

One JSON file per model configuration and mesh axis names, in ``traces/`` under
``$EXPLORER_CACHE_DIR``, else ``$XDG_CACHE_HOME/partition-explorer``, else
``~/.cache/partition-explorer`` (compiles for TPU targets live in ``compiles/`` beside it). The file name hashes the model configuration, the mesh
axis names, the versions of JAX, Flax and optax, the source of the explorer's tracing
code and, for a user's factory, the source file of the factory's module: any change
there is a different file. Files are written whole to a temporary name and renamed
into place (concurrent writers cannot leave half a file); a file that cannot be read
or does not parse is ignored and traced again. Set ``EXPLORER_CACHE_DIR=off`` to
switch the disk cache off.

Beside them, ``resolved/`` keeps a model's activations as JAX received them under one
layout's mesh and rules (``explorer.reading.received``). ``clear()`` removes every file the
explorer keeps here (``compiles/`` too), never the folder itself.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from typing import Callable

from explorer import caches
from explorer.reading.arrays import AbstractArray, AbstractModel, Reading, Request, Resolved, Traced

CACHE_ENV = "EXPLORER_CACHE_DIR"
FORMAT = 2
FOLDERS = ("traces", "resolved", "compiles")  # compiles/: explorer/compile/compile_cache.py's results for TPU targets
_TRACING_SOURCES = ("reading", "models")  # folders of explorer/ whose code decides what a trace gives


def cache_dir() -> Path | None:
    configured = os.environ.get(CACHE_ENV)
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "partition-explorer"


def through(request: Request, kept: Reading, run: Callable[[Reading], Reading]) -> Reading:
    """What the disk keeps for ``request`` added to what memory ``kept`` when that answers it, else ``run``'s
    reading, stored. A model read under Explicit axes and the live state are not kept here."""
    if request.explicit or request.live:
        return run(kept)
    traced = kept.traced
    if traced is None:  # nothing in memory: the disk's entries, if any
        traced = tuple(Traced(model, names) for names, model in load(request.key, request.mesh_axes))
    model = kept.model or request.told_apart(traced)
    received = kept.received
    if received is None and model is not None and request.received_key is not None:
        received = load_resolved(request.key, request.received_key[1:])
    found = Reading(model, received, traced, kept.stage)
    if request.answered_by(found):
        return found
    reading = run(found)
    if reading.traced is not traced:
        store(request.key, request.mesh_axes, [(t.traced_names, t.model) for t in reading.traced])
    if reading.received is not None and reading.received is not received and not reading.received.error:
        store_resolved(request.key, request.received_key[1:], reading.received)
    return reading


def load(key: tuple, mesh_axes: tuple[str, ...]) -> list[tuple[frozenset[str], Any]]:
    """The cached (traced names, AbstractModel) entries for this model, or [] (missing, unreadable, stale)."""
    path = _path(key, mesh_axes)
    if path is None:
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or data.get("key") != list(key) or data.get("mesh_axes") != list(mesh_axes):
            return []
        return [(frozenset(entry["names"]), _model_from(entry["model"], key, mesh_axes)) for entry in data["entries"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return []


def store(key: tuple, mesh_axes: tuple[str, ...], entries: list[tuple[frozenset[str], Any]]) -> None:
    """Write the entries atomically; a cache that cannot be written is skipped, never an error."""
    path = _path(key, mesh_axes)
    if path is None:
        return
    _write_json(
        path,
        {
            "format": FORMAT,
            "key": list(key),
            "mesh_axes": list(mesh_axes),
            "entries": [{"names": sorted(names), "model": _model_to(model)} for names, model in entries],
        },
    )


def load_resolved(key: tuple, layout: tuple):
    """The ``resolved.Resolved`` kept for this model under a layout's mesh and rules, or None."""
    path = _hashed_path("resolved", key[0], [FORMAT, list(key), json.dumps(layout)])
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or data.get("key") != list(key) or data.get("layout") != json.dumps(layout):
            return None
        return Resolved(tuple(_array_from(a) for a in data["activations"]), _array_from(data["output"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def store_resolved(key: tuple, layout: tuple, resolved) -> None:
    path = _hashed_path("resolved", key[0], [FORMAT, list(key), json.dumps(layout)])
    if path is not None:
        _write_json(
            path,
            {
                "format": FORMAT,
                "key": list(key),
                "layout": json.dumps(layout),
                "activations": [_array_to(a) for a in resolved.activations],
                "output": _array_to(resolved.output),
            },
        )


@caches.register_disk
def clear() -> None:
    """Remove the traces, the received activations and the compiles kept on disk (the folders the explorer writes)."""
    folder = cache_dir()
    if folder is not None:
        for name in FOLDERS:
            shutil.rmtree(folder / name, ignore_errors=True)


def _write_json(path: Path, data: Any) -> None:
    """Write whole or not at all: a temporary file renamed into place; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".writing-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(json.dumps(data))  # one write of the C encoder's text: json.dump writes it chunk by chunk
        os.replace(temporary, path)
    except OSError:
        return


def _path(key: tuple, mesh_axes: tuple[str, ...]) -> Path | None:
    return _hashed_path("traces", key[0], [FORMAT, list(key), list(mesh_axes)])


def _hashed_path(folder_name: str, model_name: str, identity: list) -> Path | None:
    """A file in ``folder_name`` named by a hash of ``identity``, the library versions and the tracing sources."""
    folder = cache_dir()
    if folder is None:
        return None
    text = json.dumps([*identity, _versions(), _source_hash(model_name)])
    return folder / folder_name / (hashlib.sha256(text.encode()).hexdigest()[:32] + ".json")


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[str, ...]:
    return tuple(metadata.version(name) for name in ("jax", "jaxlib", "flax", "optax"))


@functools.lru_cache(maxsize=64)
def _source_hash(model_name: str) -> str:
    """The explorer's tracing code, where it lies and, for a factory, its module's source and path: a change makes a
    new entry. Where matters: what a trace keeps names its source files (another checkout's entries name its own).

    Read once per process and model name, as the code a process traces with is the code it imported first.
    """
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent
    digest.update(str(here).encode())
    for name in _TRACING_SOURCES:
        for file in sorted((here / name).rglob("*.py")) if (here / name).is_dir() else [here / name]:
            digest.update(file.read_bytes())
    if ":" in model_name:
        spec = importlib.util.find_spec(model_name.split(":")[0])
        if spec is not None and spec.origin and os.path.exists(spec.origin):
            digest.update(spec.origin.encode() + Path(spec.origin).read_bytes())
    return digest.hexdigest()


def _axes_to(names) -> Any:
    return None if names is None else [list(n) if isinstance(n, tuple) else n for n in names]


def _axes_from(names) -> Any:
    return None if names is None else tuple(tuple(n) if isinstance(n, list) else n for n in names)


def _array_to(array) -> dict:
    data = dataclasses.asdict(array)
    data["shape"] = list(array.shape)
    data["logical_axes"] = _axes_to(array.logical_axes)
    return data


_ARRAY_FIELDS = frozenset(f.name for f in dataclasses.fields(AbstractArray))


def _array_from(data: dict):
    if data.keys() != _ARRAY_FIELDS:
        raise KeyError("fields")
    return AbstractArray(**{**data, "shape": tuple(int(n) for n in data["shape"]), "logical_axes": _axes_from(data["logical_axes"])})


def _model_to(model) -> dict:
    return {
        "framework": model.framework,
        "state_arrays": [_array_to(a) for a in model.state_arrays],
        "inputs": [_array_to(a) for a in model.inputs],
        "activations": [_array_to(a) for a in model.activations],
        "output": _array_to(model.output),
        "loops_without_length": model.loops_without_length,
        "weight_constraints": model.weight_constraints,
        "probe_error": model.probe_error,
        "asked_names": sorted(model.asked_names),
    }


def _model_from(data: dict, key: tuple, mesh_axes: tuple[str, ...]):
    return AbstractModel(
        key=key,
        mesh_axes=mesh_axes,
        framework=str(data["framework"]),
        state_arrays=tuple(_array_from(a) for a in data["state_arrays"]),
        inputs=tuple(_array_from(a) for a in data["inputs"]),
        activations=tuple(_array_from(a) for a in data["activations"]),
        output=_array_from(data["output"]),
        loops_without_length=int(data["loops_without_length"]),
        weight_constraints=int(data["weight_constraints"]),
        probe_error=str(data["probe_error"]),
        asked_names=frozenset(str(n) for n in data["asked_names"]),
    )
