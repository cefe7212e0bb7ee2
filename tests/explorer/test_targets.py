"""Targets: TPU slice and GPU cluster names, their chips and devices, and whether a mesh fits, without compiling."""

from __future__ import annotations

import pytest

from explorer.errors import ExplorerError
from explorer.roofline import Collective, collective_seconds, estimate, link
from explorer.accelerators import CHIPS, GPUS
from explorer.targets import check_mesh_fits, gpu_names, parse_target, valid_names


@pytest.mark.parametrize(
    "name, topology, chips",
    [
        ("v5litepod-16", "v5e:4x4", 16),
        ("v5p-128", "v5p:4x4x4", 64),
        ("v6e-64", "v6e:8x8", 64),
        ("v4-32", "v4:2x2x4", 16),
        ("v5e:4x4", "v5e:4x4", 16),
        ("v5p:4x4x4", "v5p:4x4x4", 64),
        ("V4:4x4x4", "v4:4x4x4", 64),
        ("v5p-8", "v5p:2x2x1", 4),
    ],
)
def test_cloud_names_count_chips_or_cores_and_topologies_pass_through(name, topology, chips):
    target = parse_target(name)
    assert (target.topology, target.chips) == (topology, chips)


@pytest.mark.parametrize(
    "name, chips", [("v5e:1x1", 1), ("v6e:1x1", 1), ("v5p:1x1x1", 1), ("v4:1x1x1", 1), ("v5e:1x2", 2), ("v5litepod-1", 1)]
)
def test_single_chip_and_two_chip_slices_are_accepted(name, chips):
    target = parse_target(name)
    assert target.chips == target.devices == chips


def test_tpu7x_has_two_devices_per_chip_with_half_the_chips_figures_each():
    target = parse_target("tpu7x:2x2x1")
    assert (target.chips, target.devices, target.chip.chip_config_name) == (4, 8, "default")
    figures = target.to_dict()
    assert figures["hbm_bytes"] == 96 * 2**30 and figures["chip_hbm_bytes"] == 192 * 2**30  # Cloud TPU: 192 GiB per chip
    assert figures["peak_flops"] == 2307e12 / 2 and figures["hbm_bandwidth"] == 7380e9 / 2
    assert "https://cloud.google.com/tpu/docs/tpu7x" in figures["sources"]
    check_mesh_fits(target, 8)
    with pytest.raises(ExplorerError, match=r"has 4 chips \(8 devices\) but the mesh needs 4 devices"):
        check_mesh_fits(target, 4)


def test_v4_compiles_one_device_per_chip():
    assert parse_target("v4-32").chip.chip_config_name == "megacore"


@pytest.mark.parametrize("bad", ["h100", "v5p-6", "v9-8", "tpu"])
def test_a_bad_target_name_lists_valid_ones(bad):
    with pytest.raises(ExplorerError) as error:
        parse_target(bad)
    assert f"{bad!r}" in str(error.value) and ("v5p-8" in str(error.value) or "v5p-16" in str(error.value))


def test_a_device_count_mismatch_names_both_counts_and_slices_that_fit():
    with pytest.raises(ExplorerError) as error:
        check_mesh_fits(parse_target("v5p-128"), 16)
    message = str(error.value)
    assert "64 chips" in message and "16 devices" in message
    assert "v5litepod-16 (v5e:4x4)" in message and "v5p-32 (v5p:2x2x4)" in message
    check_mesh_fits(parse_target("v5p-128"), 64)


# --- NVIDIA GPU clusters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kind, hosts, per_host",
    [
        ("h100:1x8", "NVIDIA H100 80GB HBM3", 1, 8),
        ("H100:8x8", "NVIDIA H100 80GB HBM3", 8, 8),
        ("a100:2x8", "NVIDIA A100-SXM4-80GB", 2, 8),
        ("h200:1x1", "NVIDIA H200 141GB HBM3e", 1, 1),
        ("b200:128x8", "NVIDIA B200", 128, 8),
        ("b200:3x4", "NVIDIA B200", 3, 4),
    ],
)
def test_gpu_clusters_are_hosts_of_gpus(name, kind, hosts, per_host):
    target = parse_target(name)
    assert target.is_gpu and (target.hosts, target.gpus_per_host, target.devices) == (hosts, per_host, hosts * per_host)
    assert target.chip.device_kind == kind and target.gpu_topology == f"1x{hosts}x{per_host}"
    assert parse_target(target.topology) == target  # what the compile child is handed reads back the same
    figures = target.to_dict()
    assert figures["platform"] == "cuda" and figures["hosts"] == hosts and figures["hbm_bytes"] == target.chip.hbm_bytes
    assert figures["usable_bytes"] == int(0.75 * target.chip.hbm_bytes)


