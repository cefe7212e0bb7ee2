"""Child processes that end with the process that started them: the one way the explorer starts one, and the child's half.

Every child process the explorer starts (a compile, a placement, a timing worker, a Ray task's compile) is started by
``start`` or ``run`` (a compile or a placement: forked by a fork server so started, ``explorer.forkserver``): in a
session of its own (so that ``stop`` ends it and whatever it started, as Stop does), with
this process's id in its environment (``PARENT_ENV``). Each of them is the explorer's own Python, and imports
``explorer`` first; the package's ``__init__`` calls ``follow_parent``, which in a child so started:

- asks Linux to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``), by any signal, SIGKILL included;
- exits at once where the parent died before that (between the fork and the ``prctl``);
- where ``prctl`` is not there (other systems), watches its parent's id from a thread every ``WATCH_S`` (XLA's compile
  lets the thread run: its longest pause in a 26 s TPU compile was 0.10 s, measured here).

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child ends, not the process. The app's server and the
compile pool ask for children from threads that end (a page's run, a compile's worker), so every child is forked by one
thread of this process that lives as long as the process does (``_SPAWNER``), whatever thread asks.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

PARENT_ENV = "EXPLORER_PARENT_PID"  # set by ``start`` for the child; read (and removed) by the child's ``follow_parent``
WATCH_S = 0.5
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_SPAWNER: dict[int, concurrent.futures.ThreadPoolExecutor] = {}  # this process's id -> the thread that forks (a fork's
_SPAWNER_LOCK = threading.Lock()  # child process gets its own)


def on_spawner(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` run on the thread that forks every child of this process (one that lives as long as
    the process): for ``start``, and for a library that starts processes of its own bound to the thread that forked
    them (Ray's ``ray.init`` of a local cluster)."""
    with _SPAWNER_LOCK:
        spawner = _SPAWNER.get(os.getpid())
        if spawner is None:
            spawner = _SPAWNER[os.getpid()] = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="explorer-spawner")
    return spawner.submit(function, *args, **kwargs).result()


def start(command: Sequence[str], *, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(command, ...)`` for a child that ends with this process: in a session of its own, forked by the
    spawner thread, told this process's id (``PARENT_ENV``; ``env`` defaults to this process's environment)."""
    environment = dict(os.environ if env is None else env)
    environment[PARENT_ENV] = str(os.getpid())
    popen.setdefault("stdin", subprocess.DEVNULL)  # a child never reads this process's input (a terminal, a server's)
    return on_spawner(subprocess.Popen, list(command), env=environment, start_new_session=True, **popen)


def run(command: Sequence[str], *, timeout: float | None = None, **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True)`` through ``start`` (``finish``)."""
    return finish(start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen), timeout)


def finish(child: Any, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``child`` (started with its stdout and stderr as text pipes: a ``subprocess.Popen`` or a fork server's child)
    followed to its end: its output, read as it runs, and its exit status. The child (and its process group) is killed
    when this thread is interrupted or ``timeout`` passes (then ``subprocess.TimeoutExpired``)."""
    output: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda name, stream: output.__setitem__(name, stream.read()), args=(name, stream), daemon=True)
        for name, stream in (("stdout", child.stdout), ("stderr", child.stderr))
    ]
    for reader in readers:
        reader.start()
    try:
        child.wait(timeout=timeout)
    except BaseException:
        stop(child)
        raise
    for reader in readers:
        reader.join()
    return subprocess.CompletedProcess(child.args, child.returncode, output.get("stdout", ""), output.get("stderr", ""))


def stop(*children: subprocess.Popen, grace_s: float = 0.0) -> None:
    """End each child's process group and reap it: SIGTERM first and SIGKILL for what is left after ``grace_s``
    (SIGKILL at once without a grace)."""
    running = [child for child in children if child.poll() is None]
    if grace_s > 0:
        for child in running:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
    for child in running:
        if child.poll() is None:
            _signal_group(child, signal.SIGKILL)
        child.wait()


def _signal_group(child: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)


# --- in the child -------------------------------------------------------------------------------------------------


def follow_parent() -> None:
    """In a process ``start`` started (``PARENT_ENV`` set): die with the parent (see the module's docstring); else
    nothing. The variable is removed, so that what this process starts by other means does not inherit it."""
    raw = os.environ.pop(PARENT_ENV, None)
    if not raw or not raw.isdigit():
        return
    parent = int(raw)
    asked = False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            asked = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:  # it died before the prctl
        _end_self()
    if not asked:  # no thread where Linux kills it (a fork server forks from a process of one Python thread)
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="explorer-parent-watch").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    _end_self()


def _end_self() -> None:
    """SIGKILL this process (what the parent's death would have sent): no handler, no cleanup that could hang."""
    os.kill(os.getpid(), signal.SIGKILL)
