"""The analysis against ground truth: arrays JAX really materialises, its tile maps, its jaxprs."""

import copy
import math

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from explorer.reading import activations, trace as tracing
from explorer.analysis.analyzer import analyze, report_to_dict
from explorer.meshes import jax_mesh
from explorer.layout import parse_layout
from explorer.rules import preset_rules
from explorer.tiles import tiles
from tests.small_models import SMALL_TRANSFORMER_OPTIONS

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"
W2 = "params/LogicalDotReluDot_0/W2"


def layout_with(seed, **changes):
    data = copy.deepcopy(seed)
    for key, value in changes.items():
        data[key] = value
    return parse_layout(data)


def small_transformer(scan=False):
    return {
        "name": "transformer",
        "options": {
            **SMALL_TRANSFORMER_OPTIONS,
            "gated_mlp": True,
            "scan": scan,
        },
    }


def test_flax_guide_specs(seed_dict):
    report = analyze(parse_layout(seed_dict))
    assert PartitionSpec(*report.array(KERNEL).spec) == PartitionSpec(None, "model")
    assert PartitionSpec(*report.array(W2).spec) == PartitionSpec("model", None)
    assert PartitionSpec(*report.array("inputs/x").spec) == PartitionSpec("data", None)
    assert report.array(KERNEL).shard_shape == (1024, 256)
    assert report.array(KERNEL).replication == 2


def test_scan_paths_follow_the_guide(seed_dict):
    seed_dict["model"]["options"]["scan"] = True
    report = analyze(parse_layout(seed_dict))
    kernel = report.array("params/ScanLogicalDotReluDot_0/Dense_0/kernel")
    assert kernel.logical_axes == ("layer", "embed", "hidden")
    assert PartitionSpec(*kernel.spec) == PartitionSpec(None, None, "model")


def test_activation_paths_and_model_output(seed_dict):
    report = analyze(parse_layout(seed_dict))
    activations = [a for a in report.arrays if a.kind == "activation"]
    assert [a.path for a in activations[:2]] == ["activations/LogicalDotReluDot_0/0", "activations/LogicalDotReluDot_0/1"]
    assert activations[0].logical_axes == ("batch", "hidden")
    output = report.array("activations/output")
    assert output.logical_axes == ("batch", "embed") and output.shape == (8, 1024)


MESHES = [((8,), ("x",)), ((2, 4), ("data", "model")), ((4, 2), ("data", "model")), ((2, 2, 2), ("a", "b", "c"))]


def _specs_for(axes):
    specs = [(None, None), (axes[0], None), (None, axes[-1]), (axes[-1], axes[0]) if len(axes) > 1 else (None, axes[0])]
    if len(axes) > 1:
        specs += [(tuple(axes[:2]), None), (None, tuple(reversed(axes)))]
    return specs


@pytest.mark.parametrize("mesh_shape,axes", MESHES)
def test_tiles_match_devices_indices_map(mesh_shape, axes):
    layout = parse_layout({"mesh": {"shape": list(mesh_shape), "axes": list(axes)}, "rules": [], "model": {"name": "mlp"}})
    mesh_info = analyze(layout).mesh
    mesh = jax_mesh(mesh_shape, axes)
    for spec in _specs_for(axes):
        shape = (16, 24)
        expected = NamedSharding(mesh, PartitionSpec(*spec)).devices_indices_map(shape)
        seen = {}
        for tile in tiles(shape, spec, mesh_info):
            for device in tile.devices:
                seen[device] = tile.index
        assert seen == {d.id: tuple(s.indices(n)[:2] for s, n in zip(index, shape)) for d, index in expected.items()}


def test_tiles_of_every_seed_array_match_jax(seed_dict):
    report = analyze(parse_layout(seed_dict))
    mesh = jax_mesh((2, 4), ("data", "model"))
    for info in report.arrays:
        expected = NamedSharding(mesh, PartitionSpec(*info.spec)).devices_indices_map(info.shape)
        for tile in report.tiles(info.path):
            assert tile.shape == info.shard_shape
            for device in tile.devices:
                index = expected[jax.devices()[device]]
                assert tuple(s.indices(n)[:2] for s, n in zip(index, info.shape)) == tile.index


