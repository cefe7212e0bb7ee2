"""The report against Flax's own recipes and really materialised arrays, leaf by leaf.

Cases: the built-in models, one small model per annotation style real codebases use
(``tests/class_models.py``), and real public Flax models (``tests/external``) with their
authors' rules, each on a 2x4 and a 2x2x2 mesh.
"""

import functools

import pytest

from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.models import build_model
from tests import ground_truth
from tests import class_models
from tests.class_models import ALL as CLASS_FACTORIES
from tests.class_models import ISSUE17 as ISSUE17_FACTORIES
from tests.external import factories as external
from tests.small_models import SMALL_TRANSFORMER_OPTIONS

EXTERNAL = "tests.external.factories"
MESH_2X4 = {"shape": [2, 4], "axes": ["data", "model"]}
MESH_2X2X2 = {"shape": [2, 2, 2], "axes": ["data", "fsdp", "model"]}
TRANSFORMER = {
    **SMALL_TRANSFORMER_OPTIONS,
    "gated_mlp": True,
}
MOE_MESH = {"shape": [2, 2, 2], "axes": ["data", "expert", "model"]}  # T5X's MoE mesh: expert=2, model=2
MAXTEXT_MESH = {"shape": [int(n) for n in external.MAXTEXT_MESH_SHAPE.split("x")], "axes": list(external.maxtext_base.MESH_AXES)}
MAXTEXT_MOE_SHAPE = "1x1x1x2x1x1x1x1x2x1x2x1"  # fsdp=2, tensor=2, expert=2: the expert kernels split over 'expert'
MAXTEXT_MOE_MESH = {"shape": [int(n) for n in MAXTEXT_MOE_SHAPE.split("x")], "axes": list(external.maxtext_base.MESH_AXES)}
LTX_AXES = list(external.AUTHORS_MESH_AXES["maxdiffusion_ltx"])  # maxdiffusion ltx_video.yml mesh_axes
FSDP_TP = [
    ["batch", "data"],
    ["hidden", "model"],
    ["mlp", "model"],
    ["heads", "model"],
    ["kv_heads", "model"],
    ["vocab", "model"],
    ["embed", "data"],
    ["layer", None],
]


def case(mesh, rules, model, options=None, framework="linen", recipe="logical"):
    return {"mesh": mesh, "rules": rules, "model": {"name": model, "options": options or {}}, "framework": framework, "recipe": recipe}


