"""The team library: named layouts in a folder that everyone using the same server sees.

The folder is ``EXPLORER_LIBRARY`` or ``library/`` in the project (git-ignored).
Names are checked against a strict pattern, so no name can reach outside the folder.
Writes are atomic (a temporary file, then a hard link or rename), and a save never
silently overwrites: creating a name that exists is refused, and replacing one needs
the version the user last loaded (someone else's newer save makes it fail).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from pathlib import Path

from explorer.errors import ExplorerError
from explorer.layout import Layout, load_layout_json

LIBRARY_ENV = "EXPLORER_LIBRARY"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}$")
SUFFIX = ".json"


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    version: str  # sha256 of the file's bytes: what a later replace must match
    layout: Layout


def library_dir() -> Path:
    default = Path(__file__).resolve().parent.parent / "library"
    folder = Path(os.environ.get(LIBRARY_ENV) or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def check_name(name: str) -> str:
    """A library name: letters, digits, space, '_', '.', '-'; no path, no leading dot, at most 64."""
    if not isinstance(name, str) or not NAME.match(name) or ".." in name or name.strip() != name:
        raise ExplorerError(
            "library name", name,
            "is not allowed: use 1-64 letters, digits, spaces, '_', '.' or '-', starting with a letter or digit, no '..'",
        )
    return name


def _path(name: str, folder: Path | None = None) -> Path:
    folder = folder or library_dir()
    path = (folder / (check_name(name) + SUFFIX)).resolve()
    if path.parent != folder.resolve():
        raise ExplorerError("library name", name, "points outside the library folder")
    return path


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def names() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in library_dir().glob("*" + SUFFIX) if NAME.match(p.name[: -len(SUFFIX)]))


def load(name: str) -> Entry:
    path = _path(name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExplorerError("library name", name, "is not in the library") from None
    return Entry(name, _version(data), load_layout_json(data.decode("utf-8")))


def save(name: str, layout: Layout, replaces: str | None = None) -> Entry:
    """Save ``layout`` as ``name``.

    ``replaces=None`` creates a new entry and refuses if the name exists. To replace
    an entry, pass the version you loaded; if someone saved since, it is refused.
    """
    path = _path(name)
    data = (layout.to_json() + "\n").encode("utf-8")
    temporary = _write_temporary(path.parent, data)
    try:
        if replaces is None:
            try:
                os.link(temporary, path)  # atomic, and fails if the name exists
            except FileExistsError:
                raise ExplorerError("library name", name, "already exists; load it to replace it, or choose another name") from None
        else:
            current = load(name).version
            if current != replaces:
                raise ExplorerError("library name", name, "was changed by someone else since you loaded it; load it again first")
            os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return Entry(name, _version(data), layout)


def rename(old: str, new: str) -> None:
    source, target = _path(old), _path(new)
    if not source.exists():
        raise ExplorerError("library name", old, "is not in the library")
    try:
        os.link(source, target)
    except FileExistsError:
        raise ExplorerError("library name", new, "already exists; choose another name") from None
    source.unlink()


def delete(name: str) -> None:
    try:
        _path(name).unlink()
    except FileNotFoundError:
        raise ExplorerError("library name", name, "is not in the library") from None


def _write_temporary(folder: Path, data: bytes) -> Path:
    handle, name = tempfile.mkstemp(prefix=".saving-", suffix=".tmp", dir=folder)
    with os.fdopen(handle, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    return Path(name)
