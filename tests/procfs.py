"""What runs on this machine, read from Linux's /proc with no explorer code: a process's state, its environment, the
libraries it has loaded. The tests of processes that must end (tests/explorer/test_children.py, tests/test_orphans.py)
and of libtpu's lock (tests/test_at_once.py, tests/explorer/hardware/test_libtpu.py), and the Ray node-kill test
(tests/explorer/compile/test_cluster.py) read them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, which only Linux has")
MARK = "EXPLORER_TEST_MARK"  # a test puts this in a command's environment; everything that command starts inherits it


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (state, parent's pid, ...); [] once it ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return []


def running(pid: int) -> bool:
    """The process exists and is not a zombie (dead, waiting to be reaped)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is ``pid``'s parent, its parent's parent, ... (False once it ended)."""
    while pid > 1:
        fields = _stat_fields(pid)
        if len(fields) < 2:
            return False
        pid = int(fields[1])
        if pid == ancestor:
            return True
    return False


def ended_within(pid: int, seconds: float) -> bool:
    """Whether the process stops running within ``seconds``."""
    deadline = time.monotonic() + seconds
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:  # gone meanwhile, or not ours to read
        return b""


def ends_with(asker: subprocess.Popen, pid: int, sig: signal.Signals, seconds: float = 5.0) -> bool:
    """Whether process ``pid`` runs now and is gone within ``seconds`` after ``sig`` ended ``asker`` (the process that
    started it); both are killed at the end, whatever happened."""
    try:
        if not running(pid):
            return False
        os.kill(asker.pid, sig)
        asker.wait()
        return ended_within(pid, seconds)
    finally:
        asker.kill()
        asker.wait()
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def marked(mark: str) -> list[int]:
    """The running processes whose environment carries ``MARK=mark``: a command and every process it started."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and needle in _read(f"/proc/{entry}/environ").split(b"\0") and running(int(entry)):
            found.append(int(entry))
    return found


def command_line(pid: int) -> list[str]:
    return [part.decode(errors="replace") for part in _read(f"/proc/{pid}/cmdline").split(b"\0") if part]


def loaded(pid: int, library: str) -> bool:
    """Whether the process has ``library`` (a file name such as ``libtpu.so``) mapped."""
    return any(line.endswith(f"/{library}") for line in _read(f"/proc/{pid}/maps").decode(errors="replace").splitlines())


def wait_for(condition, seconds: float, what: str):
    """``condition()``'s first true value within ``seconds``, else a failure naming ``what``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.1)


LIBTPU_LOCK = "/tmp/libtpu_lockfile"  # libtpu's lock file, as its refusal names it


def holds_libtpu_lock(pid: int) -> bool:
    """Whether the process holds a lock on libtpu's lock file (/proc/locks: each lock's holder and its file's inode)."""
    try:
        inode = os.stat(LIBTPU_LOCK).st_ino
    except FileNotFoundError:
        return False  # no process has ever asked for it
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[4] == str(pid) and fields[5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False
