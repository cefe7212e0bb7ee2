"""One line of HLO text as a record: operand names clean in every form XLA prints them (with and without a shape before
the name, behind the ``/*index=N*/`` comment XLA writes on every fifth operand, after a nested tuple shape)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from explorer.hlo.instructions import instruction_name, parse_instruction

DATA = Path(__file__).resolve().parents[2] / "data"

# Line 1 of XLA's own text for the MaxText 16B step on v5e (tests/data/maxtext_v5e/16b-1.hlo.txt.gz, metadata cut): a
# fusion of 7 operands, the sixth behind /*index=5*/ with no shape before it.
SEVEN_OPERANDS = (
    "  %fusion.433 = (f32[6,2048]{1,0:T(8,128)S(1)}, bf16[6,2048,4096]{2,1,0:T(8,128)(2,1)}) fusion(%copy-done.11, %copy-done.72,"
    " %fusion.431, %async-collective-done.4, %get-tuple-element.1636, /*index=5*/%get-tuple-element.1616, %fusion.432),"
    " kind=kLoop, calls=%fused_computation.380"
)


def test_a_real_line_of_seven_operands():
    instruction = parse_instruction(SEVEN_OPERANDS)
    assert instruction.name == "fusion.433"
    assert instruction.op == "fusion"
    assert instruction.shape == "(f32[6,2048]{1,0:T(8,128)S(1)}, bf16[6,2048,4096]{2,1,0:T(8,128)(2,1)})"
    assert instruction.operands == (
        "copy-done.11",
        "copy-done.72",
        "fusion.431",
        "async-collective-done.4",
        "get-tuple-element.1636",
        "get-tuple-element.1616",
        "fusion.432",
    )
    assert instruction.attributes == ", kind=kLoop, calls=%fused_computation.380"


@pytest.mark.parametrize(
    "arguments",
    [
        "%a, %b, %c, %d, %e, /*index=5*/%f",
        "s32[] %a, f32[2]{0} %b, %c, %d, %e, /*index=5*/bf16[8,2]{1,0:T(8,128)(2,1)} %f",
        "(s32[], (f32[2]{0}, f32[3])) %a, %b, %c, %d, %e, /*index=5*/ (f32[2], s32[]) %f",
        "a, b, c, d, e, /*index=5*/f",
    ],
)
def test_operand_names_in_every_form(arguments):
    assert parse_instruction(f"  ROOT %t = (s32[], f32[2]) tuple({arguments})").operands == ("a", "b", "c", "d", "e", "f")


@pytest.mark.parametrize("program", ["hlo/mlp_h200.h200_1x1.hlo.txt.gz", "maxtext_v5e/16b-1.hlo.txt.gz"])
def test_every_operand_of_a_compiled_program_names_one_of_its_instructions(program):
    """XLA's text for an H200 and a v5e program: no operand is lost to a comment (141 operands on 89 lines of the 16B one sit behind one)."""
    lines = gzip.open(DATA / program, "rt").read().splitlines()
    names = {name for line in lines if (name := instruction_name(line))}
    parsed = [i for i in map(parse_instruction, lines) if i is not None and i.op not in ("constant", "parameter")]
    unknown = [(i.name, o) for i in parsed for o in i.operands if o not in names]
    assert parsed and unknown == []
    assert max(len(i.operands) for i in parsed) > 5


# --- a convolution's flops, as XLA's cost analysis counts them ---------------------------------------------------

CONVOLUTIONS = {  # lhs, rhs, keyword arguments of lax.conv_general_dilated
    "same padding": ((2, 3, 9, 9), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
    "strides, uneven padding": ((2, 3, 9, 9), (4, 3, 3, 3), dict(window_strides=(2, 2), padding=((1, 2), (0, 1)))),
    "kernel dilation": ((2, 3, 9, 9), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="VALID", rhs_dilation=(2, 2))),
    "input dilation": ((2, 3, 9, 9), (4, 3, 3, 3), dict(window_strides=(1, 1), padding=((2, 2), (2, 2)), lhs_dilation=(2, 1))),
    "feature groups": ((2, 4, 9, 9), (6, 2, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=2)),
    # the TPU compiler's form of an FSDP dot: a window of 64 over a dimension padded by 63 on each side
    "window over padding": ((1, 64, 128), (64, 64, 128), dict(window_strides=(1,), padding=((63, 63),))),
}


@pytest.mark.parametrize("case", CONVOLUTIONS)
def test_a_convolutions_flops_are_xlas_cost_analysis(case):
    """Each program is one convolution compiled on the CPU: its flops read from the optimized HLO's line (window,
    padding, strides, dilations, groups) are ``cost_analysis()``'s, XLA's own count (the ground truth)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from explorer.hlo import program

    lhs, rhs, options = CONVOLUTIONS[case]
    compiled = jax.jit(lambda a, b: lax.conv_general_dilated(a, b, **options)).lower(jnp.ones(lhs), jnp.ones(rhs)).compile()
    assert program.matmul_work(compiled.as_text()).flops == compiled.cost_analysis()["flops"] > 0
