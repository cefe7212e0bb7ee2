"""Target names, the replica-group syntaxes, loop trip counts and the roofline formulas, without compiling."""

from __future__ import annotations

import pytest

from explorer import hlo
from explorer.errors import ExplorerError
from explorer.roofline import Collective, collective_seconds, estimate
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


@pytest.mark.parametrize(
    "text, groups",
    [
        ("replica_groups={{0,1},{2,3}}", ((0, 1), (2, 3))),
        ("replica_groups={}", ((0, 1, 2, 3),)),
        ("replica_groups=[2,2]<=[4]", ((0, 1), (2, 3))),
        ("replica_groups=[2,2]<=[2,2]T(1,0)", ((0, 2), (1, 3))),
        ("replica_groups=[1,4]<=[4]", ((0, 1, 2, 3),)),
        ("replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}", ((0, 1), (2, 3))),
        ("replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_0'}", ((0, 2), (1, 3))),
        ("replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_0','axis_1'}", ((0, 1, 2, 3),)),
    ],
)
def test_replica_groups_in_every_syntax(text, groups):
    assert hlo.replica_groups(f"%ar = f32[8]{{0}} all-reduce(%x), {text}, to_apply=%add", 4) == groups


LOOP = """HloModule m, entry_computation_layout={(f32[8,16]{1,0})->f32[8,16]{1,0}}

%cond (p: (s32[], f32[8,16], f32[16,16])) -> pred[] {
  %limit = s32[]{:T(128)} constant(24)
  %p = (s32[], f32[8,16], f32[16,16]) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%p), index=0
  ROOT %lt = pred[]{:T(512)} compare(%i, %limit), direction=LT
}

%body (q: (s32[], f32[8,16], f32[16,16])) -> (s32[], f32[8,16], f32[16,16]) {
  %q = (s32[], f32[8,16], f32[16,16]) parameter(0)
  %x = f32[8,16]{1,0} get-tuple-element(%q), index=1
  %w = f32[16,16]{1,0} get-tuple-element(%q), index=2
  %y = f32[8,16]{1,0} convolution(%x, %w), dim_labels=bf_io->bf
  %s = f32[8,16]{1,0} all-reduce(%y), replica_groups=[2,2]<=[4], to_apply=%add
  ROOT %t = (s32[], f32[8,16], f32[16,16]) tuple(%i, %s, %w)
}

ENTRY %main (a: f32[8,16]) -> f32[8,16] {
  %zero = s32[]{:T(128)} constant(0)
  %start = s32[]{:T(128)} copy(%zero)
  %a = f32[8,16]{1,0} parameter(0)
  %w0 = f32[16,16]{1,0} constant({...})
  %init = (s32[], f32[8,16], f32[16,16]) tuple(%start, %a, %w0)
  %loop = (s32[], f32[8,16], f32[16,16]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[8,16]{1,0} get-tuple-element(%loop), index=1
}
"""


def test_a_loop_without_known_trip_count_is_read_from_its_condition():
    program = hlo.collectives(LOOP)
    assert program.loops_without_trip_count == 0
    assert program.ops["all-reduce"] == {"count": 24, "bytes": 24 * 8 * 16 * 4}
    [op] = hlo.collective_ops(LOOP, 4)
    assert (op.runs, op.groups) == (24, ((0, 1), (2, 3)))
    work = hlo.loop_work(LOOP)
    assert work.flops == 23 * 2 * 8 * 16 * 16  # cost_analysis() counted the first iteration
    assert work.bytes == 23 * (8 * 16 + 16 * 16 + 8 * 16) * 4


def test_a_loop_whose_counter_does_not_start_from_a_constant_is_unbounded():
    text = LOOP.replace("%start = s32[]{:T(128)} copy(%zero)", "%start = s32[]{:T(128)} parameter(1)")
    assert hlo.collectives(text).loops_without_trip_count == 1


def test_collective_costs_follow_the_scaling_book():
    chip = CHIPS["v5p"]
    w = 2 * chip.ici_link_bandwidth
    gather = Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 1)
    assert collective_seconds(gather, chip) == pytest.approx(8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("all-reduce", 1, 8 * 2**20, ("data",), 4, 1), chip) == pytest.approx(2 * 8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("reduce-scatter", 1, 2 * 2**20, ("fsdp",), 4, 1), chip) == pytest.approx(8 * 2**20 / w * 3 / 4)
    assert collective_seconds(Collective("all-gather", 1, 8 * 2**20, ("fsdp",), 4, 2), chip) == pytest.approx(8 * 2**20 / (2 * w) * 3 / 4)
    assert collective_seconds(Collective("all-reduce", 1, 8 * 2**20, ("data",), 1, 0), chip) == 0
    assert collective_seconds(Collective("collective-permute", 3, 8 * 2**20, ("fsdp",), 2, 1), chip) == pytest.approx(8 * 2**20 / w)
    assert collective_seconds(Collective("all-to-all", 1, 2 * 2**20, ("expert",), 4, 1), chip) == pytest.approx(8 * 2**20 / w * 3 / 4 / 4)
    terms = estimate(chip.peak_flops * 2, chip.hbm_bandwidth, [gather], chip)
    assert (terms.compute_s, terms.memory_s, terms.bound, terms.mfu_ceiling) == (2.0, 1.0, "compute", 1.0)
