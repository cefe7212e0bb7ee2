"""Kernels of a TPU program that are not XLA fusions, costed by the step model: a Pallas (Mosaic) kernel and host
offload's transfers.

The programs are compiled for a v5e topology by libtpu in a child process (``tests/tpu_programs.py``, which imports
no explorer code); the figures they are checked against are the programs' own: the cost estimate the kernel was
given, the shapes of q and k, the bytes of the offloaded activation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from explorer.predict import step_model
from explorer.hardware.accelerators import CHIPS
from explorer.predict.step_rates import TPU_HOST_BANDWIDTH, rates
from tests import tpu_programs

V5E = CHIPS["v5e"]


@pytest.fixture(scope="module")
def programs() -> dict[str, str]:
    """The programs' optimized HLO text, compiled in one child process (libtpu's lock: one loader per process)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "tests.tpu_programs", *tpu_programs.PROGRAMS]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def pallas_kernel(text: str) -> step_model.Kernel:
    (kernel,) = [k for k in step_model.kernels(text, V5E) if k.flops or k.bytes]
    return kernel


def test_a_pallas_kernel_costs_the_estimate_it_carries(programs):
    kernel = pallas_kernel(programs["attention"])
    assert (kernel.kind, kernel.flops, kernel.bytes, kernel.dtype) == ("matmul", tpu_programs.FLOPS, tpu_programs.BYTES, "bf16")
    device = rates(V5E)
    compute, memory = kernel.flops / device.matmul_rate("bf16"), kernel.bytes / device.hbm_bandwidth
    assert kernel.seconds == pytest.approx(compute + memory - step_model.OVERLAP * min(compute, memory))
    assert step_model.predict(programs["attention"], V5E).matmul_s == pytest.approx(kernel.seconds)


def test_a_pallas_attention_kernel_without_an_estimate_is_costed_from_its_shapes(programs):
    batch, heads, seq, dim = tpu_programs.SHAPE
    kernel = pallas_kernel(programs["attention-no-estimate"])
    assert kernel.kind == "matmul" and kernel.flops == 4 * batch * heads * seq * seq * dim  # q k^T and p v
    assert kernel.bytes == 4 * batch * heads * seq * dim * 2  # q, k, v read, o written, bf16


def test_host_offload_moves_each_activation_at_the_host_links_rate_beside_the_kernels(programs):
    text = programs["offload"]
    host = [k for k in step_model.kernels(text, V5E) if k.kind == "host"]
    rows, width = tpu_programs.OFFLOADED
    assert len(host) == 2 * tpu_programs.LAYERS  # each layer's activation to the host, and back for the backward pass
    assert all(k.bytes == rows * width * 2 and k.seconds == pytest.approx(k.bytes / TPU_HOST_BANDWIDTH) for k in host)
    prediction = step_model.predict(text, V5E)
    # XLA scheduled kernels between each transfer's start and done: part of the transfers hides under them
    assert 0 < prediction.host_s < sum(k.seconds for k in host)
    parts = prediction.matmul_s + prediction.memory_s + prediction.collective_s + prediction.host_s + prediction.dispatch_s
    assert prediction.step_s == pytest.approx(parts)


def test_a_scanned_layers_offload_moves_each_iterations_slice_of_the_host_stack(programs):
    """Under ``scan`` (as MaxText's layers run) the compiler writes each iteration's activation into a stacked buffer in
    host memory (``dynamic-update-slice`` into ``S(5)``) and reads it back in the backward loop (``dynamic-slice``):
    each moves one layer's slice, not the stack, at the host link's rate (before, these were HBM copies and no host
    time: MaxText's Llama 3.1 8B on v6e-8 offloads 45 GB a step)."""
    text = programs["offload-scanned"]
    host = [k for k in step_model.kernels(text, V5E) if k.kind == "host"]
    rows, width = tpu_programs.OFFLOADED
    assert sum(k.runs for k in host) == 2 * tpu_programs.LAYERS  # to the host and back, every layer
    assert all(k.bytes == rows * width * 2 and k.seconds == pytest.approx(k.bytes / TPU_HOST_BANDWIDTH) for k in host)
    assert 0 < step_model.predict(text, V5E).host_s <= sum(k.runs * k.seconds for k in host)
