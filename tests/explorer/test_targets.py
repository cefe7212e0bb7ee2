"""TPU targets: slice names, chips and their figures, and whether a mesh fits a slice, without compiling."""

from __future__ import annotations

import pytest

from explorer.errors import ExplorerError
from explorer.targets import CHIPS, check_mesh_fits, parse_target


@pytest.mark.parametrize(
    "name, topology, chips",
    [
        ("v5litepod-16", "v5e:4x4", 16), ("v5p-128", "v5p:4x4x4", 64), ("v6e-64", "v6e:8x8", 64), ("v4-32", "v4:2x2x4", 16),
        ("v5e:4x4", "v5e:4x4", 16), ("v5p:4x4x4", "v5p:4x4x4", 64), ("V4:4x4x4", "v4:4x4x4", 64), ("v5p-8", "v5p:2x2x1", 4),
    ],
)
def test_cloud_names_count_chips_or_cores_and_topologies_pass_through(name, topology, chips):
    target = parse_target(name)
    assert (target.topology, target.chips) == (topology, chips)


@pytest.mark.parametrize("name, chips", [("v5e:1x1", 1), ("v6e:1x1", 1), ("v5p:1x1x1", 1), ("v4:1x1x1", 1), ("v5e:1x2", 2), ("v5litepod-1", 1)])
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


def test_every_chip_has_its_figures_and_sources():
    for chip in CHIPS.values():
        assert chip.hbm_bytes > 0 and chip.peak_flops > 0 and chip.hbm_bandwidth > 0 and chip.ici_link_bandwidth > 0
        assert chip.ici_links == 2 * chip.dims
        assert chip.sources and all(s.startswith("https://") for s in chip.sources)


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
