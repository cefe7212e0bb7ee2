"""A child the explorer starts ends with the process that started it, by any signal, and not before.

What is checked is read from ``/proc`` (a process that is gone or a zombie no longer runs), with no explorer code in
the checking; the parents here are small scripts that start a child the way the explorer does (``children.start``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from explorer import children
from tests.paths import ROOT
from tests.procfs import ends_with, linux

SLEEPER = [sys.executable, "-c", "import explorer, time; time.sleep(120)"]  # a child that imports explorer, as all ours do


def parent_with_a_child(child: list[str] = SLEEPER) -> tuple[subprocess.Popen, int]:
    """A parent process that starts ``child`` with ``children.start`` from a thread that ends a second later, once the
    child is past its start (as a page's run of the app and the compile pool's workers do), and says the child's id."""
    code = (
        "import threading, time\nfrom explorer import children\nbox = []\n"
        f"thread = threading.Thread(target=lambda: box.append(children.start({child!r}, cwd={str(ROOT)!r})) or time.sleep(1.0))\n"
        "thread.start(); thread.join()\nprint(box[0].pid, flush=True)\ntime.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return parent, int(parent.stdout.readline())


def ends_with_its_parent(sig: signal.Signals, child: list[str] = SLEEPER) -> bool:
    """Whether ``child``, started by a parent as above, still runs after that thread ended and is gone 5 s after ``sig``
    ended the parent."""
    parent, pid = parent_with_a_child(child)
    time.sleep(0.5)  # the thread that asked for it has ended: the child must still run
    return ends_with(parent, pid, sig)


@linux
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_child_ends_with_its_parent_by_any_signal(sig):
    assert ends_with_its_parent(sig)


@linux
def test_without_prctl_the_childs_watch_ends_it():
    """Where Linux's parent-death signal is not there (other systems), the child's thread watching its parent's id ends
    it: this child is told it runs elsewhere before it imports explorer, so only the watch is left."""
    assert ends_with_its_parent(signal.SIGKILL, [sys.executable, "-c", "import sys; sys.platform = 'darwin'\n" + SLEEPER[2]])


def test_a_child_whose_parent_is_already_gone_ends_at_once():
    """The parent died between the fork and the child's first line: the id the child was given is not its parent's."""
    not_the_parent = str(os.getpid() + 1_000_000)
    done = subprocess.run(SLEEPER, env=dict(os.environ, **{children.PARENT_ENV: not_the_parent}), cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGKILL


def test_a_child_started_from_a_thread_that_ended_keeps_running_and_stops_with_its_group():
    box = []
    thread = threading.Thread(target=lambda: box.append(children.start(SLEEPER, cwd=ROOT)) or time.sleep(1.0))
    thread.start()
    thread.join()  # the thread ended once the child was past its start (explorer imported)
    child = box[0]
    time.sleep(0.5)
    assert child.poll() is None
    children.stop(child, grace_s=1.0)
    assert child.returncode == -signal.SIGTERM


def test_run_gives_the_output_and_kills_a_child_past_its_timeout():
    done = children.run([sys.executable, "-c", "import explorer; print('ok')"], cwd=ROOT)
    assert (done.returncode, done.stdout.strip()) == (0, "ok")
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(SLEEPER, cwd=ROOT, timeout=1.0)
