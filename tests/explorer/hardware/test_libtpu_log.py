"""libtpu's start-up noise off a TPU VM is dropped; every other line on stderr is kept (issue 55 item 7)."""

import os
import subprocess
import sys

from explorer.hardware import libtpu_log
from tests.paths import ROOT

# What libtpu 0.0.50 wrote on this machine (no TPU) for every TPU compile from the command line, before.
STARTUP = [
    "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please set env var "
    "`TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.",
    "WARNING: Logging before InitGoogle() is written to STDERR",
    "E0000 00:00:1795923594.458374   14274 common_lib.cc:860] INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: "
    "could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES. Expecting a valid hostname",
    "=== Source Location Trace: === ",
    "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370",
]


def test_the_startup_noise_goes_and_a_real_error_with_its_trace_stays():
    real = ["E0000 00:00:1.0 1 tpu_compiler.cc:12] RESOURCE_EXHAUSTED: out of HBM", "=== Source Location Trace: ===", "x/y.cc:3"]
    assert libtpu_log.drop_noise(STARTUP) == []
    assert libtpu_log.drop_noise(STARTUP + real + ["Traceback (most recent call last):"]) == real + ["Traceback (most recent call last):"]


def test_quiet_keeps_what_is_not_noise_on_the_process_stderr(capfd):
    with libtpu_log.quiet():
        os.write(2, ("\n".join(STARTUP) + "\nXLA: a line of its own\n").encode())
    assert capfd.readouterr().err == "XLA: a line of its own\n"


def test_describing_a_tpu_slice_says_nothing_on_stderr():
    """The first description of a slice loads libtpu in this process (the command line's placement, a MaxText config's
    mesh): a child process, so that libtpu loads there for the first time."""
    code = (
        "from explorer.hardware import devices; devices.configure()\n"
        "from explorer.hardware.targets import parse_target, tpu_topology\n"
        "print(len(tpu_topology(parse_target('v5litepod-8')).devices), len(tpu_topology(parse_target('2xv5litepod-8')).devices))\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "TPU_", "TF_CPP"))}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "16"]
    assert done.stderr == ""
