"""The disk cache of target compiles: one JSON file per (layout, target, library versions).

This module's one job is keeping compile results between processes (the compile itself runs in a
child process, ``target_compile``): ``cached`` reads a result back, judged again for this environment
(``xla_results.with_verdict``: the GPU memory fraction may differ from where it was compiled), and
``store`` writes one atomically. The files live under the explorer's cache folder
(``reading.disk.cache_dir``), in ``compiles/``; a corrupt file is dropped and counts as a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import tempfile

from explorer.compile.compile_result import TargetCompile
from explorer.layout import Layout
from explorer.hardware.devices import PROJECT_ROOT, compile_flags
from explorer.hardware.targets import Target
from explorer.compile.xla_results import with_verdict

CACHE_FORMAT = 11  # bump when the result's shape or meaning changes (4: written by TargetCompile.to_json; 5: predicted_s;
# 6: collectives' sources; 7: compiled_at; 8: slices, DCN; 9: a MegaScale send's line through the bitcast it moves;
# 10: the flags it ran under, MaxText's own train step for a maxtext layout; 11: memory_breakdown)


def versions() -> dict[str, str]:
    found = {}
    for package in ("jax", "jaxlib", "libtpu", "jax-cuda13-plugin", "flax", "optax"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def cache_key(layout: Layout, target: Target, flags: dict[str, str] | None = None) -> str:
    """The identity of a compile: the layout (``Layout.key``), the target's topology, the library versions and the flags
    its compiler runs under (``devices.compile_flags``, this process's by default): two compiles that differ only in
    LIBTPU_INIT_ARGS or XLA_FLAGS are two programs, and two entries. And the checkout compiling it: a result names
    its source lines by file, and another checkout's files are not this one's."""
    identity = json.dumps(
        {
            "layout": layout.key,
            "topology": target.topology,
            "versions": versions(),
            "format": CACHE_FORMAT,
            "flags": compile_flags(target) if flags is None else flags,
            "code": factory_source(layout),
            "checkout": str(PROJECT_ROOT),  # a result names the model's source files, which lie in this checkout
        },
        sort_keys=True,
    )
    return hashlib.sha256(identity.encode()).hexdigest()


def factory_source(layout: Layout) -> str:
    """The SHA-256 of the file that holds a user's factory (a step's, ``options.factory``, or a model's), "" for the
    explorer's own models: a user edits their step and compiles again, and must not be answered with the program of
    the code before the edit. The module is found, not imported (``importlib.util.find_spec``); code it imports from
    other files is not part of the key."""
    import importlib.util

    from explorer.models import STEP, is_factory

    name = (
        layout.model.options.get("factory") if layout.model.name == STEP else layout.model.name if is_factory(layout.model.name) else None
    )
    if not isinstance(name, str) or ":" not in name:
        return ""
    try:
        origin = importlib.util.find_spec(name.split(":")[0]).origin
        with open(origin, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (ImportError, AttributeError, ValueError, TypeError, OSError):  # not found here: the compile says so
        return ""


def _cache_path(key: str) -> str | None:
    """Where a compile's result is kept, under the explorer's cache folder (``trace_cache.cache_dir``); None when off."""
    from explorer.reading.disk import cache_dir

    folder = cache_dir()
    return None if folder is None else os.path.join(folder, "compiles", key + ".json")


def cache_folder() -> str | None:
    """The folder the compile results are kept in (None: the cache is off), to tell a user where a result came from."""
    path = _cache_path("")
    return None if path is None else os.path.dirname(path)


def cached(layout: Layout, target: Target) -> TargetCompile | None:
    """The cached result for (layout, target, versions), or None; a corrupt entry is dropped."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return None
    try:
        with open(path) as handle:
            result = TargetCompile.from_json(json.load(handle))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not a result (a writer that died half-way)
        with contextlib.suppress(OSError):
            os.remove(path)
        return None
    return with_verdict(result, target)


def store(layout: Layout, target: Target, result: TargetCompile) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``; concurrent writers both win."""
    path = _cache_path(cache_key(layout, target))
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(result.to_json(), out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
