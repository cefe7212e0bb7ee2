"""Compile children forked from a process that has imported JAX, Flax and optax once: a fork server.

A compile child (``python -m explorer ... compile ... --in-process``) spends about 2 CPU-s, and as many seconds before
its first stage, importing JAX, Flax and optax; a placement child (``python -m explorer.hardware.placement``) about 1.
A process that starts many of them (the app's server, the advisor's compile pool, a test worker) asks a fork server of
its own instead: a child process (``children.start``: it dies with this process) that imported them once, before any
backend started, and forks one child per request. The forked child runs what ``python -m MODULE ARGS`` runs, in the
environment, folder and standard streams it was given, and its exit status comes back over the request's socket. ``start`` returns it as a ``ForkedChild``, which ``children.stop`` ends
like any child.

- A forked child dies with its fork server (``PR_SET_PDEATHSIG``, set in the child, whose parent is the server's one
  thread), and the server with the process that started it (``children.follow_parent``): the chain keeps
  ``children``' promise, by any signal. It has a session of its own (``children.stop`` ends its process group).
- A server is chosen by its environment less the variables read only when used (``read_when_used``: the explorer's
  own, pytest's, ``TMPDIR``), so that JAX's configuration, read as JAX is imported, is the one the child asked for; the
  whole environment is applied in the child before it runs. Each process keeps at most ``SERVERS`` servers; an idle one
  makes room.
- Linux only (``os.fork``, ``prctl``, file descriptors over a Unix socket); elsewhere ``start`` is ``children.start``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any, Sequence

from explorer import children

SERVERS = 3  # fork servers kept per process (each holds JAX, Flax and optax imported: about 200 MB resident here)
PRELOAD = ("jax", "flax.linen", "flax.nnx", "optax", "explorer.compile.xla_compile", "explorer.compile.target_compile")
_READ_WHEN_USED_PREFIXES = ("EXPLORER_", "PYTEST_")
_READ_WHEN_USED = ("TMPDIR", children.PARENT_ENV)


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


def read_when_used(name: str) -> bool:
    """Variables that no module the server imports reads as it is imported: the explorer's own (read when used),
    pytest's (its current test's name), ``TMPDIR`` (``tempfile`` forgets its folder in the child)."""
    return name.startswith(_READ_WHEN_USED_PREFIXES) or name in _READ_WHEN_USED


def start(
    arguments: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike, module: str = "explorer"
) -> subprocess.Popen | "ForkedChild":
    """``python -m MODULE *arguments`` in ``cwd`` under ``env``, its stdout and stderr piped (text): forked by this
    process's fork server for that environment, or (elsewhere than Linux) started by ``children.start``.
    ``ChildProcessError`` where the fork server could not start or ended before it forked."""
    if not available():
        command = [sys.executable, "-m", module, *arguments]
        return children.start(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return _server_for(env).fork(module, list(arguments), env, os.fspath(cwd))


def run(
    arguments: Sequence[str], *, env: dict[str, str], cwd: str | os.PathLike, module: str, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """``start``, followed to its end (``children.finish``: as ``children.run``)."""
    return children.finish(start(arguments, env=env, cwd=cwd, module=module), timeout)


class ForkedChild:
    """A child forked by a fork server, as much of ``subprocess.Popen`` as the explorer uses: ``args``, ``pid``,
    ``stdout`` and ``stderr`` (text), ``poll``, ``wait``, ``returncode``."""

    def __init__(self, args: list[str], pid: int, connection: socket.socket, stdout: IO[str], stderr: IO[str], told: bytes = b""):
        self.args, self.pid, self.stdout, self.stderr = args, pid, stdout, stderr
        self.returncode: int | None = None
        self._connection = connection
        connection.setblocking(False)
        self._buffer = told  # what the server said after the child's id (its exit status, once it has ended)
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._status(0.0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._status(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return status

    def _status(self, timeout: float | None) -> int | None:
        """The exit status the server sends once it has reaped the child (its ``waitpid``); a server that is gone took
        the child with it (SIGKILL). No lock is held while waiting: another thread may ``children.stop`` the child."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self.returncode is not None:
                    return self.returncode
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    chunk = self._connection.recv(4096)
                    self._buffer += chunk if chunk else json.dumps({"returncode": -signal.SIGKILL}).encode() + b"\n"
                if b"\n" in self._buffer:
                    self.returncode = int(json.loads(self._buffer.split(b"\n", 1)[0])["returncode"])
                    self._connection.close()
                    return self.returncode
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            with contextlib.suppress(OSError, ValueError):  # closed by another thread meanwhile: read again above
                select.select([self._connection], [], [], 0.5 if left is None else min(left, 0.5))


