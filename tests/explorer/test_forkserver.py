"""Children forked by a fork server (``explorer.forkserver``): what ``python -m`` would run, in the folder, environment
and streams asked for, and ended with the process that asked for them, by any signal.

What is checked is read from ``/proc`` (``tests.procfs``, no explorer code); the child is ``tests/sleeper.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from explorer import children, forkserver
from tests.paths import ROOT
from tests.procfs import descends_from, ended_within, ends_with, linux, running

pytestmark = linux


def sleeper(*arguments: str, **environ: str):
    return forkserver.start([*arguments], env={**os.environ, **environ}, cwd=ROOT, module="tests.sleeper")


def test_a_forked_child_runs_in_the_folder_environment_and_streams_asked_for_and_gives_its_exit_status(tmp_path):
    child = sleeper("0.5", "3", "EXPLORER_FORK_TEST", EXPLORER_FORK_TEST="asked", TMPDIR=str(tmp_path))
    assert isinstance(child, forkserver.ForkedChild)
    assert descends_from(child.pid, os.getpid()) and _parent(child.pid) != os.getpid()  # forked by the server, our child
    assert child.wait(timeout=60) == 3 and child.poll() == 3
    assert child.stdout.read().split() == [str(ROOT), str(tmp_path), "asked"]  # TMPDIR: tempfile's folder follows it
    assert child.stderr.read().strip() == "err"


def test_a_server_is_kept_per_environment_read_at_import_and_shared_across_the_rest():
    asked = [{"EXPLORER_CACHE_DIR": "/a"}, {"EXPLORER_CACHE_DIR": "/b"}, {"JAX_ENABLE_X64": "1"}]
    forked = [sleeper("5", **environ) for environ in asked[:2]]
    parents = [_parent(child.pid) for child in forked]  # the server that forked each, while it runs
    forked.append(sleeper("5", **asked[2]))
    parents.append(_parent(forked[2].pid))
    for child in forked:
        assert child.wait(timeout=60) == 0
    assert parents[0] == parents[1] != parents[2] and -1 not in parents


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) if running(pid) else -1


def test_stop_ends_a_forked_child_by_its_group_while_another_thread_waits_for_it():
    child = sleeper("120")
    assert child.poll() is None
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(child.wait()))
    waiter.start()
    children.stop(child, grace_s=1.0)
    waiter.join(timeout=10)
    assert child.returncode == -signal.SIGTERM and waited == [-signal.SIGTERM] and ended_within(child.pid, 5.0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_forked_child_ends_with_the_process_that_asked_for_it_by_any_signal(sig):
    code = (
        "import os\nfrom explorer import forkserver\n"
        f"child = forkserver.start(['120'], env=dict(os.environ), cwd={str(ROOT)!r}, module='tests.sleeper')\n"
        "child.stdout.readline()\n"  # it has started and writes nothing more: a broken pipe cannot be what ends it
        "print(child.pid, flush=True)\nimport time; time.sleep(120)\n"
    )
    asker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert ends_with(asker, int(asker.stdout.readline()), sig)


def test_a_fork_server_that_cannot_start_is_a_child_process_error_not_a_hang():
    """(``target_compile`` and ``placement`` turn it into one line naming the target.)"""
    with pytest.raises(ChildProcessError, match="did not start"):
        sleeper("0", PYTHONHOME="/nonexistent")  # this Python cannot start with it
