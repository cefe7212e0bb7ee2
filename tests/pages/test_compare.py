"""AppTest of the Compare page, and of links restoring a layout on every page."""

import copy
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from explorer.sharing import library
from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.sharing.share import layout_to_params
from explorer.formats import human_bytes, human_seconds
from tests.paths import APP

LAYERS = 4


@pytest.fixture
def shelf(tmp_path, monkeypatch, seed_dict):
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    library.save("tensor parallel", parse_layout(seed_dict))
    data_only = copy.deepcopy(seed_dict)
    data_only["rules"] = [["batch", "data"]]
    library.save("data only", parse_layout(data_only))


def compare_page():
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page("views/2_Compare.py")
    return at.run()


def test_two_layouts_differing_in_one_rule_show_exactly_the_changed_arrays(shelf):
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["tensor parallel", "data only"]).run()
    assert not at.exception and not at.error
    differences = next(d.value for d in at.dataframe if "path" in d.value.columns)
    shown = set(differences["path"])
    layers = [f"LogicalDotReluDot_{i}" for i in range(LAYERS)]
    weights = [f"{layer}/Dense_0/kernel" for layer in layers] + [f"{layer}/W2" for layer in layers]
    expected = {f"params/{w}" for w in weights}
    expected |= {f"opt_state/0/{moment}/{w}" for moment in ("mu", "nu") for w in weights}
    expected |= {f"activations/{layer}/0" for layer in layers}  # the ('batch', 'hidden') constraints
    assert shown == expected
    row = differences.set_index("path").loc["params/LogicalDotReluDot_0/W2"]
    assert (row["library: tensor parallel"], row["library: tensor parallel · shard"]) == ("P('model', None)", "(256, 1024)")
    assert (row["library: data only"], row["library: data only · shard"]) == ("P(None, None)", "(1024, 1024)")
    long = differences.set_index("path").loc["opt_state/0/mu/LogicalDotReluDot_0/Dense_0/kernel"]
    assert long["array"] == "opt_state/0/mu/Logi…Dot_0/Dense_0/kernel"  # the leaf and the layer's number in view


def test_identical_layouts_show_no_differences(shelf):
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["Current layout (sidebar)", "tensor parallel"]).run()
    assert not at.exception
    assert any("same spec in every layout" in s.value for s in at.success)


def test_picks_survive_a_page_switch_and_a_deleted_entry_is_dropped(shelf):
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["tensor parallel", "data only"]).run()
    at.switch_page("views/0_Layout.py").run()
    library.delete("data only")
    at.switch_page("views/2_Compare.py").run()
    assert not at.exception
    assert at.multiselect(key="compare_sources").value == ["tensor parallel"]


def test_a_bad_link_in_compare_is_reported_not_raised(shelf):
    at = compare_page()
    at.text_area(key="compare_links").input("?mesh=2x4&axes=data&model=mlp").run()
    assert not at.exception
    assert any("Link 1" in e.value and "mesh.axes" in e.value for e in at.error)


@pytest.mark.parametrize("page", [None, "views/1_Timing.py", "views/2_Compare.py"])
def test_a_link_restores_the_layout_on_every_page(seed_dict, page):
    seed_dict.update(name="shared", mesh={"shape": [4, 2], "axes": ["data", "model"]}, rules=[["batch", "model"], ["hidden", "data"]])
    params = layout_to_params(parse_layout(seed_dict))
    at = AppTest.from_file(APP, default_timeout=300)
    if page:
        at.switch_page(page)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception
    assert at.session_state["mesh_shape_text"] == "4, 2"
    assert at.session_state["rules_base"] == [["batch", ["model"]], ["hidden", ["data"]]]
    assert at.session_state["layout_name"] == "shared"


def test_a_link_restores_the_size_preset_and_the_selected_array(seed_dict):
    from explorer.models import MODELS

    seed_dict.update(name="gpt2", model={"name": "transformer", "options": dict(MODELS["transformer"].presets["gpt2-small"], layers=1)})
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in layout_to_params(parse_layout(seed_dict)).items():
        at.query_params[key] = value
    at.query_params["array"] = "params/lm_head/kernel"
    at.run()
    assert not at.exception
    assert at.selectbox(key="size_preset::transformer").value == "custom"  # one layer: not gpt2-small
    assert at.selectbox(key="selected_path").value == "params/lm_head/kernel"
    at.number_input(key="option::transformer::layers").set_value(12).run()
    assert at.selectbox(key="size_preset::transformer").value == "gpt2-small"


