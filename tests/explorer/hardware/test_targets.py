"""Targets: TPU slice and GPU cluster names, their chips and devices, and whether a mesh fits, without compiling."""

from __future__ import annotations

import dataclasses

import pytest

from explorer.errors import ExplorerError
from explorer.predict.roofline import Collective, collective_seconds, estimate, link
from explorer.hardware.accelerators import CHIPS, DCN, GPUS
from explorer.hardware.targets import check_mesh_fits, gpu_names, parse_target, slice_split, valid_names


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


@pytest.mark.parametrize(
    "name, topology, chips",
    [
        ("tpu7x-128", "tpu7x:4x4x4", 64),
        ("tpu7x-4x4x4", "tpu7x:4x4x4", 64),
        ("tpu7x-8", "tpu7x:2x2x1", 4),
        ("tpu7x-512", "tpu7x:4x8x8", 256),
    ],
)
def test_ironwood_slices_by_the_names_recipes_use(name, topology, chips):
    """TPU7x as MaxText's accelerator table and GKE name it (``tpu7x-N``: N TensorCores, two per chip) and as xpk's
    device types write it (``tpu7x-4x4x4``); each reads back as MaxText's name (``topology_keys`` gives it to
    ``compile_topology``). Before, only libtpu's ``tpu7x:4x4x4`` opened, and ``--maxtext ... --target tpu7x:4x4x4``
    was refused: MaxText's table has no such name."""
    target = parse_target(name)
    assert (target.topology, target.chips, target.devices) == (topology, chips, 2 * chips)
    assert target.cloud_name == f"tpu7x-{2 * chips}"
    assert parse_target(f"2x{name}").topology == f"2x{topology}"


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
        ("gb200:1x8", "'gb200' is neither a TPU generation (v4, v5e, v5p, v6e, tpu7x) nor a GPU of a cluster GPU:HOSTSxGPUS of a100"),
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
        "h200:1x8, b200:1x8; slices of 8 devices: v4-16 (v4:2x2x2), v5litepod-8 (v5e:2x4), v5p-16 (v5p:2x2x2), v6e-8 (v6e:2x4), tpu7x-8 (tpu7x:2x2x1)"
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


# --- several slices joined by the data-center network -------------------------------------------------------------


@pytest.mark.parametrize(
    "name, slices, slice_topology, chips, cloud",
    [
        ("2xv5p-16", 2, "v5p:2x2x2", 16, "2xv5p-16"),
        ("4xv6e-256", 4, "v6e:16x16", 1024, "4xv6e-256"),
        ("2xv5p:4x4x4", 2, "v5p:4x4x4", 128, "2xv5p-128"),
        ("4xv5litepod-4", 4, "v5e:2x2", 16, "4xv5litepod-4"),
    ],
)
def test_n_slices_are_spelled_nxslice_with_n_times_the_chips(name, slices, slice_topology, chips, cloud):
    target = parse_target(name)
    assert (target.num_slices, target.slice_topology, target.chips, target.devices, target.cloud_name) == (
        slices,
        slice_topology,
        chips,
        chips,
        cloud,
    )
    assert parse_target(target.topology) == dataclasses.replace(target, name=target.topology)  # the topology reads back
    data = target.to_dict()
    dcn = DCN[target.chip.generation]
    assert data["slices"] == slices and data["dcn_bandwidth"] == dcn.bandwidth and data["dcn_bandwidth_source"].startswith("https://")
    assert "per chip" in data["dcn_bandwidth_what"]
    assert "slices" not in parse_target("v5p-16").to_dict()  # one slice: as before


def test_the_dcn_figures_are_each_generations_nics_per_chip():
    assert DCN["v5e"].bandwidth == 2 * 100e9 / 8 / 8  # 2 x 100 Gbps per 8-chip host, in bytes/s per chip
    assert DCN["v6e"].bandwidth == 4 * 200e9 / 8 / 8  # 4 x 200 Gbps per 8-chip host
    assert DCN["v5p"].bandwidth == 200e9 / 4 / 8  # 200 Gbps per 4-chip VM
    assert set(DCN) == set(CHIPS) and all("assumed" in DCN[g].what for g in ("v4", "tpu7x"))


@pytest.mark.parametrize("bad", ["2xv9-16", "2xv5p-15", "3xbanana"])
def test_an_unknown_slice_type_is_refused_in_one_line(bad):
    with pytest.raises(ExplorerError) as error:
        parse_target(bad)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"target: {bad!r} is N slices of a TPU slice (NxSLICE), but")
    assert "2xv5p-16" in message


@pytest.mark.parametrize("bad, says", [("1xv5p-16", "2 to 64"), ("65xv5p-16", "2 to 64"), ("2xh100:1x8", "GPU cluster")])
def test_a_slice_count_out_of_range_or_slices_of_gpus_are_refused(bad, says):
    with pytest.raises(ExplorerError, match=says):
        parse_target(bad)


