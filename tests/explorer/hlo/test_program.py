"""Reading XLA's compiled program as text: collectives and their bytes, replica groups in every syntax, loop trip counts."""

from __future__ import annotations

import pytest

from explorer.hlo import program as hlo
from explorer.hlo.instructions import parse_instruction


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
  %one = s32[]{:T(128)} constant(1)
  %next = s32[]{:T(128)} add(%i, %one)
  ROOT %t = (s32[], f32[8,16], f32[16,16]) tuple(%next, %s, %w)
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


def test_a_pallas_call_written_over_several_lines_stays_in_its_loop_body():
    """A Pallas kernel's ``frontend_attributes={kernel_metadata={`` runs over three lines of the HLO text (splash
    attention's, as the TPU compiler prints it): the ``}}`` that closes it is not the body's end, and the dot after
    it counts once per iteration (it counted once: a scanned MaxText layer's dots after its attention)."""
    call = (
        '  %k = f32[8,16]{1,0} custom-call(%x), custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={\n'
        '"xprof_metadata":"{\\"block_q\\": 512}"\n'
        '}}, metadata={op_name="splash"}\n'
    )
    text = LOOP.replace("  %y = f32[8,16]{1,0} convolution", call + "  %y = f32[8,16]{1,0} convolution")
    assert hlo.loop_work(text).flops == hlo.loop_work(LOOP).flops == 23 * 2 * 8 * 16 * 16


def test_a_loop_condition_as_xla_dumps_it_reads_its_counter_inline():
    """The text XLA dumps for a program it refused for HBM writes the counter as ``%p#0`` and marks tuple elements
    with ``/*index=N*/``: the trip count is still read (else a scanned model's flops count one layer)."""
    dumped = LOOP.replace("compare(%i, %limit)", "compare(%p#0, %limit)").replace(
        "tuple(%start, %a, %w0)", "tuple(/*index=0*/%start, %a, %w0)"
    )
    assert dumped != LOOP and hlo.collectives(dumped).loops_without_trip_count == 0
    assert hlo.matmul_work(dumped).flops == 24 * 2 * 8 * 16 * 16


def test_a_loop_printed_with_each_operands_shape_reads_as_without():
    """XLA may print a shape before each operand (commas inside it, a TPU layout's parentheses): the trip count, the
    counter's start in the tuple and the matmul are still read by name."""
    shaped = LOOP
    for plain, printed in [
        ("tuple(%start, %a, %w0)", "tuple(s32[]{:T(128)} %start, f32[8,16]{1,0} %a, /*index=2*/f32[16,16]{1,0} %w0)"),
        ("compare(%i, %limit)", "compare(s32[]{:T(128)} %i, s32[]{:T(128)} %limit)"),
        ("while(%init)", "while((s32[], f32[8,16], f32[16,16]) %init)"),
        ("convolution(%x, %w)", "convolution(f32[8,16]{1,0} %x, f32[16,16]{1,0} %w)"),
    ]:
        assert plain in shaped
        shaped = shaped.replace(plain, printed)
    assert hlo.collectives(shaped).loops_without_trip_count == 0
    assert hlo.matmul_work(shaped).flops == hlo.matmul_work(LOOP).flops == 24 * 2 * 8 * 16 * 16
    assert hlo.loop_work(shaped) == hlo.loop_work(LOOP)


def test_a_loop_that_steps_its_counter_by_two_runs_half_the_iterations():
    """The TPU compiler's windowed einsums (``windowed_dot_general_body``: a collective matmul in steps, two partial dots
    an iteration, one each way round the ring) add 2 to their counter: ``i < 24`` from 0 is 12 iterations. Read as 24,
    MaxText's 32B program on a v5p-128 counted its weight gradients' reduce-scatter loops twice (its step 1.18x
    MaxText's FLOPs, the one-slice step predicted 15% above the two-slice one)."""
    text = LOOP.replace("%one = s32[]{:T(128)} constant(1)", "%one = s32[]{:T(128)} constant(2)")
    assert hlo.collectives(text).loops_without_trip_count == 0
    assert hlo.matmul_work(text).flops == 12 * 2 * 8 * 16 * 16
    odd = text.replace("constant(24)", "constant(25)")  # 0, 2, ..., 24: 13 iterations
    assert hlo.matmul_work(odd).flops == 13 * 2 * 8 * 16 * 16


def test_a_loop_whose_counter_is_not_stepped_by_a_constant_is_unbounded():
    text = LOOP.replace("%next = s32[]{:T(128)} add(%i, %one)", "%next = s32[]{:T(128)} multiply(%i, %one)")
    assert hlo.collectives(text).loops_without_trip_count == 1


def test_a_loop_whose_counter_does_not_start_from_a_constant_is_unbounded():
    text = LOOP.replace("%start = s32[]{:T(128)} copy(%zero)", "%start = s32[]{:T(128)} parameter(1)")
    assert hlo.collectives(text).loops_without_trip_count == 1


