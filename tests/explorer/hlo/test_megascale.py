"""The cross-slice transfers of a program compiled for several slices (``explorer/hlo/megascale.py``)."""

from __future__ import annotations

from explorer.hlo.megascale import megascale_ops


def test_cross_slice_transfers_are_read_with_their_groups_and_runs():
    """XLA compiles one program per slice; a collective across slices is a MegaScale ``send`` (checked against the bare
    recipe in ``test_multislice.py``): groups of global device ids, or slices (from 1) x in-slice devices."""
    text = (
        "ENTRY %main () -> f32[] {\n"
        "  %send = (f32[8,128]{1,0:T(8,128)}, u32[]{:S(2)}, token[]) send(%x, %a), is_host_transfer=true, frontend_attributes="
        '{_xla_megascale_target={{100000,300000},{100001,300001}},_xla_megascale_transfer_type="ALL_GATHER"}\n'
        '  %recv = (f32[8,128]{1,0}, u32[], token[]) recv(%a), frontend_attributes={_xla_megascale_target="{1,2}x{0}",'
        '_xla_megascale_transfer_type="ALL_GATHER"}\n'
        '  %send.1 = (bf16[4]{0}, u32[], token[]) send(%y, %b), frontend_attributes={_xla_megascale_target="{1,2,3,4}x{0:1,3}",'
        '_xla_megascale_transfer_type="REDUCE_SCATTER"}\n'
        "}\n"
    )
    first, second = megascale_ops(text)
    assert (first.op, first.runs, first.bytes, first.groups, first.group_size) == (
        "all-gather",
        1,
        4096,
        ((100000, 300000), (100001, 300001)),
        2,
    )
    assert (second.op, second.bytes, second.groups, second.slices, second.devices, second.group_size) == (
        "reduce-scatter",
        8,
        None,
        (0, 1, 2, 3),
        (0, 1, 3),
        4,
    )


def test_a_send_of_a_tuple_moves_every_array_of_it():
    """HLO may send a tuple: the send's result is then ((the tuple), u32[], token[]), and each array of it crosses."""
    text = (
        "ENTRY %main () -> f32[] {\n"
        "  %send = ((f32[8,128]{1,0:T(8,128)}, bf16[4]{0}), u32[], token[]) send((f32[8,128]{1,0:T(8,128)}, bf16[4]{0}) %t, %a),"
        ' frontend_attributes={_xla_megascale_target="{1,2}x{0}",_xla_megascale_transfer_type="ALL_REDUCE"}\n'
        "}\n"
    )
    [send] = megascale_ops(text)
    assert (send.op, send.bytes, send.slices, send.devices, send.name) == ("all-reduce", 8 * 128 * 4 + 4 * 2, (0, 1), (0,), "send")