CASES = {
    "guide-mlp": case(MESH_2X4, [["batch", "data"], ["hidden", "model"]], "mlp", {"batch": 8, "layers": 2, "depth": 64, "scan": False}),
    "guide-mlp-scan": case(MESH_2X4, [["batch", "data"], ["hidden", "model"]], "mlp", {"batch": 8, "layers": 3, "depth": 64, "scan": True}),
    "transformer-fsdp-tp": case(MESH_2X4, FSDP_TP, "transformer", {**TRANSFORMER, "scan": False}),
    "transformer-scan-3d": case(
        {"shape": [2, 2, 2], "axes": ["data", "pipe", "model"]},
        [["layer", "pipe"], ["batch", ["data", "pipe"]], ["heads", "model"], ["mlp", "model"], ["embed", "data"]],
        "transformer",
        {**TRANSFORMER, "scan": True},
    ),
    "nnx-guide": case(MESH_2X4, [], "nnx-guide", {"depth": 64}, "nnx"),
    "nnx-guide-logical": case(
        MESH_2X4, [["batch", "data"], ["hidden", "model"], ["embed", None]], "nnx-guide", {"depth": 64, "logical": True}, "nnx"
    ),
    # one model per annotation style (issue 8's classes)
    "short-annotation": case(MESH_2X4, [["batch", "data"], ["heads", "model"]], "tests.class_models:make_short_annotation"),
    "partitioning-style": case(
        MESH_2X4, [["batch", "data"], ["mlp", "model"], ["embed", "data"]], "tests.class_models:make_partitioning_style"
    ),
    "repeated": case(MESH_2X4, [["batch", "data"], ["hidden", "model"]], "tests.class_models:make_repeated"),
    "repeated-scan": case(
        MESH_2X4, [["batch", "data"], ["hidden", "model"], ["layer", None]], "tests.class_models:make_repeated", {"scan": True}
    ),
    "mesh-axis-constraint": case(MESH_2X4, [], "tests.class_models:make_mesh_axis_constraint", recipe="mesh"),
    "bridged": case(MESH_2X4, [["batch", "data"], ["hidden", "model"], ["embed", None]], "tests.class_models:make_bridged", recipe="eager"),
    "nnx-resolved-activation": case(MESH_2X4, [["batch", "data"], ["embed", None]], "tests.class_models:make_nnx_resolved_activation"),
    "dead-in-call": case(MESH_2X4, [["batch", "data"], ["hidden", "model"], ["embed", None]], "tests.class_models:make_dead_in_call"),
    "nnx-logical": case(MESH_2X4, [["embed", "data"], ["mlp", "model"]], "tests.class_models:make_nnx_logical", framework="nnx"),
    # issue 17: one small model per class (tests/class_models.py)
    "i17-1-many-names": case(MESH_2X4, class_models.many_names_rules(), "tests.class_models:make_many_names"),
    "i17-2-twelve-axis": case(
        {"shape": list(class_models.MAXTEXT_SHAPE), "axes": list(class_models.MAXTEXT_AXES)},
        class_models.MAXTEXT_STYLE_RULES,
        "tests.class_models:make_twelve_axis",
    ),
    "i17-3-lifted-axes": case(
        MESH_2X4,
        [
            ["batch", "data"],
            ["embed", None],
            ["mlp", "model"],
            ["joined_kv", "model"],
            ["expert", "data"],
            ["layers", None],
            ["length", None],
        ],
        "tests.class_models:make_lifted_axes",
    ),
    # the same with names no rule mentions (replicated): the forward pass must be read on the boxed state
    "i17-3-lifted-axes-unruled": case(
        MESH_2X4, [["batch", "data"], ["mlp", "model"], ["length", None]], "tests.class_models:make_lifted_axes"
    ),
    "i17-4-value-named": case(
        MESH_2X4,
        [["batch", "data"], ["heads", "model"], ["embed", None], ["kv", None], ["length", None]],
        "tests.class_models:make_value_named",
    ),
    "i17-4-nnx-value-named": case(
        MESH_2X4, [["embed", "data"], ["heads", "model"]], "tests.class_models:make_nnx_value_named", framework="nnx"
    ),
    "i17-5-weight-casts": case(
        MESH_2X4, [["batch", "data"], ["mlp", "model"], ["embed", None], ["layers", None]], "tests.class_models:make_weight_casts"
    ),
    "i17-6-nnx-calls-linen": case(MESH_2X4, class_models.DUPLICATE_RULES, "tests.class_models:make_nnx_calls_linen", framework="nnx"),
    "i17-7-maxtext-style-moe": case(MESH_2X4, class_models.MOE_RULES, "tests.class_models:make_maxtext_style_moe"),
    "i17-7-vmap-moe": case(MESH_2X4, class_models.MOE_RULES, "tests.class_models:make_vmap_moe"),
    "i17-7-nnx-moe": case(MESH_2X4, class_models.MOE_RULES, "tests.class_models:make_nnx_moe", framework="nnx"),
    "i17-8-bridged-scan": case(MESH_2X4, class_models.BRIDGE_RULES, "tests.class_models:make_bridged_scan"),
    # duplicate rules: the metadata_fn's nn.LogicallyPartitioned boxes are Linen's (first rule wins: mlp -> model),
    # where NNX's eager sharding at creation would take the last (mlp -> None)
    "i17-8-bridged-scan-duplicates": case(
        MESH_2X4, class_models.BRIDGE_RULES + [["mlp", None], ["activation_mlp", None]], "tests.class_models:make_bridged_scan"
    ),
    # real public models with their authors' rules
    "flaxformer-moe-masked": case(MOE_MESH, external.AUTHORS_RULES["flaxformer_moe"], f"{EXTERNAL}:make_flaxformer_moe"),
    "flaxformer-moe-scatter": case(
        MOE_MESH, external.AUTHORS_RULES["flaxformer_moe"], f"{EXTERNAL}:make_flaxformer_moe", {"router": "tokens_choose_scatter"}
    ),
    "flaxformer-moe-experts-choose": case(
        MOE_MESH, external.AUTHORS_RULES["flaxformer_moe"], f"{EXTERNAL}:make_flaxformer_moe", {"router": "experts_choose"}
    ),
    # a user's shorter rule set: the other names are replicated (the forward pass is read on the boxed state)
    "flaxformer-moe-few-rules": case(
        MOE_MESH, [["batch", ["expert", "data"]], ["expert", "expert"], ["mlp", "model"]], f"{EXTERNAL}:make_flaxformer_moe"
    ),
    "maxtext-llama2-scan": case(MAXTEXT_MESH, external.maxtext_rules(), f"{EXTERNAL}:make_maxtext_decoder"),
    "maxtext-llama2-loop": case(MAXTEXT_MESH, external.maxtext_rules(), f"{EXTERNAL}:make_maxtext_decoder", {"scan_layers": False}),
    "maxtext-simple-mlp-scan": case(MAXTEXT_MESH, external.maxtext_rules(), f"{EXTERNAL}:make_maxtext_decoder", {"block": "simple_mlp"}),
    # MaxText's Mixtral layer (moe.RoutedMoE, dense dispatch/combine at capacity 1.25) under base.yml's rules
    "maxtext-moe-scan": case(MAXTEXT_MOE_MESH, external.maxtext_rules(), f"{EXTERNAL}:make_maxtext_moe", {"mesh_shape": MAXTEXT_MOE_SHAPE}),
    "maxtext-moe-loop-top1-remat": case(
        MAXTEXT_MOE_MESH,
        external.maxtext_rules(),
        f"{EXTERNAL}:make_maxtext_moe",
        {"mesh_shape": MAXTEXT_MOE_SHAPE, "scan_layers": False, "num_experts_per_tok": 1, "remat_policy": "minimal"},
    ),
    "t5x-1d": case(MESH_2X4, external.AUTHORS_RULES["t5x_t5"], f"{EXTERNAL}:make_t5x_t5"),
    "t5x-2d": case(MESH_2X4, external.AUTHORS_RULES["t5x_t5_2d"], f"{EXTERNAL}:make_t5x_t5"),
    "t5x-2x2x2": case(
        {"shape": [2, 2, 2], "axes": ["data", "replica", "model"]}, external.AUTHORS_RULES["t5x_t5_2d"], f"{EXTERNAL}:make_t5x_t5"
    ),
    "lm1b": case(MESH_2X4, external.AUTHORS_RULES["flax_lm1b"], f"{EXTERNAL}:make_flax_lm1b"),
    "lm1b-2x2x2": case(MESH_2X2X2, external.AUTHORS_RULES_3AXIS["flax_lm1b"], f"{EXTERNAL}:make_flax_lm1b"),
    "mu-transformer": case({"shape": [2, 4], "axes": ["X", "Y"]}, [], f"{EXTERNAL}:make_mu_transformer", {"n_layer": 2}, recipe="mesh"),
    "vit": case(MESH_2X4, external.AUTHORS_RULES["big_vision_vit"], f"{EXTERNAL}:make_big_vision_vit"),
    "vit-scan-2x2x2": case(MESH_2X2X2, external.AUTHORS_RULES_3AXIS["big_vision_vit"], f"{EXTERNAL}:make_big_vision_vit", {"scan": True}),
    "nnx-guide-external": case(MESH_2X4, [], f"{EXTERNAL}:make_flax_nnx_guide", {"depth": 64}, "nnx"),
    "tunix-llama3": case(MESH_2X4, [], f"{EXTERNAL}:make_tunix_llama3", framework="nnx"),
    "tunix-llama3-2x2x2": case(MESH_2X2X2, [], f"{EXTERNAL}:make_tunix_llama3", {"fsdp_axis": "fsdp"}, "nnx"),
    "tunix-gemma": case(MESH_2X4, [], f"{EXTERNAL}:make_tunix_gemma", framework="nnx"),
    # maxdiffusion LTX-Video on ltx_video.yml's mesh axes and rules: scanned, rematted DiT blocks (the pipeline's
    # gradient_checkpointing), then the config's own split (data=1, fsdp=-1 -> 4) without remat
    "maxdiffusion-ltx-2x2x1x2": case(
        {"shape": [2, 2, 1, 2], "axes": LTX_AXES}, external.AUTHORS_RULES["maxdiffusion_ltx"], f"{EXTERNAL}:make_maxdiffusion_ltx"
    ),
    "maxdiffusion-ltx-1x4x1x2": case(
        {"shape": [1, 4, 1, 2], "axes": LTX_AXES},
        external.AUTHORS_RULES["maxdiffusion_ltx"],
        f"{EXTERNAL}:make_maxdiffusion_ltx",
        {"gradient_checkpointing": "none"},
    ),
}
EXTERNAL_FACTORIES = ",".join(
    f"{EXTERNAL}:{name}"
    for name in (
        "make_t5x_t5",
        "make_flax_lm1b",
        "make_mu_transformer",
        "make_big_vision_vit",
        "make_flax_nnx_guide",
        "make_tunix_llama3",
        "make_tunix_gemma",
        "make_maxtext_decoder",
        "make_maxtext_moe",
        "make_flaxformer_moe",
        "make_maxdiffusion_ltx",
    )
)


