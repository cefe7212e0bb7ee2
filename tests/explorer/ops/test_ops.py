"""Op specs against JAX itself: every output spec and tile is what the jitted op really returns on 8 CPU devices.

Ground truth is the actual output of ``jax.jit(expr)`` on ``jax.device_put`` inputs: its
``.sharding.spec``, and ``NamedSharding.devices_indices_map`` for the block each device
holds. The guide's examples run at 256 x 256 (its 8192 x 8192 only in the presets).
"""

import copy
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding, PartitionSpec

from explorer.ops import ops
from explorer.errors import ExplorerError
from explorer.ops.expr import parse_expr
from explorer.ops.op_spec import PRESETS, parse_op
from explorer.ops.ops import analyze_op, check_op_timeable, time_op
from explorer.specs import normal_spec, spec_text
from tests.paths import ROOT

SMALL = 256


def shrunk(data, size=SMALL):
    data = copy.deepcopy(data)
    for array in data["arrays"].values():
        array["shape"] = [size] * len(array["shape"])
    return data


def actual_output(op):
    """Run the op the way the guide does: device_put each input with its NamedSharding, call the jitted expression."""
    mesh = jax.make_mesh(op.mesh.shape, op.mesh.axes, axis_types=(jax.sharding.AxisType.Auto,) * len(op.mesh.axes))
    program = parse_expr(op.expr, tuple(op.arrays))
    inputs = [
        jax.device_put(
            jnp.arange(math.prod(a.shape), dtype=jnp.dtype(a.dtype)).reshape(a.shape) % 7,
            NamedSharding(mesh, PartitionSpec(*a.spec)),
        )
        for a in op.arrays.values()
    ]

    def function(*arrays):
        result = program(dict(zip(op.arrays, arrays)))
        if op.out_spec is not None:
            result = jax.lax.with_sharding_constraint(result, NamedSharding(mesh, PartitionSpec(*op.out_spec)))
        return result

    with jax.set_mesh(mesh):
        return inputs, jax.jit(function)(*inputs)


def tiles_by_device(view):
    return {device: tile.index for tile in view.tiles for device in tile.devices}


def jax_tiles(sharding, shape):
    found = {}
    for device, index in sharding.devices_indices_map(tuple(shape)).items():
        found[device.id] = tuple(slice_.indices(size)[:2] for slice_, size in zip(index, shape))
    return found


def assert_matches_jax(op):
    analysis = analyze_op(op)
    inputs, result = actual_output(op)
    for view, array in zip(analysis.inputs, inputs):
        assert tiles_by_device(view) == jax_tiles(array.sharding, array.shape), view.name
    assert analysis.output.shape == result.shape
    assert analysis.output.spec == normal_spec(result.sharding.spec, result.ndim), (op.expr, result.sharding.spec)
    assert tiles_by_device(analysis.output) == jax_tiles(result.sharding, result.shape)
    return analysis


GUIDE = {
    "sin of a 4x2-sharded array": ("x", "y"),
    "dot of row- and column-sharded": ("a", "b"),
    "constrain to a 2x4 spec": ("y", "x"),
    "constrain to replicated": (None, None),
}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_guide_examples_match_jax_and_the_guide(preset):
    analysis = assert_matches_jax(parse_op(shrunk(PRESETS[preset][1])))
    assert analysis.output.spec == GUIDE[preset]
    assert not analysis.planned