def test_a_link_with_a_model_not_allowed_opens_the_rest_with_the_seeds_model_and_says_so():
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["mesh"] = "4x2"
    at.query_params["axes"] = "data,model"
    at.query_params["model"] = "evil.module:run"
    at.run()
    assert not at.exception
    assert any("opened without its model" in e.value and "model.name" in e.value for e in at.error)
    assert at.session_state["layout_name"] == "shared" and at.session_state["mesh_shape_text"] == "4, 2"  # the rest: the link's


def test_a_race_result_is_only_shown_for_the_layouts_it_raced(shelf):
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["tensor parallel", "data only"]).run()
    at.number_input(key="race_rounds").set_value(1).run()
    at.number_input(key="race_steps").set_value(1).run()
    at.button(key="race_button").click().run()
    assert not at.exception and not at.error
    race = next(d for d in at.dataframe if "ratio to library: tensor parallel" in d.value.columns)
    assert json.loads(race.proto.columns)["median step (ms)"]["type_config"]["format"] == "%.2f"  # "69" beside "159.74"
    timings = next(t.value for t in at.table if "median step" in t.value.columns)  # issue 18 item 6: not "not timed"
    assert all(re.fullmatch(r"\d+(\.\d+)? (s|ms|µs), race", value) for value in timings["median step"]), timings
    at.multiselect(key="compare_sources").set_value(["data only", "tensor parallel"]).run()  # the other way round
    assert not any("ratio to" in str(list(d.value.columns)) for d in at.dataframe)
    assert any("last race was run on other layouts" in c.value for c in at.caption)


def test_the_array_count_covers_every_layout_when_models_differ(shelf, seed_dict):
    transformer = copy.deepcopy(seed_dict)
    transformer["model"] = {
        "name": "transformer",
        "options": {
            "batch": 8,
            "seq_len": 16,
            "layers": 1,
            "d_model": 32,
            "heads": 4,
            "kv_heads": 4,
            "head_dim": 8,
            "mlp_dim": 64,
            "vocab": 64,
        },
    }
    link = "?" + "&".join(f"{k}={v}" for k, v in layout_to_params(parse_layout(transformer)).items())
    at = compare_page()
    at.text_area(key="compare_links").input(link).run()
    assert not at.exception
    heading = next(h.value for h in at.subheader if h.value.startswith("Arrays sharded differently"))
    mlp, other = ({a.path for a in analyze(parse_layout(d)).arrays} for d in (seed_dict, transformer))
    assert heading.endswith(f"of {len(mlp | other)})") and len(mlp | other) > len(mlp), heading


def test_on_a_target_every_layout_gets_its_verdict_peak_and_roofline(shelf, tmp_path, monkeypatch, seed_dict):
    """The Compare page compiles the layouts for the sidebar's target and shows XLA's figures for each."""
    from explorer.compile.target_compile import compile_target

    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["tensor parallel", "data only"]).run()
    at.selectbox(key="target_choice").set_value("v5litepod-8").run()
    assert not at.exception and not at.error
    at.button(key="compare_compile_button").click().run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "XLA peak / device" in d.value.columns).set_index("layout")
    predicted = []
    for name in ("tensor parallel", "data only"):
        result, cached = compile_target(library.load(name).layout, "v5litepod-8")
        assert cached  # the page's compile, from the disk cache
        row = table.loc[f"library: {name}"]
        assert row["fits"] == "yes" and row["bound"] == result.estimate.bound
        assert row["XLA peak / device"] == human_bytes(result.judged_peak_bytes)  # in HBM, as the verdict judges it
        assert row["step ≥ (lower bound)"] == human_seconds(result.estimate.step_s)  # never "0.000383 ms"
        assert row["predicted step"] == human_seconds(result.estimate.predicted_s)  # beside the bound, labelled
        predicted.append(result.estimate.predicted_s)
    assert any(c.value.startswith("Predicted step: the step model's prediction") for c in at.caption)
    assert len([c for c in at.get("plotly_chart")]) >= 3  # memory per device, the peaks by kind, the layouts' rooflines
    peaks = next(d.value for d in at.dataframe if "XLA's total" in set(d.value.get("kind", ()))).set_index("kind")  # each peak by kind
    for name in ("tensor parallel", "data only"):
        breakdown = compile_target(library.load(name).layout, "v5litepod-8")[0].memory_breakdown
        assert peaks.loc["XLA's total", f"library: {name}"] == human_bytes(breakdown.allocated_bytes)
        assert peaks.loc["parameter", f"library: {name}"] == human_bytes(breakdown.kind_bytes("parameter"))
    # each layout's top lines by communication side by side: the guide's MLP communicates at its two matmul lines
    tops = [c.value for c in at.caption if c.value.startswith("Top lines by communication:")]
    assert len(tops) == 2 and all("y = nn.Dense(" in top for top in tops)  # the line's code, read from mlp.py
    # The race shows the ratio the prediction expects on the target beside the one it measures here.
    at.number_input(key="race_rounds").set_value(1).run()
    at.number_input(key="race_steps").set_value(1).run()
    at.button(key="race_button").click().run()
    assert not at.exception and not at.error
    race = next(d.value for d in at.dataframe if "predicted ratio on v5litepod-8" in d.value.columns)
    assert list(race["predicted ratio on v5litepod-8"]) == ["1.000", f"{predicted[1] / predicted[0]:.3f}"]


