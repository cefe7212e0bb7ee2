"""Which line of the user's code each collective comes from: the stack-frame tables, the library filter, op names.

One real compile (the seed layout's step on 8 simulated CPU devices, cached by ``compile_step``) checks the lines
against the model's file; the ground truth against bare compiles of real models is ``tests/test_ground_truth_sources.py``.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from explorer.hlo import program as hlo
import jax

from explorer.hlo import sources
from explorer.compile.compiled import compile_step
from explorer.layout import SEED_LAYOUT, parse_layout
from explorer.models import mlp
from explorer.target_text import communication_lines
from explorer.timing.timing import traced_collectives

# Frame 3 is called from frame 2 (its parent_frame_id is 3, so the caller is frame 2), which is called from frame 1.
TABLES = """
FileNames
1 "/home/me/train.py"
2 "/home/me/model.py"
3 "/usr/lib/python3/site-packages/flax/linen/linear.py"

FunctionNames
1 "train_step"
2 "Block.__call__"
3 "Dense.__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=1 end_column=1}
2 {file_name_id=2 function_name_id=2 line=42 end_line=42 column=3 end_column=3}
3 {file_name_id=3 function_name_id=3 line=287 end_line=287 column=5 end_column=5}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}
3 {file_location_id=3 parent_frame_id=3}
4 {file_location_id=2 parent_frame_id=1}
"""


def test_a_frames_caller_is_its_parent_frame_id_minus_one_and_the_chain_runs_innermost_first():
    frames = sources.stack_frames(TABLES)
    assert [(f.file, f.line, f.function) for f in frames[3]] == [
        ("/usr/lib/python3/site-packages/flax/linen/linear.py", 287, "Dense.__call__"),
        ("/home/me/model.py", 42, "Block.__call__"),
        ("/home/me/train.py", 9, "train_step"),
    ]
    assert [f.line for f in frames[4]] == [42]  # parent_frame_id 1: no caller
    assert sources.user_frame(frames[3]) == sources.Frame("/home/me/model.py", 42, "Block.__call__")


def test_a_frame_in_a_wrapper_installed_over_jaxs_own_function_is_not_the_models_line(monkeypatch):
    """MaxText's tunix adapter installs ``_compat_wsc`` over jax.lax.with_sharding_constraint: its frame is JAX's call."""

    def _compat_wsc(x, shardings):
        return x

    monkeypatch.setattr(jax.lax, "with_sharding_constraint", _compat_wsc)
    code = _compat_wsc.__code__
    chain = (
        sources.Frame(code.co_filename, code.co_firstlineno + 1, code.co_qualname),
        sources.Frame("/home/me/model.py", 42, "Block.__call__"),
    )
    assert sources.user_frame(chain) == chain[1]
    monkeypatch.undo()
    assert sources.user_frame(chain) == chain[0]  # an ordinary function of the user's


COMBINED = (
    TABLES
    + """