@pytest.fixture
def allow_factories(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", ",".join([CLASS_FACTORIES, ISSUE17_FACTORIES, EXTERNAL_FACTORIES]))


def layout_of(name, cases=None):
    spec = (cases or CASES)[name]
    return parse_layout({"name": name, "mesh": spec["mesh"], "rules": spec["rules"], "model": spec["model"]})


def truth_inputs(name, cases=None):
    """The ground truth's own view of a case: the model as its factory returns it, a real mesh, Flax's rules.

    A factory is imported by the ground truth itself; a built-in model is built by the registry (that is the
    model under test, not the analysis)."""
    spec = (cases or CASES)[name]
    model_name, options = spec["model"]["name"], spec["model"]["options"]
    if ":" in model_name:
        model = ground_truth.factory(model_name, options)
    else:
        model = ground_truth.model_of(build_model(layout_of(name, cases).model))
    mesh = ground_truth.mesh_of(spec["mesh"]["shape"], spec["mesh"]["axes"])
    return model, mesh, ground_truth.flax_rules(spec["rules"])


def check_state(name, cases=None):
    cases = cases or CASES
    report = analyze(layout_of(name, cases))
    model, mesh, rules = truth_inputs(name, cases)
    if cases[name]["framework"] == "nnx":
        truth, flax_specs = ground_truth.nnx_state(model, mesh, rules)
        params = {a.path: ground_truth.normal(a.spec, len(a.shape)) for a in report.arrays if a.kind == "param"}
        assert params == {p: s for p, s in flax_specs.items() if p in params}, "differs from nnx.get_abstract_model"
    else:
        truth = ground_truth.linen_state(model, mesh, rules, cases[name]["recipe"])
    if cases[name]["recipe"] == "eager":  # only the variables are placed by Flax; the optimizer follows XLA's choice
        truth = {path: leaf for path, leaf in truth.items() if path.startswith("params/")}
    kinds = ("param",) if cases[name]["recipe"] == "eager" else ("param", "opt_state")
    problems = ground_truth.compare(report, truth, kinds)
    assert not problems, f"{len(problems)} disagreement(s):\n" + "\n".join(problems[:20])


@functools.cache
def traced(name):
    """A case's ground-truth inputs and JAX's live constraints of its forward pass, traced once for the three tests that
    read them (in order, by module, their bytes); each case's own arguments, so a CASES entry is traced on its own."""
    inputs = truth_inputs(name)
    return inputs, tuple(ground_truth.constraints(*inputs))


def check_activations(name, cases=None):
    cases = cases or CASES
    report = analyze(layout_of(name, cases))
    ours = [
        (tuple(a.shape), ground_truth.normal(a.spec, len(a.shape)))
        for a in report.arrays
        if a.kind == "activation" and a.path != "activations/output"
    ]
    if cases is CASES:
        inputs, found = traced(name)
        truth = ground_truth.activations(*inputs, found=found)
    else:
        truth = ground_truth.activations(*truth_inputs(name, cases))
    assert ours == truth, _activation_diff(ours, truth)


def _activation_diff(ours, truth) -> str:
    lines = [f"report lists {len(ours)} activation constraint(s), the jaxpr has {len(truth)}"]
    for i in range(max(len(ours), len(truth))):
        a = ours[i] if i < len(ours) else None
        b = truth[i] if i < len(truth) else None
        if a != b:
            lines.append(f"first difference at #{i}: report {a}, JAX {b}")
            break
    return "\n".join(lines)


def check_activation_bytes(name, cases=None):
    cases = cases or CASES
    layout = layout_of(name, cases)
    if cases is CASES:
        inputs, found = traced(name)
        truth = ground_truth.activation_bytes(*inputs, found=found)
    else:
        truth = ground_truth.activation_bytes(*truth_inputs(name, cases))
    assert analyze(layout).totals.activation_bytes == truth


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_state_leaf_agrees_with_the_materialised_state(name, allow_factories):
    check_state(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_activations_are_the_programs_constraints_in_order(name, allow_factories):
    check_activations(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_activation_names_the_module_jax_names(name, allow_factories):
    """Each listed activation's module is where JAX's name stack (Flax's module scopes) puts its constraint.

    Compared where comparable: the report names a module relative to the top module, so it must be the name stack
    or end it; constraints with no name stack (NNX modules push none) are not compared."""
    report = analyze(layout_of(name))
    ours = [(tuple(a.shape), a.module) for a in report.arrays if a.kind == "activation" and a.path != "activations/output"]
    truth = [(c.shape, c.name_stack) for c in traced(name)[1] if c.activation]
    assert [s for s, _ in ours] == [s for s, _ in truth], "the activations differ (see the in-order test)"
    wrong = [
        (i, module, stack)
        for i, ((_, module), (_, stack)) in enumerate(zip(ours, truth))
        if stack and not (stack == module or stack.endswith("/" + module))
    ]
    assert not wrong, "\n".join(f"#{i}: report module {m!r}, JAX name stack {s!r}" for i, m, s in wrong[:10])


LOOP_FREE = [
    "maxtext-moe-loop-top1-remat",
    "flaxformer-moe-masked",
    "flaxformer-moe-scatter",
    "flaxformer-moe-experts-choose",
    "maxtext-llama2-loop",
    "i17-1-many-names",
    "i17-2-twelve-axis",
    "i17-4-value-named",
    "i17-6-nnx-calls-linen",
    "i17-7-maxtext-style-moe",
    "i17-7-vmap-moe",
    "i17-7-nnx-moe",
    "guide-mlp",
    "transformer-fsdp-tp",
    "short-annotation",
    "partitioning-style",
    "repeated",
    "mesh-axis-constraint",
    "bridged",
    "dead-in-call",
    "nnx-resolved-activation",
    "nnx-logical",
    "t5x-1d",
    "t5x-2d",
    "t5x-2x2x2",
    "lm1b",
    "lm1b-2x2x2",
    "vit",
    "tunix-llama3",
    "tunix-gemma",
]


@pytest.mark.parametrize("name", LOOP_FREE)
def test_activation_bytes_are_each_constraint_once_and_the_output_not_again(name, allow_factories):
    """Without loops every constraint runs once: the total is JAX's shard bytes of each, the output not counted twice."""
    check_activation_bytes(name)


def test_the_ground_truth_imports_no_explorer_code():
    """Paths, rules and the weight/activation split in the ground truth come from JAX and Flax, never the explorer."""
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(ground_truth.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    assert not [m for m in imported if m == "explorer" or m.startswith("explorer.")]


def test_the_ground_truth_tells_weight_constraints_from_activations_by_data_flow():
    """In the scanned body of class 5, five constraints are on weights (the unboxed reads, a bf16 cast, its transpose,
    a slice of a weight) and two on values computed from the input; a submodule named ``value`` keeps its path."""
    model, mesh, rules = truth_inputs("i17-5-weight-casts")
    found = ground_truth.constraints(model, mesh, rules)
    assert [(c.shape, str(c.dtype), c.activation) for c in found] == [
        ((32, 64), "float32", False),
        ((32,), "float32", False),
        ((32, 64), "bfloat16", False),
        ((64, 32), "bfloat16", False),
        ((16,), "bfloat16", False),
        ((8, 64), "bfloat16", True),
        ((8, 32), "float32", True),
    ]
    state = ground_truth.linen_state(*truth_inputs("i17-4-value-named"))
    assert {"params/value/kernel", "params/value/bias", "params/key/kernel", "params/query/kernel"} <= set(state)


def test_the_ground_truth_reads_the_spec_each_call_site_really_produced():
    """Class 6: the NNX variable resolves with NNX's semantics (last duplicate: hidden -> data), Linen's
    nn.with_logical_constraint in the same model with Linen's (first free rule: hidden -> model)."""
    model, mesh, rules = truth_inputs("i17-6-nnx-calls-linen")
    state, specs = ground_truth.nnx_state(model, mesh, rules)
    assert specs["w1"] == (("data",), ("model",)) and specs["w2"] == ((), ("model",))
    assert ground_truth.activations(model, mesh, rules) == [((8, 64), (("data",), ("model",)))]
