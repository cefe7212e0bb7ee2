"""Sharing: link and file round trips for every preset and model, mangled links, code to copy, the target in links.

The team library is tested in ``test_library.py``, op links in ``test_share_op_links.py``."""

import copy
import importlib.util
import json
import string
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.errors import ExplorerError
from explorer.layout import load_layout_json, parse_layout
from explorer.models import MODELS
from explorer.rules import PRESETS, preset_rules
from explorer.sharing.share import layout_from_link, layout_to_query, params_to_layout
from explorer.sharing.exports import maxtext_yaml, python_snippet
from tests.paths import ROOT


def every_layout(seed):
    models = [{"name": "mlp", "options": {"batch": 8, "layers": 2, "depth": 64, "scan": True}}]
    models += [{"name": "transformer", "options": dict(preset)} for preset in MODELS["transformer"].presets.values()]
    models += [{"name": "transformer", "options": {"dtype": "bfloat16", "scan": True}}]
    layouts = []
    for preset in PRESETS:
        for model in models:
            data = copy.deepcopy(seed)
            data.update(name=f"{preset} / {model['name']}", rules=[list(r) for r in preset_rules(preset, ("data", "model"))], model=model)
            layouts.append(parse_layout(data))
    odd = copy.deepcopy(seed)
    odd.update(
        name="odd: names; & = + %",
        mesh={"shape": [2, 2, 2], "axes": ["data", "fsdp", "model"]},
        rules=[["batch", ["data", "fsdp"]], ["layer", None], ["weird;name:x+y", "model"], ["hidden", "model"]],
    )
    return layouts + [parse_layout(odd)]


def from_query(query):
    return layout_from_link(query)


def test_link_round_trip_for_every_preset_and_model(seed_dict):
    for layout in every_layout(seed_dict):
        query = layout_to_query(layout)
        assert query.startswith("?")
        assert from_query(query) == layout, query


def test_file_round_trip_for_every_preset_and_model(seed_dict, tmp_path):
    for index, layout in enumerate(every_layout(seed_dict)):
        path = tmp_path / f"{index}.json"
        path.write_text(layout.to_json())
        assert load_layout_json(path.read_text()) == layout


def test_factory_layout_round_trips_and_stays_allow_listed(seed_dict, monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.factory_module:make_model")
    seed_dict["model"] = {"name": "tests.factory_module:make_model", "options": {"features": 16, "note": "8"}}
    layout = parse_layout(seed_dict)
    query = layout_to_query(layout)
    assert from_query(query) == layout
    monkeypatch.delenv("EXPLORER_ALLOWED_FACTORIES")
    with pytest.raises(ExplorerError, match="not allow-listed"):
        from_query(query)


def test_the_link_is_readable(seed_dict):
    assert layout_to_query(parse_layout(seed_dict)) == (
        "?name=seed-2x4&mesh=2x4&axes=data,model&rules=batch:data;hidden:model&model=mlp&options=batch:8;layers:4;depth:1024;scan:false"
    )


@pytest.mark.parametrize(
    "query,field",
    [
        ("?mesh=2x4&axes=data,model&rules=batch:data&model=mlp", None),
        ("?mesh=2xfour&axes=data,model&model=mlp", "link parameter 'mesh'"),
        ("?axes=data,model&model=mlp", "link"),  # "link: ['axes', 'model'] has no 'mesh' parameter ..."
        ("?mesh=2x4&axes=data&model=mlp", "mesh.axes"),
        ("?mesh=2x4&axes=data,model&rules=batch&model=mlp", "link parameter 'rules', item 0"),
        ("?mesh=2x4&axes=data,model&rules=batch:tensor&model=mlp", "rules[0]"),
        ("?mesh=2x4&axes=data,model&model=mlp&options=batch:{oops", "link option 'batch'"),
        ("?mesh=2x4&axes=data,model&model=mlp&options=batch:true", "model.options.batch"),
        ("?mesh=2x4&axes=data,model&model=os.path:join", "model.name"),
        ("?mesh=99999999999x1&axes=a,b&model=mlp", "link parameter 'mesh'"),
    ],
)
def test_mangled_links_name_what_is_wrong(query, field):
    if field is None:
        assert from_query(query).model.options["depth"] == 1024  # missing options take defaults
        return
    with pytest.raises(ExplorerError) as caught:
        from_query(query)
    assert caught.value.field == field


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["name", "mesh", "axes", "rules", "model", "options", "x"]), st.text(alphabet=string.printable, max_size=40)
    )
)
def test_any_tampered_link_raises_only_explorer_error(params):
    try:
        params_to_layout(params)
    except ExplorerError:
        pass


