"""Box-drawing grids against jax.debug.visualize_array_sharding, and the ``op`` command end to end."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from explorer.analysis import mesh_info
from explorer.layout import MeshSpec
from explorer.text import sharding_text
from tests.paths import ROOT

MESH = MeshSpec(shape=(4, 2), axes=("a", "b"))


def cells(text):
    """The grid's cell labels, row by row (JAX pads tall cells with blank lines)."""
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]
    return [row for row in rows if any(row)]


@pytest.mark.parametrize("shape,spec", [
    ((8, 8), ("a", "b")), ((8, 8), ("b", "a")), ((8, 8), ("a", None)), ((8, 8), (None, "b")), ((8, 8), (None, "a")),
    ((8, 8), (("a", "b"), None)), ((8, 16), (None, ("b", "a"))), ((8,), (("a", "b"),)), ((8,), ("a",)), ((8,), ("b",)),
    ((8, 8), ()), ((8,), ()),
])
def test_grids_are_what_jax_draws(shape, spec, capsys):
    mesh = jax.make_mesh(MESH.shape, MESH.axes, axis_types=(jax.sharding.AxisType.Auto,) * 2)
    array = jax.device_put(jnp.zeros(shape), NamedSharding(mesh, PartitionSpec(*spec)))
    capsys.readouterr()
    jax.debug.visualize_array_sharding(array, use_color=False)
    expected = cells(capsys.readouterr().out)
    assert cells(sharding_text(shape, spec, mesh_info(MESH))) == expected


def test_higher_ranks_draw_the_most_cut_dimensions_slice_by_slice():
    text = sharding_text((4, 6, 8), ("b", None, "a"), mesh_info(MESH))
    assert text.splitlines()[0] == "rows: dim 0 (4, 2 block(s)) · columns: dim 2 (8, 4 block(s))"
    assert "slice dim 1 block 0 of 1 (0:6)" in text
    assert cells(text) == [["CPU 0", "CPU 2", "CPU 4", "CPU 6"], ["CPU 1", "CPU 3", "CPU 5", "CPU 7"]]
    cube = mesh_info(MeshSpec(shape=(2, 2, 2), axes=("a", "b", "c")))
    sliced = sharding_text((4, 6, 8), ("a", "b", "c"), cube)
    assert "slice dim 0 block 0 of 2 (0:2)" in sliced and "slice dim 0 block 1 of 2 (2:4)" in sliced
    assert cells(sliced) == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"], ["CPU 4", "CPU 5"], ["CPU 6", "CPU 7"]]


def test_more_than_eight_replicas_are_abbreviated():
    planned = mesh_info(MeshSpec(shape=(4, 4, 512), axes=("a", "b", "c")))
    assert cells(sharding_text((8, 8), ("a",), planned, "dev")) == [[f"dev {4 * 512 * i},{4 * 512 * i + 1}…{4 * 512 * (i + 1) - 1} (2048)"] for i in range(4)]


def run(*args, devices="8"):
    env = {**os.environ, "EXPLORER_CPU_DEVICES": devices}
    return subprocess.run([sys.executable, "-m", "explorer", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def op_file(tmp_path, mesh, size=64, out_spec=None):
    path = tmp_path / "op.json"
    path.write_text(json.dumps({
        "mesh": {"shape": mesh, "axes": ["a", "b"]},
        "arrays": {"y": {"shape": [size, size], "spec": ["a", None]}, "z": {"shape": [size, size], "spec": [None, "b"]}},
        "expr": "jnp.dot(y, z)", "out_spec": out_spec,
    }))
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


def test_op_command_planned_mesh_is_analysed_and_not_timed(tmp_path):
    spec = op_file(tmp_path, [16, 16], size=256)
    result = run("op", spec)
    assert result.returncode == 0, result.stderr
    assert "256 devices (planned)" in result.stdout and "type-level propagation" in result.stdout
    assert "output: float32[256, 256] spec P('a', 'b')" in result.stdout
    timed = run("op", spec, "--time", "2")
    assert timed.returncode == 2 and "error: mesh.shape: [16, 16] needs 256 devices" in timed.stderr
    assert "Traceback" not in timed.stderr