def test_guide_grids_are_the_guides():
    """The blocks the guide's visualize_array_sharding prints: 4x2 for sin, 2x4 after the constraint, one replica set."""
    sin = analyze_op(parse_op(shrunk(PRESETS["sin of a 4x2-sharded array"][1])))
    assert [t.devices for t in sin.output.tiles] == [(d,) for d in range(8)]
    assert [t.block for t in sin.output.tiles][:3] == [(0, 0), (0, 1), (1, 0)]
    dot = analyze_op(parse_op(shrunk(PRESETS["dot of row- and column-sharded"][1])))
    assert [t.devices for t in dot.inputs[0].tiles] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [t.devices for t in dot.inputs[1].tiles] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert ops.hlo.used(dot.collectives) == {}  # "without needing communication"
    transposed = analyze_op(parse_op(shrunk(PRESETS["constrain to a 2x4 spec"][1])))
    assert transposed.output.shard_shape == (SMALL // 2, SMALL // 4)
    replicated = analyze_op(parse_op(shrunk(PRESETS["constrain to replicated"][1])))
    assert [t.devices for t in replicated.output.tiles] == [tuple(range(8))]
    assert "all-gather" in ops.hlo.used(replicated.collectives)


def test_presets_keep_the_guides_full_size_and_compile_without_allocating():
    op = parse_op(PRESETS["dot of row- and column-sharded"][1])
    assert [a.shape for a in op.arrays.values()] == [(8192, 8192), (8192, 8192)]
    analysis = analyze_op(op)  # abstract inputs: nothing of 256 MiB is made
    assert analysis.output.spec == ("a", "b") and analysis.output.shard_shape == (2048, 4096)


MESHES = [((8,), ("d",)), ((4, 2), ("x", "y")), ((2, 4), ("x", "y")), ((2, 2, 2), ("x", "y", "z"))]


@st.composite
def spec_for(draw, rank, axes):
    free = list(axes)
    spec = []
    for _ in range(rank):
        choice = draw(st.sampled_from(["none", "one", "two"]))
        if choice == "one" and free:
            spec.append(free.pop(draw(st.integers(0, len(free) - 1))))
        elif choice == "two" and len(free) >= 2:
            first = free.pop(0)
            spec.append([first, free.pop(0)])
        else:
            spec.append(None)
    return spec


@st.composite
def random_ops(draw):
    shape_sizes, axes = draw(st.sampled_from(MESHES))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.sampled_from([8, 16, 24])) for _ in range(rank)]
    arrays = {"a": {"shape": shape, "spec": draw(spec_for(rank, axes))}, "b": {"shape": shape, "spec": draw(spec_for(rank, axes))}}
    unary = draw(st.sampled_from(["jnp.sin", "jnp.exp", "jnp.tanh", "jax.nn.relu", "-"]))
    binary = draw(st.sampled_from(["+", "-", "*"]))
    expr = f"{unary}(a) {binary} b" if unary != "-" else f"-a {binary} b"
    tail = draw(st.sampled_from(["", ".T", "sum", "dot"]))
    if tail == ".T":
        expr = f"({expr}).T"
    elif tail == "sum":
        expr = f"jnp.sum({expr}, axis={draw(st.integers(0, rank - 1))})"
    elif tail == "dot" and rank == 2:
        arrays["c"] = {"shape": [shape[1], 8], "spec": draw(spec_for(2, axes))}
        expr = f"jnp.dot({expr}, c)"
    out_rank = rank - (tail == "sum") if tail != "dot" or rank != 2 else 2
    out_spec = draw(st.one_of(st.none(), spec_for(out_rank, axes)))
    return {"mesh": {"shape": list(shape_sizes), "axes": list(axes)}, "arrays": arrays, "expr": expr, "out_spec": out_spec}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_ops())
def test_random_specs_and_expressions_match_jax(data):
    assert_matches_jax(parse_op(data))