def test_collectives_parser_counts_async_pairs_once_and_adds_tuple_parts():
    text = "\n".join(
        [
            "%ag-start = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(%p), dimensions={0}",
            "%ag-done = f32[16,8]{1,0} all-gather-done(%ag-start)",
            "%ar = (f32[256]{0}, bf16[2,2]{1,0}) all-reduce(%a, %b), to_apply=%add",
            "ROOT %cp = s32[10]{0} collective-permute(%c), source_target_pairs={{0,1}}",
            "%fusion = f32[4]{0} fusion(%all-reduce.3), kind=kLoop",
        ]
    )
    counted = hlo.collectives(text).ops
    assert counted["all-gather"] == {"count": 1, "bytes": 16 * 8 * 4}
    assert counted["all-reduce"] == {"count": 1, "bytes": 256 * 4 + 4 * 2}
    assert counted["collective-permute"] == {"count": 1, "bytes": 40}
    assert counted["reduce-scatter"]["count"] == 0


def test_an_async_collectives_done_printed_with_its_operands_shape_takes_its_starts_groups():
    """The groups sit on the ``-start``; the ``-done`` names it, here behind the start's tuple shape (TPU tiles inside)."""
    text = "\n".join(
        [
            "%ar-start = f32[8]{0:T(256)} all-reduce-start(f32[8]{0:T(256)} %p), replica_groups={{0,2},{1,3}}, to_apply=%add",
            "%ar-done = f32[8]{0:T(256)} all-reduce-done(f32[8]{0:T(256)} %ar-start)",
            "%cp-start = (f32[4]{0}, f32[4]{0}) collective-permute-start(%q), source_target_pairs={{0,1},{1,0}}",
            "%cp-done = f32[4]{0} collective-permute-done((f32[4]{0}, f32[4]{0}) %cp-start)",
        ]
    )
    ops = hlo.collective_ops(text, 4)
    assert [(op.op, op.name, op.bytes, op.groups) for op in ops] == [
        ("all-reduce", "ar-done", 8 * 4, ((0, 2), (1, 3))),
        ("collective-permute", "cp-done", 4 * 4, ((0, 1), (1, 0))),
    ]


LOOP_MODULE = """HloModule loops

%add (x: f32[], y: f32[]) -> f32[] {
  ROOT %sum = f32[] add(%x, %y)
}

%inner_body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %ar = f32[8]{0} all-reduce(%v), replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (s32[], f32[8]) tuple(%i, %ar)
}

%inner_cond (p: (s32[], f32[8])) -> pred[] {
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%outer_body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %w = (s32[], f32[8]) while(%p), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  %ag-start = (f32[8]{0}, f32[16]{0}) all-gather-start(%v), dimensions={0}
  %ag-done = f32[16]{0} all-gather-done(%ag-start)
  ROOT %t = (s32[], f32[8]) tuple(%i, %v)
}

%outer_cond (p: (s32[], f32[8])) -> pred[] {
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%dynamic_body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %cp = f32[8]{0} collective-permute(%v), source_target_pairs={{0,1}}
  ROOT %t = (s32[], f32[8]) tuple(%i, %cp)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %w1 = (s32[], f32[8]) while(%init), condition=%outer_cond, body=%outer_body, backend_config={"known_trip_count":{"n":"4"}}
  %w2 = (s32[], f32[8]) while(%init), condition=%outer_cond, body=%dynamic_body
  %ar.top = f32[8]{0} all-reduce(%a), replica_groups={{0,1}}, to_apply=%add
  ROOT %r = f32[8]{0} copy(%ar.top)
}
"""


def test_collectives_in_loop_bodies_count_once_per_iteration():
    program = hlo.collectives(LOOP_MODULE)
    assert program.ops["all-reduce"] == {"count": 4 * 3 + 1, "bytes": (4 * 3 + 1) * 8 * 4}
    assert program.ops["all-gather"] == {"count": 4, "bytes": 4 * 16 * 4}
    assert program.ops["collective-permute"] == {"count": 1, "bytes": 8 * 4}  # the unbounded loop: once
    assert program.loops_without_trip_count == 1


MATMUL_OPERANDS = {"x": "%x = f32[8,16]{1,0} parameter(0)", "w": "%w = f32[16,16]{1,0} parameter(1)"}
GEMM_CONFIG = (
    ', custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,'
    '"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],'
    '"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}'
)


@pytest.mark.parametrize(
    "line",
    [
        "%y = f32[8,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "%y = f32[8,16]{1,0} dot(f32[8,16]{1,0} %x, f32[16,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "%y = f32[8,16]{1,0} convolution(f32[8,16]{1,0} %x, f32[16,16]{1,0} %w), dim_labels=bf_io->bf",
        "%y = (f32[8,16]{1,0}, s8[4194304]{0}) custom-call(%x, %w)" + GEMM_CONFIG,
        "%y = (f32[8,16]{1,0}, s8[4194304]{0}) custom-call(f32[8,16]{1,0} %x, f32[16,16]{1,0} %w)" + GEMM_CONFIG,
    ],
)
def test_a_matmul_reads_its_operands_by_name_with_or_without_their_shapes(line):
    """2 x 8 x 16 outputs x 16 contracted; bytes: the result (a gemm's workspace not counted) and both operands."""
    work = (2.0 * 8 * 16 * 16, (8 * 16 + 8 * 16 + 16 * 16) * 4.0, "f32")
    assert hlo.line_matmul_work(line, MATMUL_OPERANDS) == work
    shapes = {name: parse_instruction(text).shape for name, text in MATMUL_OPERANDS.items()}
    assert hlo.instruction_matmul_work(parse_instruction(line), shapes.get) == work  # the step model's way in
