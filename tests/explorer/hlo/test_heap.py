"""The memory engine against XLA and XProf on the same programs: XLA's memory-usage report (its total is the peak's
buffers plus the heap's gaps, to the byte) and XProf's Memory Viewer (the peak and the buffers live there).

Programs: a scanned grad on this process's CPU (compiled here) and two on a TPU v5e slice (compiled by libtpu in one
child process, ``tests.tpu_programs --dump``): the same layers scanned with every activation saved in HBM, and with
each layer's activation offloaded to host memory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from explorer.hlo import heap as heaps
from explorer.hlo.dumps import read_dump
from tests import ground_truth_memory as truth
from tests.paths import ROOT

pytest.importorskip("xprof", reason="XProf's Memory Viewer is the ground truth (requirements-dev.txt)")

WIDE = (1024, 2048)  # the CPU program's activation per layer: rows, width (f32: 8 MiB)


def _heap(folder: str) -> heaps.Heap:
    return heaps.heap(
        read_dump(folder, "after_optimizations-buffer-assignment.txt", ""), read_dump(folder, "after_optimizations-live-range.txt", "")
    )


@pytest.fixture(scope="module")
def cpu_dump(tmp_path_factory) -> str:
    """A three-layer scanned grad compiled here, with XLA's dump (text and proto)."""
    folder = str(tmp_path_factory.mktemp("cpu-dump"))

    def loss(ws, x):
        def layer(x, w):
            return jnp.tanh(x @ w), None

        x, _ = jax.lax.scan(layer, x, ws)
        return (x**2).sum()

    rows, width = WIDE
    ws = jax.ShapeDtypeStruct((3, width, width), jnp.float32)
    x = jax.ShapeDtypeStruct((rows, width), jnp.float32)
    jax.jit(jax.grad(loss)).lower(ws, x).compile({"xla_dump_to": folder, "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": True})
    return folder


@pytest.fixture(scope="module")
def tpu_dumps(tmp_path_factory) -> str:
    """``tests.tpu_programs``' scanned and offloading programs compiled for a TPU v5e slice, each dumped in its folder."""
    folder = str(tmp_path_factory.mktemp("tpu-dumps"))
    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "tests.tpu_programs", "--dump", folder, "scanned", "offload-scanned"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def _agrees_with_xprof(folder: str) -> heaps.Heap:
    """The engine's peak within 0.1% of XProf's, and every buffer of 1 MiB or more XProf lists at its peak held by one
    of the engine's of the same size whose values include XProf's (XProf names a shared buffer by its first value)."""
    held = _heap(folder)
    viewer = truth.memory_viewer(folder)
    assert held.peak_bytes == pytest.approx(truth.mib_to_bytes(viewer["peakHeapMib"]), rel=1e-3)
    listed = truth.peak_objects(viewer, at_least=2**20)
    assert listed, "XProf lists no buffer of 1 MiB at its peak"
    for name, size in listed:
        assert any(b.size == size and name in {v.name for v in b.values} for b in held.buffers), (name, size)
    return held


def test_the_peaks_buffers_and_the_heaps_gaps_are_xlas_total_to_the_byte(cpu_dump, tpu_dumps):
    for folder in (cpu_dump, os.path.join(tpu_dumps, "scanned"), os.path.join(tpu_dumps, "offload-scanned")):
        held = _heap(folder)
        total = truth.report_total(folder)
        assert sum(b.size for b in held.buffers) == held.peak_bytes
        assert held.peak_bytes + held.fragmentation_bytes == held.allocated_bytes == total
        assert held.unranged == 0


def test_agrees_with_xprofs_memory_viewer_on_cpu(cpu_dump):
    held = _agrees_with_xprof(cpu_dump)
    # the three layers' activations, saved for the backward pass: one stacked buffer of [3, rows, width]
    rows, width = WIDE
    assert any(b.size == 3 * rows * width * 4 for b in held.buffers)


def test_agrees_with_xprofs_memory_viewer_on_a_tpu_slice(tpu_dumps):
    _agrees_with_xprof(os.path.join(tpu_dumps, "scanned"))
    _agrees_with_xprof(os.path.join(tpu_dumps, "offload-scanned"))


def test_host_offloaded_activations_are_in_host_memory_not_in_the_devices_peak(tpu_dumps):
    """``offload-scanned`` sends each layer's activation to pinned host memory: XLA's host memory space holds them, as
    XProf's Memory Viewer for that space says; the scanned program without the policy holds none there."""
    folder = os.path.join(tpu_dumps, "offload-scanned")
    held = _heap(folder)
    host = truth.memory_viewer(folder, memory_space=heaps.HOST_COLOR)
    assert held.host_allocated_bytes == truth.mib_to_bytes(host["totalBufferAllocationMib"]) > 0
    assert held.host and all(b.allocation in {a.index for a in held.allocations if a.color == heaps.HOST_COLOR} for b in held.host)
    assert _heap(os.path.join(tpu_dumps, "scanned")).host_allocated_bytes == 0


def test_the_curve_has_a_point_per_program_position_and_its_top_is_the_peak(cpu_dump):
    held = _heap(cpu_dump)
    assert len(held.curve) == len(held.sequence) + 1
    assert max(held.curve) == held.peak_bytes == held.curve[held.peak_position]
    kept = heaps.downsample(held.curve, 7)
    assert len(kept) == 7 and (held.peak_position, held.peak_bytes) in kept