def test_planned_mesh_uses_jax_type_level_propagation_and_agrees_with_xla_on_the_guides_examples():
    for preset in ("sin of a 4x2-sharded array", "dot of row- and column-sharded"):
        op = parse_op(shrunk(PRESETS[preset][1]))
        xla = analyze_op(op).output.spec
        planned, note = ops._planned_output_spec(op, 2)
        assert planned == xla, preset
        assert "type-level" in note
    bigger = shrunk(PRESETS["dot of row- and column-sharded"][1])
    bigger["mesh"]["shape"] = [16, 16]
    analysis = analyze_op(parse_op(bigger))
    assert analysis.planned and analysis.collectives is None and analysis.output.spec == ("a", "b")
    assert analysis.output.shard_shape == (SMALL // 16, SMALL // 16)
    with pytest.raises(ExplorerError, match=r"mesh.shape.*cannot be timed"):
        check_op_timeable(parse_op(bigger))


def test_timing_runs_both_and_the_results_agree():
    seen = []
    op = parse_op(shrunk(PRESETS["dot of row- and column-sharded"][1], 64))
    timing = time_op(op, steps=3, warmup=1, on_step=lambda which, i, s: seen.append((which, i)))
    assert seen == [("sharded", 0), ("sharded", 1), ("sharded", 2), ("single", 0), ("single", 1), ("single", 2)]
    assert len(timing.sharded.samples) == len(timing.single.samples) == 3
    assert timing.speedup == pytest.approx(timing.single.median / timing.sharded.median)
    assert timing.max_abs_difference < 1e-3 and not timing.stopped
    stopped = time_op(op, steps=5, warmup=0, should_stop=lambda: True)
    assert stopped.stopped and len(stopped.sharded.samples) == 1


def test_a_shape_error_in_the_expression_names_the_expression():
    data = {"mesh": {"shape": [4, 2], "axes": ["x", "y"]}, "arrays": {"a": {"shape": [4, 3]}, "b": {"shape": [4, 3]}}, "expr": "a @ b"}
    with pytest.raises(ExplorerError, match=r"^expr: 'a @ b' does not apply to these arrays"):
        analyze_op(parse_op(data))


def test_spec_text_is_jaxs():
    assert spec_text(("a", None)) == repr(PartitionSpec("a", None))
    assert spec_text((("x", "y"), None)) == "P(('x', 'y'), None)"
    assert spec_text(()) == "P()"


def test_integer_inputs_are_small_and_time(monkeypatch):
    data = {"mesh": {"shape": [8], "axes": ["d"]}, "arrays": {"a": {"shape": [16], "dtype": "int32", "spec": ["d"]}}, "expr": "a * 2"}
    timing = time_op(parse_op(data), steps=1, warmup=0)
    assert timing.max_abs_difference == 0
    assert np.isfinite(timing.sharded.median)


def test_a_planned_mesh_where_jax_cannot_decide_says_why():
    data = {
        "mesh": {"shape": [16, 16], "axes": ["a", "b"]},
        "arrays": {"y": {"shape": [64, 64], "spec": [None, "a"]}, "z": {"shape": [64, 64], "spec": ["a", None]}},
        "expr": "jnp.dot(y, z)",
    }
    analysis = analyze_op(parse_op(data))
    assert analysis.output.spec is None and analysis.output.tiles == () and analysis.output.shard_shape is None
    assert "cannot decide the output sharding here" in analysis.note and "out_sharding" in analysis.note
    assert analysis.to_dict()["output"]["spec_text"] == "—"
    from explorer.text import op_text

    assert "output: float32[64, 64] spec —\n  (no sharding known)" in op_text(analysis)


def _explicit_op(a_spec, b_spec, out_spec=None):
    return parse_op(
        {
            "mesh": {"shape": [4, 2], "axes": ["x", "y"], "axis_types": ["explicit", "explicit"]},
            "arrays": {
                "a": {"shape": [64, 32], "dtype": "float32", "spec": a_spec},
                "b": {"shape": [32, 16], "dtype": "float32", "spec": b_spec},
            },
            "expr": "jnp.dot(a, b)",
            "out_spec": out_spec,
        }
    )


def test_on_explicit_axes_the_result_type_is_shown_beside_what_xla_compiled():
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    analysis = analyze_op(_explicit_op(["x", None], [None, "y"]))
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])
    with jax.set_mesh(mesh):  # the truth from JAX alone: the type of jnp.dot's result on these arrays
        a = jax.ShapeDtypeStruct((64, 32), "float32", sharding=NamedSharding(mesh, P("x", None)))
        b = jax.ShapeDtypeStruct((32, 16), "float32", sharding=NamedSharding(mesh, P(None, "y")))
        expected = jax.eval_shape(lambda a, b: a @ b, a, b).sharding.spec
    assert analysis.typed_spec == tuple(expected) == ("x", "y")
    assert analysis.output.spec == ("x", "y") and "the compiled program agrees" in analysis.note
    constrained = analyze_op(_explicit_op(["x", None], [None, "y"], [None, None]))  # reshard, not an assert
    assert constrained.typed_spec == (None, None) == constrained.output.spec
    assert (
        analyze_op(parse_op({**_explicit_op(["x", None], [None, "y"]).to_dict(), "mesh": {"shape": [4, 2], "axes": ["x", "y"]}})).typed_spec
        is None
    )