class _Server:
    """One fork server: its process, the socket its requests go over (one message each, with the child's stdout, stderr
    and the socket its id and exit status come back on), and the children it forked."""

    def __init__(self, env: dict[str, str]):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = children.start(
                [sys.executable, "-m", "explorer.forkserver", str(theirs.fileno())],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=[theirs.fileno()],
            )
        finally:
            theirs.close()
        ready = self.process.stdout.readline().strip()
        if ready != "ready":
            children.stop(self.process)
            raise ChildProcessError(f"the fork server did not start: {ready or f'it exited with {self.process.returncode}'}")
        self.forked: list[ForkedChild] = []
        self.used = time.monotonic()
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.poll() is None

    def idle(self) -> bool:
        self.forked = [child for child in self.forked if child.poll() is None]
        return not self.forked

    def fork(self, module: str, arguments: list[str], env: dict[str, str], cwd: str) -> ForkedChild:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        reply, theirs = socket.socketpair()
        request = json.dumps({"module": module, "arguments": arguments, "env": env, "cwd": cwd}).encode()
        try:
            with self._lock:
                socket.send_fds(self.control, [request], [out_write, err_write, theirs.fileno()])
        except BaseException:
            _close(reply, out_read, err_read)
            raise
        finally:
            theirs.close()
            os.close(out_write)
            os.close(err_write)
        told = b""
        while not told.endswith(b"\n"):
            chunk = reply.recv(64)
            if not chunk:
                _close(reply, out_read, err_read)
                raise ChildProcessError("the fork server ended before it forked the child")
            told += chunk
        first, _, rest = told.partition(b"\n")
        stdout, stderr = open(out_read, errors="replace"), open(err_read, errors="replace")
        child = ForkedChild([sys.executable, "-m", module, *arguments], int(json.loads(first)["pid"]), reply, stdout, stderr, rest)
        self.forked.append(child)
        return child

    def stop(self) -> None:
        children.stop(self.process)
        self.control.close()


def _close(reply: socket.socket, *fds: int) -> None:
    reply.close()
    for fd in fds:
        os.close(fd)


_SERVERS: dict[tuple[int, tuple], _Server] = {}
_LOCK = threading.Lock()


def _server_for(env: dict[str, str]) -> _Server:
    """This process's fork server for ``env`` (by the variables read at import: ``read_when_used``), started if need be;
    at most ``SERVERS`` of them, the least recently used idle one stopped to make room (none is stopped while a child
    of it runs: the child would die with it)."""
    key = (os.getpid(), tuple(sorted((k, v) for k, v in env.items() if not read_when_used(k))))
    with _LOCK:
        server = _SERVERS.get(key)
        if server is not None and not server.alive():
            del _SERVERS[key]
            server = None
        if server is None:
            idle = [k for k, s in _SERVERS.items() if k[0] == os.getpid() and s.idle()]
            if idle and sum(k[0] == os.getpid() for k in _SERVERS) >= SERVERS:
                _SERVERS.pop(min(idle, key=lambda k: _SERVERS[k].used)).stop()
            server = _SERVERS[key] = _Server(env)  # the whole of the first asker's: what /proc shows of its children
        server.used = time.monotonic()
        return server


# --- the server ------------------------------------------------------------------------------------------------------


def serve(control_fd: int) -> None:
    """Import ``PRELOAD`` (none of them starts a JAX backend, which would not survive a fork: JAX warns if one has),
    say ``ready`` on stdout, and fork a child per request on the control socket until it closes (the process that
    started this one ended) or this process's parent dies (``children.follow_parent``, as ``explorer`` is imported)."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    control = socket.socket(fileno=control_fd)
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}  # child id -> the socket its exit status goes back on
    while True:
        if select.select([control], [], [], 0.05)[0]:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            if not message:
                return  # the process that started this one closed its end
            if len(fds) == 3:
                reply = socket.socket(fileno=fds[2])
                pid = _fork_one(json.loads(message), fds[:2], reply, [control, *waiting.values()])
                waiting[pid] = reply
            else:
                for fd in fds:
                    os.close(fd)
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reply = waiting.pop(pid, None)
            if reply is not None:
                with contextlib.suppress(OSError):
                    reply.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                reply.close()


def _fork_one(request: dict[str, Any], fds: list[int], reply: socket.socket, held: list[socket.socket]) -> int:
    """Fork the request's child (its stdout and stderr ``fds``) and tell the asker its id on ``reply``; the child
    closes ``reply`` and the server's other sockets (``held``: the control socket, the other children's replies)."""
    server = os.getpid()
    settled_read, settled_write = os.pipe()  # closed by the child once it has its session and dies with the server
    pid = os.fork()
    if pid == 0:
        try:
            for end in (reply, *held):
                end.close()
            os.close(settled_read)
            _become_child(request, fds, server, settled_write)
        finally:
            os._exit(70)  # _become_child exits itself; reaching here means it failed before running the command
    for fd in (*fds, settled_write):
        os.close(fd)
    os.read(settled_read, 1)  # its id is told once ``children.stop`` can end its group (as Popen returns after the exec)
    os.close(settled_read)
    with contextlib.suppress(OSError):
        reply.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def _become_child(request: dict[str, Any], fds: list[int], server: int, settled: int) -> None:
    """In the forked child: die with the server, a session of its own (then ``settled`` is closed), the request's
    streams, folder and environment; then ``python -m MODULE ARGUMENTS``, and exit with its status."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(children.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:  # the server died before the prctl
        os.kill(os.getpid(), signal.SIGKILL)
    os.setsid()
    os.close(settled)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (null, *fds):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(children.PARENT_ENV, None)
    tempfile.tempdir = None  # tempfile keeps the folder it first found: this child's TMPDIR may differ
    import runpy

    sys.argv = [sys.executable, *request["arguments"]]
    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, (int, type(None))):
            print(done.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
