"""How a mesh lies on a target: the compile's placement (split physical axes, a TPU7x chip's two cores), and before
any compile where its axes fall, against JAX's own placement.

On a TPU slice the ground truth is ``tests/ground_truth_torus.py`` (libtpu's devices laid out by
``mesh_utils``, in a child process that imports no explorer code; rings and lines by the book's
wraparound rule); on a GPU cluster the devices are numbered host-major (JAX's CUDA plugin).
"""

from __future__ import annotations

import numpy as np
import pytest

from explorer.layout import parse_layout
from explorer.hardware.placement import mesh_links
from explorer.compile.target_compile import compile_target
from explorer.hardware.targets import parse_target
from tests import ground_truth_torus
from tests.explorer import mlp_layout

SHAPES = {
    "v5p:4x4x4": [(64,), (4, 16), (16, 4), (8, 8), (2, 32), (2, 8, 4), (4, 4, 4)],  # whole cubes: every axis wraps
    "v5p:2x2x2": [(8,), (2, 4), (4, 2), (2, 2, 2)],  # smaller than a cube: no wraparound
    "v5e:8x16": [(128,), (8, 16), (16, 8), (4, 32), (2, 64)],  # the 16-long axis wraps, the 8-long one not
}


@pytest.fixture(scope="module")
def jax_placements():
    return ground_truth_torus.placements(SHAPES)


@pytest.mark.parametrize("topology", list(SHAPES))
def test_each_tpu_mesh_axis_rides_the_torus_axes_jax_places_it_on_as_rings_or_lines(topology, jax_placements):
    target = parse_target(topology)
    seen = set()
    for shape, axes in jax_placements[topology].items():
        names = tuple(f"a{i}" for i in range(len(shape)))
        links = mesh_links(target, shape, names)
        for link, truth in zip(links, axes):
            rings = [whole and ground_truth_torus.wraps(topology, extent) for whole, extent in zip(truth["whole"], truth["extent"])]
            assert (link.torus_axes, link.rings) == (tuple(truth["spans"]), tuple(rings)), (topology, shape, link.text)
            assert link.ring_axes == ground_truth_torus.ring_axes(topology, truth) and link.hosts == 1 and link.link == "ici"
            seen.update(rings)
    # Whole cubes and a 16-long v5e axis give rings and lines (a part of an axis, the 8-long one); a 2x2x2 only lines.
    assert seen == ({False} if topology == "v5p:2x2x2" else {True, False})


@pytest.mark.parametrize(
    "cluster,shape",
    [("h100:2x4", (2, 4)), ("h100:2x4", (4, 2)), ("h100:8x8", (8, 8)), ("h100:8x8", (2, 4, 8)), ("b200:4x8", (32,)), ("a100:2x6", (3, 4))],
)
def test_each_gpu_mesh_axis_spans_the_hosts_of_jax_host_major_numbering(cluster, shape):
    target = parse_target(cluster)
    hosts = (np.arange(target.devices) // target.gpus_per_host).reshape(shape)  # JAX numbers a cluster's GPUs host by host
    names = tuple(f"a{i}" for i in range(len(shape)))
    for axis, link in enumerate(mesh_links(target, shape, names)):
        groups = np.moveaxis(hosts, axis, -1).reshape(-1, shape[axis])
        spanned = max(len(set(g.tolist())) for g in groups)
        assert link.hosts == spanned and link.link == ("nvlink" if spanned == 1 else "network"), (cluster, shape, link.text)
        assert link.text.startswith(f"a{axis} ({shape[axis]}): ") and ("NVLink" in link.text) == (spanned == 1)


@pytest.mark.usefixtures("own_compile_cache")
def test_a_tpu7x_slice_compiles_with_two_devices_per_chip(seed_dict):
    """tpu7x:2x2x1 is 4 Ironwood chips, 8 devices (two TensorCores each), each device with half the chip's HBM."""
    result, _ = compile_target(parse_layout(seed_dict), "tpu7x:2x2x1")
    target = result.target
    assert (target.chips, target.devices, target.chip.device_kind) == (4, 8, "TPU7x")
    assert target.chip.device_hbm_bytes == 96 * 2**30 and target.chip.hbm_bytes == 192 * 2**30
    assert (
        result.fits is True and result.headroom_bytes == round(94.74 * 2**30) - result.judged_peak_bytes
    )  # XLA lets a program use 94.74 GiB of 96
    axes = {a.axis: a.torus_axes for a in result.mesh.placement}
    assert "core" in axes["data"] + axes["model"]  # the two devices of a chip are one logical axis' neighbours
    assert {c.mesh_axes for c in result.collectives} == {("data",), ("model",)}


@pytest.mark.usefixtures("own_compile_cache")
def test_an_8x8_mesh_on_a_4x4x4_torus_is_placed_by_splitting_physical_axes(seed_dict):
    layout = mlp_layout(seed_dict, mesh=(8, 8), axes=("data", "model"), batch=64, layers=1, depth=512)
    result, _ = compile_target(layout, "v5p-128")
    assert result.mesh.placement_method == "split_physical_axes"
    spans = {a.axis: a.torus_axes for a in result.mesh.placement}
    assert len(spans["data"]) == 2 or len(spans["model"]) == 2  # an 8 on a torus of 4s crosses two physical axes
    assert result.fits is True
