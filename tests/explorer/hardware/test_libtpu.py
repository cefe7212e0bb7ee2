"""libtpu's lock (``explorer/hardware/libtpu.py``): with another process holding it, the explorer still describes a TPU
slice; a process that asks for the lock anyway gets one line of ours, not libtpu's advice to delete files as root.

The holder is plain JAX with no explorer code, loading libtpu as any process does by default (asking for the lock).
"""

from __future__ import annotations

import os
import subprocess
import sys

from explorer.hardware.libtpu import LIBTPU_SHARED
from tests.paths import ROOT
from tests.procfs import linux

HOLDER = """
import os, sys
os.environ.pop("ALLOW_MULTIPLE_LIBTPU_LOAD", None)
os.environ["JAX_PLATFORMS"] = "cpu"
from jax.experimental import topologies
try:
    topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
except Exception:  # another process holds the lock already: it is held all the same
    pass
print("held", flush=True)
sys.stdin.readline()
"""
# A process of the explorer describing a v5e-8 (the first argument: its ALLOW_MULTIPLE_LIBTPU_LOAD, "-" for none given)
DESCRIBE = """
import os, sys
if sys.argv[1] != "-":
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = sys.argv[1]
import explorer
from explorer.hardware.targets import parse_target, tpu_topology
try:
    print(len(tpu_topology(parse_target("v5e-8")).devices))
except explorer.ExplorerError as error:
    print(error)
"""


def describe(allow: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != LIBTPU_SHARED[0]}
    done = subprocess.run([sys.executable, "-c", DESCRIBE, allow], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@linux
def test_with_the_lock_held_elsewhere_the_explorer_describes_a_slice_and_a_refusal_is_one_line_of_ours():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert describe("-") == "8"  # the explorer's own setting: no lock asked for
        refused = describe("0")  # a user's environment that asks for it
        assert refused == (
            "target: 'v5e-8' cannot be described here: libtpu refused to load, as another process on this machine holds "
            "libtpu's lock and this process has ALLOW_MULTIPLE_LIBTPU_LOAD='0', which asks for it; describing a TPU slice "
            "and compiling for it need no lock: run it with ALLOW_MULTIPLE_LIBTPU_LOAD=1 in its environment"
        )
    finally:
        holder.kill()
        holder.wait()