def test_copy_as_code_is_a_complete_script_that_shards_like_the_analysis(seed_dict, tmp_path):
    """The script runs as pasted on this CPU-only machine, in the environment that has JAX's CUDA plugin (installed for
    compiling for GPU clusters): issue 55, it printed a 25-line "Unable to load cuDNN" traceback before its output."""
    seed_dict["name"] = "it's \"odd\"\nprint('injected')"
    seed_dict["rules"] = [["batch", ["data", "model"]], ["layer", None], ["hidden", "model"]]
    seed_dict["model"]["options"].update(layers=2, depth=64)
    layout = parse_layout(seed_dict)
    script = tmp_path / "pasted.py"
    script.write_text(python_snippet(layout))
    import os

    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "EXPLORER_"))}, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr  # no traceback, no warning: the output is the layout
    lines = result.stdout.splitlines()
    assert lines[0] == 'it\'s "odd"' and lines[1] == "print('injected')"  # the name is printed, never run
    from explorer.analysis.analyzer import analyze

    expected = [
        f"{a.path.removeprefix('params/')} {a.shape} {a.spec_text()} {a.shard_shape}" for a in analyze(layout).arrays if a.kind == "param"
    ]
    assert lines[2:] == expected
    assert maxtext_yaml(layout).splitlines()[2:] == [
        "logical_axis_rules: [",
        '  ["batch", ["data", "model"]],',
        '  ["layer", []],',
        '  ["hidden", "model"],',
        "]",
    ]


