"""The advice for a MaxText config, written as the MaxText keys that make its mesh (``advisor.maxtext_keys``).

No MaxText needed: a layout's ``maxtext`` model holds the keys; the mesh is written back as ``ici_*``/``dcn_*`` keys
(explorer/models/maxtext.py's ``parallelism_keys``, whose mesh MaxText itself builds in tests/explorer/models/test_maxtext.py).
"""

from __future__ import annotations

from explorer.advisor import maxtext_keys
from explorer.hardware.targets import parse_target
from explorer.layout import parse_layout
from explorer.models.maxtext import MESH_AXES


def maxtext_layout(dcn=None, **sizes):
    mesh = {"shape": [sizes.get(axis, 1) for axis in MESH_AXES], "axes": list(MESH_AXES)}
    if dcn:
        mesh["dcn"] = [dcn.get(axis, 1) for axis in MESH_AXES]
    model = {"name": "maxtext", "options": {"model_name": "llama2-7b", "per_device_batch_size": "2"}}
    return parse_layout({"name": "candidate", "mesh": mesh, "rules": [["embed", "fsdp"]], "model": model})


def test_one_slice_advice_is_the_ici_keys():
    keys = maxtext_keys(maxtext_layout(fsdp=4, tensor=2), parse_target("v5e-8"))
    assert "ici_fsdp_parallelism=4" in keys and "ici_tensor_parallelism=2" in keys and "ici_data_parallelism=1" in keys
    assert "ici_pipeline_parallelism=1" in keys  # the stage axis, by MaxText's key name
    assert all(key.endswith("=1") for key in keys if key.startswith("dcn_"))  # every dcn key 1: base.yml's -1 would fill in


def test_several_slices_split_each_axis_into_ici_and_dcn():
    keys = maxtext_keys(maxtext_layout(dcn={"data": 2}, data=2, fsdp=4), parse_target("2xv5e-4"))
    assert {"ici_data_parallelism=1", "dcn_data_parallelism=2", "ici_fsdp_parallelism=4", "dcn_fsdp_parallelism=1"} <= set(keys)
    keys = maxtext_keys(maxtext_layout(dcn={"fsdp": 2}, fsdp=8), parse_target("2xv5e-4"))
    assert {"ici_fsdp_parallelism=4", "dcn_fsdp_parallelism=2", "dcn_data_parallelism=1"} <= set(keys)


def test_another_model_or_axes_get_no_maxtext_keys():
    seed = parse_layout(
        {"name": "s", "mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": [], "model": {"name": "mlp", "options": {}}}
    )
    assert maxtext_keys(seed, parse_target("v5e-8")) is None
    other = parse_layout({**seed.to_dict(), "model": {"name": "maxtext", "options": {"model_name": "llama2-7b"}}})
    assert maxtext_keys(other, parse_target("v5e-8")) is None  # 'model' is not one of MaxText's mesh axes