def test_an_ambiguous_contraction_on_explicit_axes_is_one_message_on_the_expression():
    with pytest.raises(ExplorerError) as caught:
        analyze_op(_explicit_op([None, "y"], ["y", None]))
    assert caught.value.field == "expr" and "Contracting dimensions are sharded" in str(caught.value)


def test_op_links_carry_the_axis_types():
    from explorer.sharing.share import op_to_query, params_to_op
    from urllib.parse import parse_qsl

    op = _explicit_op(["x", None], [None, "y"])
    query = op_to_query(op)
    assert "types=explicit,explicit" in query
    assert params_to_op(dict(parse_qsl(query[1:]))) == op


# --- the op command, end to end ---------------------------------------------------------------------


def run(*args, devices="8"):
    env = {**os.environ, "EXPLORER_CPU_DEVICES": devices}
    return subprocess.run([sys.executable, "-m", "explorer", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def op_file(tmp_path, mesh, size=64, out_spec=None):
    path = tmp_path / "op.json"
    path.write_text(
        json.dumps(
            {
                "mesh": {"shape": mesh, "axes": ["a", "b"]},
                "arrays": {"y": {"shape": [size, size], "spec": ["a", None]}, "z": {"shape": [size, size], "spec": [None, "b"]}},
                "expr": "jnp.dot(y, z)",
                "out_spec": out_spec,
            }
        )
    )
    return str(path)


def test_op_command_json_with_timing(tmp_path):
    result = run("op", op_file(tmp_path, [4, 2]), "--json", "--time", "2")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["output"]["spec"] == ["a", "b"] and report["output"]["spec_text"] == "P('a', 'b')"
    assert report["output_spec_source"] == "compiled executable (XLA)" and report["collectives"] == {}
    assert [t["devices"] for t in report["inputs"]["y"]["tiles"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    timing = report["timing"]
    assert len(timing["sharded_s"]["samples"]) == len(timing["single_device_s"]["samples"]) == 2
    assert timing["speedup"] == pytest.approx(timing["single_device_s"]["median"] / timing["sharded_s"]["median"])


def test_op_command_text_draws_every_array(tmp_path):
    result = run("op", op_file(tmp_path, [4, 2], out_spec=[]))
    assert result.returncode == 0, result.stderr
    assert "output: float32[64, 64] spec P(None, None)" in result.stdout
    assert "│ CPU 0,1 │" in result.stdout and "│ CPU 0,2,4,6 │ CPU 1,3,5,7 │" in result.stdout
    assert "collectives: all-gather" in result.stdout


def test_op_command_planned_mesh_is_analyzed_and_not_timed(tmp_path):
    spec = op_file(tmp_path, [16, 16], size=256)
    result = run("op", spec)
    assert result.returncode == 0, result.stderr
    assert "256 devices (planned)" in result.stdout and "type-level propagation" in result.stdout
    assert "output: float32[256, 256] spec P('a', 'b')" in result.stdout
    timed = run("op", spec, "--time", "2")
    assert timed.returncode == 2 and "error: mesh.shape: [16, 16] needs 256 devices" in timed.stderr
    assert "Traceback" not in timed.stderr