ENTRY %main (a: f32[4], b: f32[8]) -> (f32[4], f32[8]) {
  %a = f32[4]{0} parameter(0), metadata={op_name="jit(step)/jvp(M)/Block_0/dot_general" stack_frame_id=3}
  %b = f32[8]{0} parameter(1)
  %c = f32[8]{0} copy(%b), metadata={op_name="jit(step)/jvp(M)/Block_1/attn/dot_general" stack_frame_id=3}
  ROOT %ar = (f32[4]{0}, f32[8]{0}) all-reduce(%a, /*index=1*/%c), replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(step)/jvp(M)/Block_0/dot_general" stack_frame_id=3}
}
"""
)


def test_a_collective_xla_combined_says_so_and_names_every_op_its_operands_come_from():
    found = sources.instruction_source(COMBINED, "ar")
    assert found.combined
    assert found.ops == ("jit(step)/jvp(M)/Block_0/dot_general", "jit(step)/jvp(M)/Block_1/attn/dot_general")
    assert [v.shape for v in found.values] == ["f32[4]", "f32[8]"]
    assert found.frame.line == 42 and found.module == "Block_0"


def test_operands_printed_with_a_tpu_layout_before_their_names_are_read_by_name():
    """XLA may print each operand's shape before its name; a TPU layout's tiles hold parentheses (``T(8,128)(2,1)``)."""
    tpu = COMBINED.replace(
        "all-reduce(%a, /*index=1*/%c)", "all-reduce(f32[4]{0:T(256)} %a, /*index=1*/bf16[8]{0:T(512)(128)(2,1)} %c)"
    ).replace("%c = f32[8]{0} copy", "%c = bf16[8]{0:T(512)(128)(2,1)} copy")
    found = sources.instruction_source(tpu, "ar")
    assert found.combined
    assert found.ops == ("jit(step)/jvp(M)/Block_0/dot_general", "jit(step)/jvp(M)/Block_1/attn/dot_general")
    assert [v.shape for v in found.values] == ["f32[4]", "bf16[8]"]


@pytest.mark.parametrize(
    "op_name, module",
    [
        (
            "jit(train_step)/transpose(jvp(TransformerLM))/decoder/encoderdecoderblock_0/MlpBlock_0/Dense_0/dot_general",
            "decoder/encoderdecoderblock_0/MlpBlock_0/Dense_0",
        ),
        ("jit(train_step)/jvp(TransformerLM)/decoder/Embed_0/jit(_take)/gather", "decoder/Embed_0"),
        ("jit(train_step)/jvp()/reduce_sum", ""),
        ("jit(f)/jvp(M)/(Block_0/attn/dot_general:Block_0/mlp/dot_general)", "Block_0/attn"),
    ],
)
def test_the_module_is_the_flax_path_in_the_op_name(op_name, module):
    assert sources.module_path(op_name) == module


def test_jax_flax_optax_the_stdlib_and_the_explorer_are_libraries_and_models_are_not():
    import flax
    import jax
    import optax

    for package in (jax, flax, optax, json):
        assert sources.is_library(package.__file__), package.__name__
    assert sources.is_library(sources.__file__)  # the explorer's own train step and readers
    assert not sources.is_library(mlp.__file__)  # the built-in models are model code
    assert not sources.is_library(os.path.abspath(__file__))
    assert not sources.is_library("/venv/lib/python3.13/site-packages/flaxformer/components/dense.py")  # a model library
    assert sources.is_library("/venv/lib/python3.13/site-packages/jax/_src/numpy/lax_numpy.py")


@pytest.fixture(scope="module")
def seed_text():
    """The seed layout's train step (the Flax guide's MLP on 2x4), compiled on this process's 8 CPU devices."""
    return compile_step(parse_layout(copy.deepcopy(SEED_LAYOUT)))[0].step.as_text()


def _line_of(code: str) -> int:
    with open(mlp.__file__) as handle:
        return next(n for n, text in enumerate(handle, start=1) if code in text)


def test_every_collective_of_the_seed_step_comes_from_one_of_the_guides_two_matmul_lines(seed_text):
    traced = traced_collectives(seed_text, (2, 4), ("data", "model"))
    found = {(s.file, s.line) for t in traced for s in t.sources}
    assert found == {(mlp.__file__, _line_of("y = nn.Dense(")), (mlp.__file__, _line_of("z = jnp.dot(y, W2)"))}
    for t in traced:  # each kind's lines add up to it
        assert sum(s.count for s in t.sources) == t.count and sum(s.bytes for s in t.sources) == t.bytes
    program = hlo.collectives(seed_text).ops
    assert sum(t.bytes for t in traced) == sum(c["bytes"] for c in program.values())
    assert sum(t.count for t in traced) == sum(c["count"] for c in program.values())


def test_the_gradient_all_reduce_xla_combined_names_the_eight_matmuls_it_carries(seed_text):
    [data] = [t for t in traced_collectives(seed_text, (2, 4), ("data", "model")) if t.mesh_axes == ("data",)]
    [source] = data.sources
    assert source.combined and len(source.values) == 8
    assert {re.sub(r"LogicalDotReluDot_\d", "L", o.split("/", 2)[2]) for o in source.ops} == {"L/Dense_0/dot_general", "L/dot_general"}


def test_the_text_ends_with_the_lines_that_communicate_most_and_the_json_round_trips(seed_text):
    traced = traced_collectives(seed_text, (2, 4), ("data", "model"))
    rows = sources.by_line(traced)
    assert [r.bytes for r in rows] == sorted((r.bytes for r in rows), reverse=True)
    text = communication_lines(rows)
    assert text[0].startswith("top lines by communication") and "mlp.py:" in text[1]
    assert tuple(sources.Traced.from_json(json.loads(json.dumps(t.to_json()))) for t in traced) == traced