def test_a_multislice_device_count_mismatch_names_both_counts():
    with pytest.raises(ExplorerError) as error:
        check_mesh_fits(parse_target("2xv5p-16"), 8)
    message = str(error.value)
    assert message.startswith("target: '2xv5p-16' has 16 chips (2 slices of 8) but the mesh needs 8 devices;") and "\n" not in message


def test_the_outermost_axis_spans_the_slices_unless_the_layout_says_otherwise():
    target = parse_target("4xv5e:2x2")
    assert slice_split(target, (4, 4), ("data", "model")) == (4, 1)
    assert slice_split(target, (2, 8), ("data", "fsdp"), (2, 2)) == (2, 2)
    assert slice_split(parse_target("v5e:4x4"), (4, 4), ("data", "model")) == (1, 1)


@pytest.mark.parametrize(
    "shape, axes, dcn, says",
    [
        (
            (2, 8),
            ("data", "fsdp"),
            None,
            "outermost axis data (2) to span the 4 slices of 4xv5e:2x2, but 2 is not a multiple of 4; "
            "an axis that could span all 4: fsdp (8), e.g. mesh.dcn [1, 4]",
        ),
        ((4, 4), ("data", "model"), (2, 1), "spans 2 slices in all, but the target 4xv5e:2x2 has 4"),
    ],
)
def test_a_split_the_slices_cannot_hold_is_refused_naming_the_axis_and_what_would_fit(shape, axes, dcn, says):
    with pytest.raises(ExplorerError) as error:
        slice_split(parse_target("4xv5e:2x2"), shape, axes, dcn)
    assert says in str(error.value) and str(error.value).startswith("mesh.dcn: ")


def test_a_split_over_slices_on_one_slice_is_refused():
    with pytest.raises(ExplorerError, match="is one slice"):
        slice_split(parse_target("v5e:4x4"), (4, 4), ("data", "model"), (2, 1))


def test_collectives_across_slices_ride_the_dcn_at_its_bandwidth():
    chip = CHIPS["v5e"]
    across = Collective("all-reduce", 1, 2**20, ("data",), 2, 0, 1, 2)
    inside = Collective("all-reduce", 1, 2**20, ("data",), 2, 1, 1, 1)
    assert link(across, chip) == "dcn" and link(inside, chip) == "ici"
    # Two slices, one device each: the array crosses once each way, at one chip's DCN share (the book's ring formula).
    assert collective_seconds(across, chip) == pytest.approx(2 * 2**20 * (1 / 2) / DCN["v5e"].bandwidth)
    assert collective_seconds(across, chip) > 10 * collective_seconds(inside, chip)
    # A group of 8 over 2 slices (4 in each): the in-slice hops and the crossing over 4 chips' NICs, the slower counts.
    wide = Collective("all-gather", 1, 2**20, ("data",), 8, 1, 1, 2)
    assert collective_seconds(wide, chip) == pytest.approx(
        2**20 * max(3 / 4 / chip.ici_bidirectional_bandwidth, 1 / 2 / (4 * DCN["v5e"].bandwidth))
    )


@pytest.mark.parametrize("name, cloud", [("v5e-256", "v5litepod-256"), ("V5E-16", "v5litepod-16"), ("2xv5e-256", "2xv5litepod-256")])
def test_v5e_n_is_the_v5litepod_slice_maxtext_names(name, cloud):
    """MaxText (``compile_topology=v5e-256``) writes a v5e slice as v5e-N chips; it is Cloud TPU's v5litepod-N."""
    target, same = parse_target(name), parse_target(cloud)
    assert (target.topology, target.num_slices, target.cloud_name) == (same.topology, same.num_slices, cloud)


def test_a_bad_target_gives_an_example_of_each_form_and_the_forms_name_v5e_n():
    from explorer.hardware.targets import TARGET_FORMS

    with pytest.raises(ExplorerError) as error:
        parse_target("v9-256")
    message = str(error.value)
    assert "v5e-256" in message and "v5e:4x4" in message and "2xv5p-16" in message and "h100:2x8" in message and "\n" not in message
    assert "v5e-16" in TARGET_FORMS and "v5litepod-16" in TARGET_FORMS


def test_v5e_slices_are_named_as_maxtext_and_gke_name_them():
    """Issue 45 item 1: ``v5e-256`` (MaxText, GKE, xpk) is Cloud TPU's v5litepod-256: 256 chips, 16x16."""
    target = parse_target("v5e-256")
    assert (target.topology, target.chips, target.cloud_name) == ("v5e:16x16", 256, "v5litepod-256")
    assert parse_target("2xv5e-16").topology == "2xv5e:4x4"


@pytest.mark.parametrize("bad", ["tpu-v9-garbage", "", "  "])
def test_a_name_that_is_no_target_gets_one_short_line_not_every_tpu_type(bad):
    with pytest.raises(ExplorerError) as error:
        parse_target(bad)
    message = str(error.value)
    assert message.startswith(f"target: {bad!r} ") and len(message) < 200 and "v5p-16384" not in message, message
