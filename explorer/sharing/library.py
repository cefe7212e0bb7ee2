"""The team library: named layouts in a folder that everyone using the same server sees.

The folder is ``EXPLORER_LIBRARY`` or ``library/`` in the project (git-ignored).
Names are checked against a strict pattern, so no name can reach outside the folder.

Every change (save, replace, rename, delete) holds an exclusive ``fcntl.flock`` on
``.lock`` in the folder from its check to its last file operation, so two servers or
sessions racing on one name cannot both win: creating a name that exists is refused,
replacing one needs the version the user last loaded (someone else's newer save makes
it fail), and a rename or delete of a name someone just moved is refused with a message.
Contents are written to a temporary file first (only while holding the lock, so any
temporary found under the lock was left by a writer that died, and is removed), then
linked or renamed into place, so a reader never sees half a file.

Only regular files named ``<name>.json`` are entries. Anything else there (a symlink,
a folder, a FIFO, a file whose name is not a library name) is skipped, reported by
``listing()``, and never followed, opened or changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from explorer.hardware.devices import PROJECT_ROOT
from explorer.errors import ExplorerError
from explorer.layout import MAX_FILE_BYTES, Layout, load_layout_bytes

LIBRARY_ENV = "EXPLORER_LIBRARY"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}")  # always re.fullmatch
SUFFIX = ".json"
LOCK = ".lock"
TEMPORARY_PREFIX, TEMPORARY_SUFFIX = ".saving-", ".tmp"


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    version: str  # sha256 of the file's bytes: what a later replace must match
    layout: Layout


@dataclasses.dataclass(frozen=True)
class Listing:
    """The library's entries, and what else lies in the folder under ``*.json`` and why it is skipped."""

    names: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (file name as repr, reason)


def library_dir() -> Path:
    """The library folder (created if missing); ExplorerError if it cannot be one."""
    configured = os.environ.get(LIBRARY_ENV)
    folder = Path(configured) if configured else PROJECT_ROOT / "library"
    field = LIBRARY_ENV if configured else "library folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder")
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "no permission to read and write it")
    except (OSError, ValueError) as error:  # ValueError: a path with a NUL byte
        reason = getattr(error, "strerror", None) or str(error)
        raise ExplorerError(field, str(folder), f"cannot be used as the team library ({reason})") from None
    return folder.resolve()


def check_name(name: str) -> str:
    """A library name: letters, digits, space, '_', '.', '-'; no path, no leading dot, at most 64."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name or name.strip() != name:
        raise ExplorerError(
            "library name",
            name,
            "is not allowed: use 1-64 letters, digits, spaces, '_', '.' or '-', starting with a letter or digit, no '..'",
        )
    return name


def _path(name: str, folder: Path) -> Path:
    """The entry's path, never resolved: a symlink stays a symlink (and is refused), not its target."""
    return folder / (check_name(name) + SUFFIX)


def _version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def listing() -> Listing:
    """Entries (regular files with a library name) and the ``*.json`` things skipped, with reasons."""
    folder = library_dir()
    names, skipped = [], []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or entry.name.startswith("."):
                continue
            name = entry.name[: -len(SUFFIX)]
            reason = _not_an_entry(entry, name)
            if reason:
                skipped.append((repr(entry.name), reason))
            else:
                names.append(name)
    return Listing(tuple(sorted(names)), tuple(sorted(skipped)))


def _not_an_entry(entry: os.DirEntry, name: str) -> str | None:
    try:
        check_name(name)
    except ExplorerError:
        return "its name is not a library name"
    try:
        if entry.is_symlink():
            return "it is a symbolic link (never followed)"
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    if not stat.S_ISREG(mode):
        return "it is a folder" if stat.S_ISDIR(mode) else "it is not a regular file"
    return None


def names() -> list[str]:
    return list(listing().names)


def load(name: str) -> Entry:
    data = _read_entry(_path(name, library_dir()), name)
    return Entry(name, _version(data), load_layout_bytes(data, f"library entry {name!r}"))


def _read_entry(path: Path, name: str) -> bytes:
    """The entry's bytes; refused (never blocking, never following) unless it is a regular file."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ExplorerError("library name", name, "is not in the library") from None
    except OSError as error:
        reason = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be read ({error.strerror})"
        raise ExplorerError("library entry", name, reason) from None
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise ExplorerError("library entry", name, "is not a regular file")
    with os.fdopen(handle, "rb") as stream:
        return stream.read(MAX_FILE_BYTES + 1)


def _require_entry(path: Path, name: str) -> None:
    """Refuse unless ``path`` is a regular file (a symlink is not, whatever it points at)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise ExplorerError("library name", name, "is not in the library") from None
    if not stat.S_ISREG(mode):
        raise ExplorerError("library entry", name, "is not a regular file (a link, folder or device); it is left alone")


def save(name: str, layout: Layout, replaces: str | None = None) -> Entry:
    """Save ``layout`` as ``name``.

    ``replaces=None`` creates a new entry and refuses if the name exists. To replace
    an entry, pass the version you loaded; if someone saved since, it is refused.
    """
    folder = library_dir()
    path = _path(name, folder)
    data = (layout.to_json() + "\n").encode("utf-8")
    with _locked(folder):
        if replaces is None and os.path.lexists(path):
            raise ExplorerError("library name", name, "already exists; load it to replace it, or choose another name")
        if replaces is not None:
            _require_entry(path, name)
            if _version(_read_entry(path, name)) != replaces:
                raise ExplorerError("library name", name, "was changed by someone else since you loaded it; load it again first")
        temporary = _write_temporary(folder, data)
        try:
            os.replace(temporary, path)
        finally:
            if temporary.exists():
                temporary.unlink()
    return Entry(name, _version(data), layout)


def rename(old: str, new: str) -> None:
    folder = library_dir()
    source, target = _path(old, folder), _path(new, folder)
    with _locked(folder):
        _require_entry(source, old)
        if os.path.lexists(target):
            raise ExplorerError("library name", new, "already exists; choose another name")
        os.rename(source, target)


def delete(name: str) -> None:
    folder = library_dir()
    path = _path(name, folder)
    with _locked(folder):
        _require_entry(path, name)
        path.unlink()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the library's exclusive lock; remove temporaries that writers which died left behind."""
    try:
        handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise ExplorerError("library folder", str(folder), f"cannot be locked for writing ({error.strerror})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        for stale in folder.glob(TEMPORARY_PREFIX + "*" + TEMPORARY_SUFFIX):
            with contextlib.suppress(OSError):
                stale.unlink()
        yield
    finally:
        os.close(handle)  # closing releases the lock


def _write_temporary(folder: Path, data: bytes) -> Path:
    handle, name = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, suffix=TEMPORARY_SUFFIX, dir=folder)
    with os.fdopen(handle, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    return Path(name)