def test_url_command_prints_the_query():
    result = subprocess.run(
        [sys.executable, "-m", "explorer", "url", str(ROOT / "layouts" / "seed-2x4.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.startswith("?name=seed-2x4&mesh=2x4&")


def test_the_target_travels_in_links_and_files_and_is_not_compiled():
    """Issue 18 item 6: a teammate opening the link or the file gets the plan's target too."""
    from explorer.layout import load_layout_json, parse_layout, seed_layout
    from explorer.sharing.share import layout_from_link, layout_to_query

    planned = parse_layout({**seed_layout().to_dict(), "target": "v5litepod-8"})
    assert layout_to_query(planned).endswith("&target=v5litepod-8")
    assert layout_from_link(layout_to_query(planned)) == planned
    assert load_layout_json(planned.to_json()) == planned
    assert planned.key == seed_layout().key  # the same program: the caches are shared
    assert "target" not in seed_layout().to_dict()  # files without a target stay as they were


def test_a_bad_target_in_a_link_is_named():
    import pytest

    from explorer.errors import ExplorerError
    from explorer.sharing.share import layout_from_link

    with pytest.raises(ExplorerError, match=r"target: 'v9-3' is not a TPU slice name"):
        layout_from_link("mesh=2x4&axes=data,model&model=mlp&target=v9-3")


def test_a_links_dcn_carries_the_slices_each_axis_spans_and_only_where_given(seed_dict):
    data = seed_dict
    assert "dcn=" not in layout_to_query(parse_layout(data))
    data["mesh"]["dcn"], data["target"] = [2, 1], "2xv5p-16"
    layout = parse_layout(data)
    query = layout_to_query(layout)
    assert "dcn=2x1" in query and "target=2xv5p-16" in query and layout_from_link(query) == layout
    with pytest.raises(ExplorerError, match="mesh.dcn"):
        layout_from_link(query.replace("dcn=2x1", "dcn=3x1"))


def test_maxtext_yaml_says_how_many_slices_each_axis_spans(seed_dict):
    seed_dict["mesh"]["dcn"] = [2, 1]
    text = maxtext_yaml(parse_layout(seed_dict))
    assert "dcn_data_parallelism: 2\ndcn_model_parallelism: 1\n" in text
    del seed_dict["mesh"]["dcn"]
    assert "dcn_" not in maxtext_yaml(parse_layout(seed_dict))


def test_maxtext_yaml_writes_the_pipeline_keys_of_a_pipelined_transformer(seed_dict):
    options = {"layers": 8, "batch": 8, "pipeline_stages": 2, "pipeline_repeats": 2, "pipeline_microbatches": 4}
    seed_dict["mesh"] = {"shape": [2, 4], "axes": ["stage", "data"], "dcn": [2, 1]}
    seed_dict["rules"] = [["stage", "stage"], ["batch", "data"]]
    seed_dict["model"] = {"name": "transformer", "options": options}
    lines = maxtext_yaml(parse_layout(seed_dict)).splitlines()
    assert "ici_pipeline_parallelism: 1" in lines and "dcn_pipeline_parallelism: 2" in lines
    assert "num_pipeline_microbatches: 4" in lines and "num_layers_per_pipeline_stage: 2  # num_pipeline_repeats 2" in lines
    # The stage axis's slices are written once, under MaxText's name for it (it has no dcn_stage_parallelism key).
    assert sum(line.startswith("dcn_pipeline_parallelism") for line in lines) == 1 and not any("dcn_stage" in line for line in lines)
    seed_dict["model"]["options"] = {**options, "pipeline_stages": 1, "pipeline_repeats": 1, "pipeline_microbatches": 1}
    lines = maxtext_yaml(parse_layout(seed_dict)).splitlines()
    assert "dcn_pipeline_parallelism: 2" in lines and not any("num_pipeline" in line or "dcn_stage" in line for line in lines)
    del seed_dict["mesh"]["dcn"]
    assert "pipeline" not in maxtext_yaml(parse_layout(seed_dict))


@pytest.mark.skipif(importlib.util.find_spec("maxtext") is None, reason="MaxText is an optional extra, not installed")
def test_a_maxtext_link_is_short_escaped_once_and_opens_the_same_layout_as_old_links_do():
    """Issue 55 item 9: a MaxText config's share link was ~5,000 characters in the address bar, its ~80 rules listed
    and each value quoted twice (``%2522256%2522``). Its rules are MaxText's own for its keys (``rules=maxtext``), its
    numbers bare, a quote escaped once; it opens the same layout, and so does a link written the old way."""
    from urllib.parse import parse_qsl, quote, urlencode

    from explorer.models import maxtext
    from explorer.sharing.share import layout_to_params, link_keeping_the_rest
    from tests.explorer.models.test_maxtext import TINY

    layout = parse_layout(maxtext.layout_data(TINY, "v5e-8"))
    query = layout_to_query(layout)
    params = dict(parse_qsl(query[1:]))
    assert params["rules"] == "maxtext" and "base_emb_dim:256;" in params["options"] and len(query) < 600, query
    address = urlencode(layout_to_params(layout))  # as the address bar escapes it: every separator, once
    assert "%25" not in address and len(address) < 700, address
    assert params_to_layout(params) == layout and link_keeping_the_rest(params) == (layout, ())
    assert params_to_layout(params).key == layout.key
    old = params | {  # before: every rule listed, every value a quoted JSON string
        "rules": ";".join(f"{r.logical}:{','.join(r.mesh_axes) or '-'}" for r in layout.rules),
        "options": ";".join(f"{k}:{quote(json.dumps(v), safe='')}" for k, v in layout.model.options.items()),
    }
    assert len(urlencode(old)) > 4000 and "%2522" in urlencode(old)
    assert params_to_layout(old) == layout and link_keeping_the_rest(old) == (layout, ())
    edited = layout.model_copy(update={"rules": layout.rules[1:]})  # rules of its own: listed, as any layout's
    assert dict(parse_qsl(layout_to_query(edited)[1:]))["rules"] != "maxtext"
    assert params_to_layout(dict(parse_qsl(layout_to_query(edited)[1:]))) == edited
    text = parse_layout(layout.to_dict() | {"model": {"name": "maxtext", "options": {**layout.model.options, "learning_rate": "1e-3"}}})
    assert "learning_rate:%221e-3%22" in layout_to_query(text)  # a number that would read back otherwise: quoted, once
    assert params_to_layout(dict(parse_qsl(layout_to_query(text)[1:]))).model.options["learning_rate"] == "1e-3"
