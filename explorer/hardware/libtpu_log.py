"""libtpu's start-up lines on a machine without a TPU: recognised and dropped, every other line kept.

Loading libtpu to describe a slice (``targets.tpu_topology``) or to compile for one (the compile child) makes it
look for the TPU VM it runs on. Off Cloud TPU it finds none and says so on the process's stderr, from C++:
"Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type...", an
``E0000 ... unexpected worker hostname 'WARNING: could not determine TPU worker hostnames...'`` error with its
source-location trace, and glog's "Logging before InitGoogle()". None of them concerns the slice described or the
compile: the topology is named, not looked up. ``quiet`` keeps them off this process's stderr and ``drop_noise``
out of a compile child's lines; anything else libtpu (or XLA) writes passes through as written.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Iterable, Iterator

# Each pattern is one line libtpu writes when it finds no TPU VM around it (libtpu 0.0.50, jax 0.12).
NOISE = (
    re.compile(r"^Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type\b"),
    re.compile(r"^WARNING: Logging before InitGoogle\(\) is written to STDERR$"),
    re.compile(r"^E\d{4} .*\] INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: could not determine TPU worker hostnames"),
)
# The source-location trace libtpu prints under an error of its own: dropped with the error it follows.
TRACE_HEADER = "=== Source Location Trace: ==="
TRACE_LINE = re.compile(r"^\S+\.(?:cc|h):\d+$")

_QUIET = threading.Lock()  # one capture of the process's stderr at a time
# Set in a child whose parent reads its stderr (``devices.child_environment``): the parent drops the noise itself
READ_BY_PARENT = "EXPLORER_STDERR_READ_BY_PARENT"


def drop_noise(lines: Iterable[str]) -> list[str]:
    """``lines`` without libtpu's start-up noise (and the source-location trace under a dropped error).

    >>> drop_noise(["WARNING: Logging before InitGoogle() is written to STDERR",
    ...             "E0000 00:00:1795923594.458374   14274 common_lib.cc:860] INVALID_ARGUMENT: Error: unexpected worker "
    ...             "hostname 'WARNING: could not determine TPU worker hostnames or IP addresses' from env var",
    ...             "=== Source Location Trace: ===", "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370",
    ...             "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm."])
    ['RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm.']
    """
    kept: list[str] = []
    in_trace = False
    for line in lines:
        text = line.rstrip()
        if any(pattern.match(text) for pattern in NOISE):
            in_trace = True  # a trace may follow
            continue
        if in_trace and (text == TRACE_HEADER or TRACE_LINE.match(text)):
            continue
        in_trace = False
        kept.append(line)
    return kept


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Around a call that may load libtpu in this process: what is written on file descriptor 2 meanwhile (by
    libtpu's C++ or anything else) is held, then written out without libtpu's start-up noise. Not in a child whose
    parent reads its stderr (``READ_BY_PARENT``; the parent drops the noise with ``drop_noise``): libtpu ends the
    process as it loads for a flag it does not know, and a line held here then would never be written."""
    if os.environ.get(READ_BY_PARENT) == "1":
        yield
        return
    with _QUIET, tempfile.TemporaryFile() as held:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            kept = drop_noise(text.splitlines(keepends=True))
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
