"""Rules presets give layouts JAX accepts, for every built-in model, size and mesh (issue 18, item 3)."""

import pytest

from explorer.analysis.analyzer import analyze
from explorer.analysis.report import ERROR_CODES
from explorer.layout import parse_layout
from explorer.models import MODELS
from explorer.analysis.presets import fit_preset, model_preset
from explorer.rules import PRESETS

# The sizes of more than 12 layers stacked with nn.scan: a preset fits the same dimensions either way (the stacked
# 'layer' axis besides), and tracing 32 or 80 unrolled blocks for each of 75 cases took 140 of this file's 170 s.
# One unrolled llama2-70b case is kept below.
MODELS_AND_SIZES = [("mlp", {}), ("nnx-guide", {}), ("nnx-guide", {"logical": True}), ("transformer", {})] + [
    ("transformer", dict(values) | ({"scan": True} if values["layers"] > 12 else {})) for values in MODELS["transformer"].presets.values()
]
MESHES = [([2, 4], ["data", "model"]), ([4, 2], ["fsdp", "tensor"]), ([16, 16], ["data", "model"])]


def refused(layout):
    return [w.message for w in analyze(layout).warnings if w.code in ERROR_CODES]


# Every model on every mesh, but the NNX guide's model only on meshes with its axes: it fixes P('data', 'model') itself
CASES = [
    pytest.param(
        model,
        options,
        mesh,
        id=f"{model}-{options.get('vocab', options.get('logical', ''))}-{'x'.join(map(str, mesh[0]))}:{','.join(mesh[1])}",
    )
    for model, options in MODELS_AND_SIZES
    for mesh in MESHES
    if model != "nnx-guide" or mesh[1] == ["data", "model"]
]


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("model,options,mesh", CASES)
def test_every_preset_gives_a_layout_jax_accepts(model, options, mesh, preset):
    layout = parse_layout({"mesh": {"shape": mesh[0], "axes": mesh[1]}, "model": {"name": model, "options": options}})
    fitted = fit_preset(preset, layout)
    fitted_layout = parse_layout({**layout.to_dict(), "rules": [[n, a] for n, a in fitted.rules]})
    assert refused(fitted_layout) == list(fitted.refused)  # anything left is said with the preset
    if not (model == "nnx-guide" and mesh[0] == [16, 16]):  # the guide's model puts its batch of 8 on 'data' itself
        assert fitted.refused == ()
    for name, axes in fitted.rules:  # what was left unsharded is said
        if axes is None and any(note.startswith(f"{name!r} left unsharded") for note in fitted.notes):
            assert name in {n for n, _ in PRESETS[preset]("a", "b")}


def test_an_unrolled_llama2_70b_is_fitted_as_its_scanned_twin():
    """The 80 blocks unrolled (the size's own default) get the same rules as the scanned model the test above uses."""
    options = MODELS["transformer"].presets["llama2-70b"]
    mesh = {"shape": [4, 2], "axes": ["fsdp", "tensor"]}
    unrolled, scanned = (
        parse_layout({"mesh": mesh, "model": {"name": "transformer", "options": dict(options) | {"scan": scan}}}) for scan in (False, True)
    )
    fitted = fit_preset("fsdp+tensor-parallel", unrolled)
    assert fitted.refused == () and refused(parse_layout({**unrolled.to_dict(), "rules": [[n, a] for n, a in fitted.rules]})) == []
    assert [rule for rule in fitted.rules if rule[0] != "layer"] == [
        rule for rule in fit_preset("fsdp+tensor-parallel", scanned).rules if rule[0] != "layer"
    ]


def test_gpt2_vocab_is_left_unsharded_and_said_so():
    gpt2 = MODELS["transformer"].presets["gpt2-small"]
    layout = parse_layout({"mesh": {"shape": [4, 2], "axes": ["fsdp", "tensor"]}, "model": {"name": "transformer", "options": gpt2}})
    fitted = fit_preset("fsdp+tensor-parallel", layout)
    assert ("vocab", None) in fitted.rules and ("mlp", "tensor") in fitted.rules
    assert fitted.notes == ("'vocab' left unsharded: params/embedding dim 0 has size 50257, which mesh axes tensor (2) do not divide.",)


def test_the_logical_nnx_guide_gets_a_rule_for_embed():
    layout = parse_layout(
        {"mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "model": {"name": "nnx-guide", "options": {"logical": True}}}
    )
    assert ("embed", None) in fit_preset("fsdp+tensor-parallel", layout).rules or ("embed", "data") in fit_preset(
        "fsdp+tensor-parallel", layout
    ).rules


def test_each_model_has_a_preset_to_offer():
    assert {model_preset(name) for name in MODELS} <= set(PRESETS)


def test_a_preset_is_fitted_on_explicit_axes_where_jax_refuses_an_indivisible_dimension_while_tracing():
    gpt2 = MODELS["transformer"].presets["gpt2-small"]
    layout = parse_layout(
        {
            "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
            "model": {"name": "transformer", "options": {**gpt2, "layers": 1, "seq_len": 64}},
        }
    )
    fitted = fit_preset("fsdp+tensor-parallel", layout)
    assert ("vocab", None) in fitted.rules and fitted.notes[0].startswith("'vocab' left unsharded: params/embedding dim 0 has size 50257")
    assert analyze(parse_layout({**layout.to_dict(), "rules": [[n, a] for n, a in fitted.rules]})).mesh  # JAX traces it
