"""The advisor's output: its figures in units a person reads, its rules short, and the advice for a MaxText config
written as the MaxText keys that make its mesh (``advisor.maxtext_keys``).

No MaxText needed: a layout's ``maxtext`` model holds the keys; the mesh is written back as ``ici_*``/``dcn_*`` keys
(explorer/models/maxtext.py's ``parallelism_keys``, whose mesh MaxText itself builds in tests/explorer/models/test_maxtext.py).
"""

from __future__ import annotations

import json
import re

from explorer.advisor import Candidate, Search, maxtext_keys, rules_short, rules_text, search_text, table_rows, verdict_text, verified
from explorer.compile.compile_result import Memory
from explorer.formats import human_seconds
from explorer.hardware.targets import parse_target
from explorer.layout import parse_layout
from explorer.models.maxtext import MESH_AXES
from explorer.predict.roofline import Estimate
from tests.explorer import compile_result


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


EXPONENT = re.compile(r"\d(\.\d+)?[eE][+-]?\d")  # 1.05e+03, 3.22e3, 6.3e-05


def test_no_figure_of_the_advisor_is_written_in_exponent_notation(seed_dict):
    """Issue 55: "1.05e+03 ms", "predicted 3.22e+03 ms". Seconds, milliseconds and microseconds as a person reads
    them, in the verdict, every row and the text report, for steps from microseconds to seconds."""
    target = parse_target("v5litepod-8")
    steps = (3.22, 1.05e-3 * 1e3, 12.6, 6.3e-5, 0.845e-3)
    candidates = []
    for index, step in enumerate(steps):
        layout = parse_layout({**seed_dict, "name": f"c{index}"})
        estimate = Estimate(step / 2, step / 3, step / 4, step)
        candidate = Candidate(layout, 1 << 30, estimate, f"all-gather over fsdp: ≥ {human_seconds(step / 4)} (estimate)", fits=True)
        if index % 2 == 0:
            candidate = verified(candidate, compile_result("v5litepod-8", estimate=estimate, memory=Memory(peak_bytes=3 << 30)))
        candidates.append(candidate)
    search = Search(target, candidates=candidates)
    text = search_text(search) + "\n" + verdict_text(search) + "\n" + json.dumps(table_rows(search))
    assert "3.22 s" in text and "12.6 s" in text and "63.0 µs" in text and "1.05 s" in text
    assert not EXPONENT.search(text), EXPONENT.search(text)


def test_the_rules_column_is_short_and_the_whole_rules_on_demand():
    """Issue 55: a MaxText config's rules column was ~3,000 characters a row. The table shows the rules that place
    something, grouped by the axes they name and counted past its width; ``--rules`` (``whole_rules``) writes them whole."""
    names = [f"activation_name_{i}" for i in range(40)] + ["embed", "heads", "mlp"]
    rules = [[name, ["fsdp", "expert"]] for name in names[:40]] + [["embed", "fsdp"], ["heads", "tensor"], ["mlp", "tensor"]]
    layout = maxtext_layout(fsdp=4, tensor=2)
    layout = parse_layout({**layout.to_dict(), "rules": rules})
    short = rules_short(layout)
    assert len(short) <= 80, short
    assert short == "embed, activation_name_0 (+39) → fsdp; mlp, heads → tensor", short
    assert rules_text(layout).count(";") == len(rules) - 1 and len(rules_text(layout)) > 1000
    empty = parse_layout({**layout.to_dict(), "mesh": {"shape": [8], "axes": ["data"]}, "rules": [["embed", None]]})
    assert rules_short(empty) == "everything replicated"