@pytest.mark.parametrize(
    "bad, says",
    [
        ("h100:1x16", "1 to 8 GPUs"),
        ("h100:129x8", "1 to 128 hosts"),
        ("h100:0x8", "has 0 hosts"),
        ("h100:2x2x2", "h100:HOSTSxGPUS"),
        ("v100:1x8", "is not a TPU slice name or a GPU cluster"),
        ("gb200:1x8", "GPU:HOSTSxGPUS of a100, h100, h200, b200"),
        ("h100-16", "e.g. h100:2x8"),
    ],
)
def test_a_bad_gpu_cluster_says_what_a_cluster_is(bad, says):
    with pytest.raises(ExplorerError) as error:
        parse_target(bad)
    assert f"{bad!r}" in str(error.value) and says in str(error.value) and "\n" not in str(error.value)


def test_the_app_lists_gpu_clusters_beside_the_tpu_slices():
    names = valid_names()
    assert names.index("h100:8x8") > names.index("v5p-128") and set(gpu_names()) <= set(names)
    assert all(parse_target(name).is_gpu for name in gpu_names())


def test_a_gpu_clusters_device_count_mismatch_names_both_counts_and_clusters_that_fit():
    with pytest.raises(ExplorerError) as error:
        check_mesh_fits(parse_target("h100:2x8"), 8)
    assert str(error.value) == (
        "target: 'h100:2x8' has 16 GPUs (2 hosts of 8) but the mesh needs 8 devices; GPU clusters of 8 GPUs: h100:1x8, a100:1x8, "
        "h200:1x8, b200:1x8; slices of 8 devices: v4-16 (v4:2x2x2), v5litepod-8 (v5e:2x4), v5p-16 (v5p:2x2x2), v6e-8 (v6e:2x4), tpu7x:2x2x1"
    )
    with pytest.raises(ExplorerError, match=r"has 64 chips but the mesh needs 12 devices; no slice .*; GPU clusters of 12 GPUs: a100:2x6"):
        check_mesh_fits(parse_target("v5p-128"), 12)
    check_mesh_fits(parse_target("b200:3x4"), 12)


def test_gpu_collectives_ride_nvlink_inside_a_host_and_the_network_across_hosts():
    """The two-level model (roofline's docstring): V = 64 MiB gathered over 8 H100s."""
    gpu, v = GPUS["h100"], 64 * 2**20
    inside = Collective("all-gather", 1, v, ("tensor",), 8, 1, 1)
    assert link(inside, gpu) == "nvlink" and link(inside, CHIPS["v5p"]) == "ici"
    assert collective_seconds(inside, gpu) == pytest.approx(v * 7 / 8 / 450e9)
    across = Collective("all-gather", 1, v, ("data",), 8, 1, 8)  # one GPU in each of 8 hosts: its own NIC
    assert link(across, gpu) == "network"
    assert collective_seconds(across, gpu) == pytest.approx(v * 7 / 8 / 50e9)
    # 64 GPUs, 8 per host: 7/8 of V enters each host, over its 8 NICs; slower than the NVLink hops.
    fsdp = Collective("all-gather", 1, v, ("fsdp",), 64, 2, 8)
    assert collective_seconds(fsdp, gpu) == pytest.approx(v * 7 / 8 / (8 * 50e9))
    assert collective_seconds(Collective("all-reduce", 1, v, ("fsdp",), 64, 2, 8), gpu) == pytest.approx(2 * v * 7 / 8 / (8 * 50e9))
    assert collective_seconds(Collective("reduce-scatter", 1, v // 64, ("fsdp",), 64, 2, 8), gpu) == pytest.approx(v * 7 / 8 / (8 * 50e9))
    # All-to-all over 2 hosts of 4: 3/8 of the bytes stay in the host (NVLink), 4/8 leave it (the network).
    assert collective_seconds(Collective("all-to-all", 1, v, ("expert",), 8, 2, 2), gpu) == pytest.approx(v * 4 / 8 / 50e9)
    assert collective_seconds(Collective("collective-permute", 1, v, ("stage",), 2, 1, 2), gpu) == pytest.approx(v / 50e9)
    assert collective_seconds(Collective("collective-permute", 1, v, ("stage",), 2, 1, 1), gpu) == pytest.approx(v / 450e9)
    terms = estimate(gpu.peak_flops, gpu.hbm_bandwidth / 2, [inside], gpu)
    assert (terms.compute_s, terms.memory_s, terms.bound) == (1.0, 0.5, "compute")


@pytest.mark.parametrize(
    "name,wraps",
    [
        ("v5p-128", (True, True, True)),
        ("v5p:4x4x8", (True, True, True)),  # whole 4x4x4 cubes: the optical switches wrap every axis
        ("v5p-16", (False, False, False)),
        ("v5p:2x4x4", (False, False, False)),
        ("v4-32", (False, False, False)),  # less than a cube
        ("v5litepod-256", (True, True)),
        ("v5litepod-128", (False, True)),
        ("v5litepod-16", (False, False)),  # v5e: a 16-long axis
        ("v6e-64", (False, False)),
        ("h100:8x8", ()),
    ],
)
def test_wraparound_links_follow_the_scaling_book(name, wraps):
    """ "Any multiple of a full cube (e.g. 4x4x4 or 4x4x8) will have wraparounds"; "a 2x2x4 won't"; "A TPU v5e 8x16 will
    have a wraparound on the longer axis" (How to Scale Your Model, part 2)."""
    assert parse_target(name).wraparound == wraps