def test_planned_mesh_uses_abstract_mesh_shard_shapes(seed_dict):
    model = {
        "name": "transformer",
        "options": {
            "batch": 16,
            "seq_len": 32,
            "layers": 2,
            "d_model": 256,
            "heads": 16,
            "kv_heads": 16,
            "head_dim": 16,
            "mlp_dim": 512,
            "vocab": 1024,
        },
    }
    layout = layout_with(
        seed_dict,
        mesh={"shape": [16, 16], "axes": ["data", "model"]},
        rules=[list(r) for r in preset_rules("fsdp+tensor-parallel", ("data", "model"))],
        model=model,
    )
    report = analyze(layout)
    assert report.mesh.abstract and report.mesh.size == 256
    assert report.mesh.ids_array().tolist() == np.arange(256).reshape(16, 16).tolist()
    assert not [w for w in report.warnings if w.code == "indivisible"]
    abstract_mesh = AbstractMesh((16, 16), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    for info in report.arrays:
        assert NamedSharding(abstract_mesh, PartitionSpec(*info.spec)).shard_shape(info.shape) == info.shard_shape
        blocks = report.tiles(info.path)
        assert len(blocks) * info.replication == 256
        assert sorted(d for b in blocks for d in b.devices) == list(range(256))


def test_rule_edits_and_mesh_changes_never_retrace_the_model(seed_dict, monkeypatch, cleared, own_compile_cache):
    """Once this process has read the model, a rule edit or a mesh change runs only the forward pass under the new
    layout. The test starts as a new process on a fresh machine (``cleared``, ``own_compile_cache``): a model this
    process read from the disk cache has no live train state, and the first edit after it traces the model once to
    build one (``reading.live``) -- the order-dependent failure this test had in the whole suite, where another file
    had left the seed model in the run's shared disk cache and a ``cleared`` test had emptied the memory."""
    layout = parse_layout(seed_dict)
    analyze(layout)
    monkeypatch.setattr(tracing, "trace", lambda *a: pytest.fail("the model was traced again"))
    read = activations.read

    def forward_only(stage, mesh_axes, names, layout):  # the forward pass under the edited layout, not the model's names
        assert names is None, "the model was traced again"
        return read(stage, mesh_axes, names, layout)

    monkeypatch.setattr(activations, "read", forward_only)
    analyze(layout_with(seed_dict, rules=[["batch", "model"]]))
    analyze(layout_with(seed_dict, mesh={"shape": [4, 2], "axes": ["data", "model"]}))


def test_user_factory_when_allow_listed(seed_dict, monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.factory_module:make_model")
    seed_dict["model"] = {"name": "tests.factory_module:make_model", "options": {"features": 16}}
    report = analyze(parse_layout(seed_dict))
    assert PartitionSpec(*report.array("params/Dense_0/kernel").spec) == PartitionSpec(None, "model")
    assert report.array("params/Dense_0/bias").logical_axes is None


def test_json_report_has_the_documented_fields(seed_dict):
    report = analyze(parse_layout(seed_dict))
    data = report_to_dict(report, include_tiles=True)
    assert data["mesh"] == {"shape": [2, 4], "axes": ["data", "model"], "devices": [[0, 1, 2, 3], [4, 5, 6, 7]], "abstract": False}
    kernel = next(a for a in data["arrays"] if a["path"] == KERNEL)
    assert kernel["spec"] == [None, "model"]
    assert kernel["tiles"][0] == {"index": [[0, 1024], [0, 256]], "devices": [0, 4]}
    assert {"param_bytes", "opt_state_bytes", "input_bytes", "activation_bytes", "total_bytes"} <= set(data["totals"])
    assert math.prod(kernel["shard_shape"]) * 4 == kernel["bytes_per_device"]


def test_a_prng_key_arrays_bytes_are_jaxs():
    """An NNX model keeps its ``nnx.Rngs`` keys as state (MaxText's layers do): their dtype ``key<fry>`` is no NumPy
    dtype, and its bytes are JAX's own."""
    import jax

    from explorer.analysis.report import itemsize

    key = jax.eval_shape(lambda: jax.random.key(0))
    assert itemsize(str(key.dtype)) == key.dtype.itemsize == 8
    assert itemsize("bfloat16") == 2