def test_layouts_with_explicit_axes_compare_by_their_types(tmp_path, monkeypatch):
    """Flax Gemma on Explicit axes, FSDP and tensor axes swapped: the differences are the specs in the values' types."""
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.external.factories:make_flax_gemma")
    gemma = {"rules": [], "model": {"name": "tests.external.factories:make_flax_gemma", "options": {}}}
    wide = parse_layout(
        {"name": "2x4", "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]}, **gemma}
    )
    swapped = {"name": "tests.external.factories:make_flax_gemma", "options": {"fsdp_axis": "model", "tensor_axis": "data"}}
    tall = parse_layout(
        {
            "name": "4x2",
            "mesh": {"shape": [4, 2], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
            **gemma,
            "model": swapped,
        }
    )
    library.save("gemma 2x4", wide)
    library.save("gemma 4x2", tall)
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["gemma 2x4", "gemma 4x2"]).run()
    assert not at.exception and not at.error
    differences = next(d.value for d in at.dataframe if "path" in d.value.columns).set_index("path")
    embedding = differences.loc["embedder/embedding"]
    assert embedding["library: gemma 2x4"] == "P('model', 'data')"
    assert embedding["library: gemma 2x4 · shard"] == str(analyze(wide).array("embedder/embedding").shard_shape)
    assert embedding["library: gemma 4x2"] == "P('data', 'model')"
    assert embedding["library: gemma 4x2 · shard"] == str(analyze(tall).array("embedder/embedding").shard_shape)
    assert any(path.startswith("activations/") for path in differences.index)  # rows read from the types


def test_on_several_slices_every_layout_gets_its_verdict_and_dcn_traffic(shelf, tmp_path, monkeypatch):
    """Two v5e slices of 4 chips: the verdict and the bytes per chip per step that cross the DCN, for each layout."""
    from explorer.compile.target_compile import compile_target

    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    at = compare_page()
    at.multiselect(key="compare_sources").set_value(["tensor parallel", "data only"]).run()
    at.selectbox(key="target_choice").set_value("2xv5litepod-4").run()
    assert not at.exception and not at.error
    at.button(key="compare_compile_button").click().run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "DCN / step" in d.value.columns).set_index("layout")
    for name in ("tensor parallel", "data only"):
        result, cached = compile_target(library.load(name).layout, "2xv5litepod-4")
        assert cached and result.target.num_slices == 2 and result.dcn_bytes > 0
        row = table.loc[f"library: {name}"]
        assert row["fits"] == "yes" and row["DCN / step"] == human_bytes(result.dcn_bytes)


def test_a_stopped_timing_is_said_beside_its_median(shelf, seed_dict):
    """A timing stopped on the Timing page gives the median of fewer steps than asked: Compare says so beside it."""
    from explorer.timing.timing import time_layout
    from ui.state import TIMING_RESULTS

    seed = parse_layout(seed_dict)
    stopped = time_layout(seed, steps=40, warmup=0, should_stop=lambda: True)
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state[TIMING_RESULTS] = {seed.key: stopped}
    at.switch_page("views/2_Compare.py")
    at.run()
    at.multiselect(key="compare_sources").set_value(["Current layout (sidebar)", "data only"]).run()
    assert not at.exception
    timings = next(t.value for t in at.table if "median step" in t.value.columns).set_index("layout")["median step"]
    median = human_seconds(stopped.step_s.median)
    assert timings.iloc[0] == f"{median}, stopped after 1 of 40 steps" and timings.iloc[1] == "not timed", timings


def test_the_current_layout_edited_since_it_was_loaded_is_named_as_the_layout_page_names_it(shelf):
    at = AppTest.from_file(APP, default_timeout=300).run()
    at.number_input(key="option::mlp::layers").set_value(3).run()
    at.switch_page("views/2_Compare.py").run()
    at.multiselect(key="compare_sources").set_value(["Current layout (sidebar)", "tensor parallel"]).run()
    assert not at.exception
    differences = next(d.value for d in at.dataframe if "path" in d.value.columns)
    # it read "current: seed-2x4", the loaded layout's name, for the edited one
    assert "current: seed-2x4 (edited)" in differences.columns, list(differences.columns)
