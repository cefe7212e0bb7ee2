"""libtpu's lock: no process of the explorer takes it, and a refusal that still comes from it is one message of ours.

A process that loads libtpu (a topology description counts) holds libtpu's lock file for its life, and a second one on
the machine is refused ("Internal error when accessing libtpu multi-process lockfile"), unless ``LIBTPU_SHARED`` is in
its environment before libtpu loads. Describing a TPU slice and compiling for it (all the explorer asks of libtpu) need
no lock: ``share_libtpu`` runs as ``explorer`` is imported (the command line, the app's server, a notebook, every
child), and the compile and placement children get it in their environment (``devices.child_environment``).
"""

from __future__ import annotations

import os

LIBTPU_SHARED = ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def share_libtpu() -> None:
    """Keep this process off libtpu's lock (``LIBTPU_SHARED``) unless its environment says otherwise: called as
    ``explorer`` is imported (the command line, the app's server, a notebook, every child), before libtpu loads."""
    os.environ.setdefault(*LIBTPU_SHARED)


def libtpu_refusal(error: BaseException) -> str | None:
    """Our words for libtpu refusing to load because another process holds its lock file, else None (libtpu's own
    advice, to delete the file as root, is not one for a machine its users share).

    >>> libtpu_refusal(RuntimeError('ABORTED: Internal error when accessing libtpu multi-process lockfile. Run '
    ...                             '"$ sudo rm /tmp/libtpu_lockfile".')).startswith("cannot be described here: libtpu refused")
    True
    >>> libtpu_refusal(RuntimeError("INVALID_ARGUMENT: Unknown topology")) is None
    True
    """
    if "libtpu_lockfile" not in str(error) and "libtpu multi-process lockfile" not in str(error):
        return None
    name, value = LIBTPU_SHARED
    now = os.environ.get(name)
    if now != value:
        has = f"has {name}={now!r}, which asks for it" if now is not None else f"has no {name} in its environment"
        why, fix = f"this process {has}", f"run it with {name}={value} in its environment"
    else:
        why, fix = "this process loaded libtpu before the explorer was imported", "import explorer before anything loads libtpu"
    return (
        f"cannot be described here: libtpu refused to load, as another process on this machine holds libtpu's lock and "
        f"{why}; describing a TPU slice and compiling for it need no lock: {fix}"
    )
