"""The advisor on models it was not built with (issue 30): every logical name ruled by role (MaxText's activation-only
names included), scanned read from the trace, a mixture of experts costed as it runs, stage 1's ranking and a robust
calibration, memory (remat, microbatches) as a search dimension."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re

import jax
import numpy as np
import pytest

from explorer import advisor
from explorer.advisor import estimate, fitting, search as search_module, space
from explorer.advisor.calibration import CALIBRATION_CLIP
from explorer.analysis.analyzer import analyze, logical_names
from explorer.layout import parse_layout
from explorer.predict.roofline import Estimate
from explorer.hardware.targets import parse_target
from tests.explorer import compile_result
from tests.external import factories as external

TARGET = "v5litepod-8"
MAXTEXT = "tests.external.factories:make_maxtext_decoder"
MOE = "tests.external.factories:make_flaxformer_moe"
MAXTEXT_MOE = "tests.external.factories:make_maxtext_moe"
MAXTEXT_MESH = {"shape": [int(n) for n in external.MAXTEXT_MESH_SHAPE.split("x")], "axes": list(external.maxtext_base.MESH_AXES)}
MOE_SHAPE = "1x1x1x2x1x1x1x1x2x1x2x1"  # base.yml's 12 axes: fsdp 2, tensor 2, expert 2


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", f"{MAXTEXT},{MOE},{MAXTEXT_MOE}")


def maxtext(**options):
    return parse_layout(
        {"name": "maxtext", "mesh": MAXTEXT_MESH, "rules": external.maxtext_rules(), "model": {"name": MAXTEXT, "options": options}}
    )


def maxtext_moe(shape=MOE_SHAPE, **options):
    """MaxText's Mixtral layer (moe.RoutedMoE, dense dispatch/combine) with base.yml's rules on its 12-axis mesh; the
    layers take the mesh they are traced under (``mesh_shape="context"``), so a candidate's mesh is theirs too."""
    return parse_layout(
        {
            "name": "maxtext-moe",
            "rules": external.maxtext_rules(),
            "mesh": {"shape": [int(n) for n in shape.split("x")], "axes": list(external.maxtext_base.MESH_AXES)},
            "model": {"name": MAXTEXT_MOE, "options": {"mesh_shape": external.MAXTEXT_CONTEXT_MESH, **options}},
        }
    )


# --- 1. every name ruled, by role ----------------------------------------------------------------------


def test_every_logical_name_maxtext_uses_gets_a_rule_by_role_in_every_candidate_activation_only_names_included():
    """MaxText's decoder feeds its input as (activation_embed_and_logits_batch, activation_length, activation_embed):
    names no parameter carries. Before, they had no role and were replicated: the input (the whole token grid) on
    every device. Now each gets its role's axes in every candidate, and the input is split over the batch axes."""
    layout = maxtext()
    names = logical_names(layout.model, tuple(layout.mesh.axes))
    assert {"activation_embed_and_logits_batch", "activation_length", "activation_embed"} <= set(names)
    layouts = advisor.candidate_layouts(layout, parse_target(TARGET))
    assert len(layouts) > 10
    for candidate in layouts[1:]:
        rules = {r.logical: r.mesh for r in candidate.rules}
        assert set(rules) == set(names), candidate.name
        batch_axes = [a for a in candidate.mesh.axes if a in ("data", "fsdp")]
        if batch_axes:
            assert rules["activation_embed_and_logits_batch"] == rules["batch"] if "batch" in rules else True
            assert rules["activation_embed_and_logits_batch"] is not None, candidate.name
    search = advisor.stage1(layout, TARGET)
    fsdp8 = next(c for c in search.candidates if c.layout.name == "fsdp8")
    report = analyze(fsdp8.layout)
    (tokens,) = [a for a in report.arrays if a.kind == "input"]
    assert tokens.spec[0] in ("fsdp", ("fsdp",)), tokens.spec  # split 8 ways, not replicated
    assert search.guessed_roles == {}  # every name MaxText uses here is a known convention


def test_maxtext_t5x_and_flaxformer_names_have_their_roles_and_unknown_names_are_guessed_and_shown():
    roles = space.default_roles(
        [
            "activation_batch_no_exp",
            "embed_no_exp",
            "exp",
            "q_lora",
            "kv_lora",
            "activation_exp",
            "activation_mlp",
            "activation_vocab",
            "activation_heads",
            "mlp_moe",
            "expert_replicas",
            "joined_kv",
            "unmodeled",
            "layers",
            "kv_head_dim",
            "activation_kv_length",
        ]
    )
    assert roles == {
        "activation_batch_no_exp": "batch_no_expert",
        "embed_no_exp": "embed_no_expert",
        "exp": "expert",
        "q_lora": "embed",
        "kv_lora": "embed",
        "activation_exp": "expert",
        "activation_mlp": "tensor",
        "activation_vocab": "tensor",
        "activation_heads": "tensor",
        "mlp_moe": "tensor",
        "expert_replicas": "batch",
        "joined_kv": "tensor",
        "unmodeled": "none",
        "layers": "none",
        "kv_head_dim": "none",
        "activation_kv_length": "none",
    }
    # The expert kernels' embed_no_exp is FSDP-sharded (not over the expert axis, which their exp dimension takes).
    rules = dict(map(tuple, space.rules_for(roles, ["fsdp", "expert", "tensor"])))
    assert rules["embed_no_exp"] == "fsdp" and rules["exp"] == "expert" and rules["activation_batch_no_exp"] == "fsdp"
    assert rules["q_lora"] == ["fsdp", "expert"] and rules["activation_batch_no_exp"] != rules.get("activation_batch", ["fsdp", "expert"])
    assert space.guessed_roles(["my_batch_thing", "attn_heads_x", "zz", "embed"]) == {
        "my_batch_thing": "batch",
        "attn_heads_x": "tensor",
        "zz": "none",
    }


def test_every_name_maxtexts_moe_uses_is_ruled_in_every_candidate_and_its_experts_split_over_expert_then_fsdp():
    """MaxText's MoE resolves its activations' names itself (``maybe_shard_with_logical``): ``activation_exp``,
    ``activation_batch_moe``, ``activation_embed_moe``... reach JAX with no name, and before they had no rule in any
    candidate (the dispatched tokens replicated over the expert axis). Now the trace reads them and each is ruled by its
    role; the expert kernels ``(exp, embed_moe, mlp_moe)`` are split over the expert axis, and FSDP within an expert
    (base.yml's ``embed_moe`` leaves the expert axis to ``exp``)."""
    layout = maxtext_moe("1x1x1x2x1x1x1x1x1x1x2x1")  # fsdp 2 x expert 2
    names = set(logical_names(layout.model, tuple(layout.mesh.axes)))
    activation_only = {
        "activation_exp",
        "activation_batch_moe",
        "activation_embed_moe",
        "activation_mlp",
        "activation_length_moe",
        "activation_norm_length_moe",
        "activation_heads",
        "activation_kv_batch",
    }
    assert activation_only <= names and {"exp", "embed_moe", "mlp_moe"} <= names
    search = advisor.stage1(layout, "v5litepod-4")  # 4 chips: 15 candidates, each read under its own mesh and rules
    assert search.guessed_roles == {}  # every name is a known convention
    generated = [c for c in search.candidates if not c.own]
    assert len(generated) > 10 and all({r.logical for r in c.layout.rules} == names for c in generated)
    fsdp_expert = next(c for c in generated if c.layout.name == "fsdp2xexpert2")
    report = analyze(fsdp_expert.layout)  # the whole analysis: the activations as JAX receives them under its rules
    assert report.array("params/layers/MoeBlock_0/wi_0").spec == ("expert", None, "fsdp", None)
    assert report.array("params/layers/MoeBlock_0/wo").spec == ("expert", None, None, "fsdp")
    (dispatched, *_) = [a for a in report.arrays if a.kind == "activation" and a.module.endswith("dispatch")]
    assert dispatched.spec[0] == "expert", dispatched.spec  # (experts, batch, capacity, embed): each expert's tokens on its devices
    roles = estimate.report_roles(report)
    assert estimate.moe_profile(report, roles, estimate.tokens_per_step(report, roles)).gathered == frozenset()  # tokens move


# --- 2. scanned read from the trace ---------------------------------------------------------------------


@pytest.mark.parametrize("scan_layers", [True, False])
def test_scanned_is_read_from_the_trace_not_from_an_option_named_scan(scan_layers):
    """MaxText's option is ``scan_layers``: the depth shortcut skips the scanned model and is used on the looped one."""
    layout = maxtext(scan_layers=scan_layers, num_decoder_layers=5)  # one layer deeper than the shortcut's depths (2, 4)
    search = advisor.stage1(layout, TARGET)
    assert search.scanned is scan_layers
    plan = search_module.depth_plan(search, search.candidates[1].layout)
    assert plan.usable is not scan_layers
    if scan_layers:
        assert "scanned (read from the trace)" in plan.why


# --- 3. a mixture of experts costed as it runs ---------------------------------------------------------------


@pytest.mark.parametrize("top_k", [1, 2])
def test_the_moe_compute_estimate_is_xlas_flops_of_the_compiled_step_within_10_percent(top_k):
    """flaxformer's MoE (4 experts, T5X's MoE rules, data 2 x expert 2 x model 2 on this process's 8 CPU devices):
    stage 1's compute counts the active parameters (the experts' slots: capacity from the traced dispatch), within
    10% of XLA's flops per device for the compiled step; counting every expert (6 x all parameters) is about 2x over."""
    from explorer.compile.compiled import compile_step
    from explorer.compile.xla_results import counted_work

    layout = parse_layout(
        {
            "name": "moe",
            "mesh": {"shape": [2, 2, 2], "axes": ["data", "expert", "model"]},
            "rules": external.AUTHORS_RULES["flaxformer_moe"],
            "model": {"name": MOE, "options": {"num_selected_experts": top_k, "emb_dim": 256, "mlp_dim": 1024, "batch": 16, "length": 64}},
        }
    )
    report = analyze(layout)
    target = parse_target(TARGET)
    estimated = advisor.stage1_estimate(report, target)[0].compute_s * target.chip.device_peak_flops
    compiled, _ = compile_step(layout, report)
    xla = counted_work(compiled.step, compiled.step.as_text())[0]
    assert xla == pytest.approx(estimated, rel=0.10)
    roles = estimate.report_roles(report)
    active = estimate.active_params(report, roles)
    assert active < 0.6 * report.totals.param_count  # capacity 2 slots per token of 4 experts: about half the experts run
    moe = estimate.moe_profile(report, roles, estimate.tokens_per_step(report, roles))
    assert moe.experts == 4 and moe.axes == {"expert"}
    by_axis = advisor.stage1_estimate(report, target).by_axis
    assert by_axis.get("expert", 0) > 0  # the dispatch/combine all-to-alls over the expert axis


HLO_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8}


def hlo_collectives(hlo: str, op: str, mesh: jax.sharding.Mesh) -> list[tuple[int, frozenset[str] | None]]:
    """Each ``op`` instruction of a compiled module's text: its result's bytes (a tuple's elements summed: a variadic
    all-to-all sends several arrays at once) and the mesh axes its replica groups run along (None: no set of axes).
    Each runs once per step: the module has no loop (one unscanned layer; a loop body's ops would run once per trip)."""
    assert " while(" not in hlo
    found = []
    for line in hlo.splitlines():
        head = re.match(rf"\s*(?:ROOT )?%\S+ = (.+?) {op}\(", line)
        if head:
            shapes = re.findall(r"(\w+)\[([\d,]*)\]", head.group(1))
            size = sum(HLO_ITEMSIZE[t] * math.prod(int(d) for d in dims.split(",") if d) for t, dims in shapes)
            found.append((size, replica_axes(line, mesh)))
    return found


def replica_axes(line: str, mesh: jax.sharding.Mesh) -> frozenset[str] | None:
    """The mesh axes (of more than one device) whose groups are an instruction's replica groups, written as axis names
    (``mesh[...] {'expert'}``), as an iota (``[4,2]<=[2,2,2]T(1,0,2)``) or as lists of device ids."""
    named = re.search(r"replica_groups=mesh\[[^\]]*\] \{([^}]*)\}", line)
    if named:  # None for a mesh of other names (an op XLA's partitioner placed on its own device grid)
        names = [n.strip("' ") for n in named.group(1).split(",")]
        return frozenset(n for n in names if mesh.shape[n] > 1) if set(names) <= set(mesh.axis_names) else None
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    if iota:
        ids = np.arange(math.prod(int(d) for d in iota.group(3).split(","))).reshape([int(d) for d in iota.group(3).split(",")])
        ids = ids.transpose([int(p) for p in iota.group(4).split(",")]) if iota.group(4) else ids
        groups = {frozenset(row.tolist()) for row in ids.reshape(int(iota.group(1)), int(iota.group(2)))}
    else:
        listed = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", line)
        groups = {frozenset(int(i) for i in g.split(",")) for g in re.findall(r"\{([\d,]+)\}", listed.group(1))}
    devices = np.vectorize(lambda d: d.id)(mesh.devices)
    split = [i for i, n in enumerate(mesh.shape.values()) if n > 1]
    for count in range(1, len(split) + 1):
        for axes in itertools.combinations(split, count):
            rest = [i for i in range(devices.ndim) if i not in axes]
            rows = devices.transpose(rest + list(axes)).reshape(-1, math.prod(devices.shape[i] for i in axes))
            if {frozenset(row.tolist()) for row in rows} == groups:
                return frozenset(mesh.axis_names[i] for i in axes)
    return None


@pytest.mark.parametrize("top_k", [1, 2])
def test_the_moe_all_to_alls_over_the_expert_axis_are_xlas_all_to_all_bytes_of_the_compiled_step(top_k):
    """flaxformer's MoE as T5X runs it (its MoE rules, data 2 x expert 2 x model 2 on this process's 8 CPU devices):
    flaxformer induces the dispatch and combine all-to-alls with sharding constraints (``_call_experts``), and XLA
    emits four variadic all-to-alls over the expert axis per step: dispatch and combine forward, and their transposes
    backward (the gradient flows on to the layer's input, as it does inside a model: the layer alone is the factory's
    model, so the step differentiates its input too). Stage 1's all-to-all over expert is their bytes within 10%.
    flaxformer's expert capacity is capacity_factor x group / experts, whatever top-k: the same bytes for top-1 and
    top-2 (stage 1 reads the slots from the traced dispatch). The ground truth: the model, the rules and the step as
    its authors write them, XLA's compiled text read here (no explorer code)."""
    import flax
    import flax.linen as nn
    import jax.numpy as jnp
    from flax.linen import partitioning as flax_partitioning

    options = {"num_selected_experts": top_k, "emb_dim": 256, "mlp_dim": 1024, "batch": 16, "length": 64}
    module, (spec,), loss = external.make_flaxformer_moe(**options)
    mesh = jax.make_mesh((2, 2, 2), ("data", "expert", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 3)
    rules = [(n, tuple(a) if isinstance(a, list) else a) for n, a in external.AUTHORS_RULES["flaxformer_moe"]]
    x = jax.ShapeDtypeStruct(spec.shape, jnp.dtype(spec.dtype))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        variables = jax.eval_shape(module.init, jax.random.key(0), x)
        params = {"params": variables["params"]}  # T5X's partitioner: the parameters' names from ``params_axes``
        names = {"params": flax.core.unfreeze(flax_partitioning.get_axis_names(variables["params_axes"]))}
        shardings = (nn.logical_to_mesh_sharding(names, mesh, rules), nn.logical_to_mesh_sharding(jax.P(*spec.logical_axes), mesh, rules))
        step = jax.jit(jax.value_and_grad(lambda v, x: loss(module.apply(v, x), x), argnums=(0, 1)), in_shardings=shardings)
        hlo = step.lower(params, x).compile().as_text()
    all_to_alls = hlo_collectives(hlo, "all-to-all", mesh)
    assert len(all_to_alls) == 4 and {axes for _, axes in all_to_alls} == {frozenset({"expert"})}
    xla = sum(size for size, _ in all_to_alls)

    layout = parse_layout(
        {
            "name": "moe",
            "mesh": {"shape": [2, 2, 2], "axes": ["data", "expert", "model"]},
            "rules": external.AUTHORS_RULES["flaxformer_moe"],
            "model": {"name": MOE, "options": options},
        }
    )
    collectives = advisor.stage1_estimate(analyze(layout), parse_target(TARGET)).collectives
    estimated = [c for _, c in collectives if c.op == "all-to-all"]
    assert [c.mesh_axes for c in estimated] == [("expert",)]
    assert estimated[0].bytes == pytest.approx(xla, rel=0.10)


MAXTEXT_MOE_OPTIONS = dict(
    capacity_factor=1.25,
    emb_dim=512,
    mlp_dim=2048,
    num_heads=8,
    num_kv_heads=8,
    head_dim=64,
    batch=16,
    length=64,
    scan_layers=False,
    num_decoder_layers=1,
)


@functools.cache
def maxtext_moe_step(top_k: int):
    """MaxText's Mixtral layer (8 experts, capacity factor 1.25, one layer unscanned) as its authors build it under
    base.yml's rules on MOE_SHAPE's mesh (fsdp 2, tensor 2, expert 2; no explorer code): the train step, lowered, and
    the mesh."""
    import flax.linen as nn
    import jax.numpy as jnp

    module, inputs, loss = external.make_maxtext_moe(mesh_shape=MOE_SHAPE, num_experts_per_tok=top_k, **MAXTEXT_MOE_OPTIONS)
    (x,) = [jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype)) for i in inputs]
    rules = [(n, tuple(a) if isinstance(a, list) else a) for n, a in external.maxtext_rules()]
    with jax.set_mesh(module.mesh), nn.logical_axis_rules(rules):
        variables = jax.eval_shape(module.init, jax.random.key(0), x)
        shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(variables), module.mesh, rules)
        step = jax.jit(lambda v, x: jax.value_and_grad(lambda v: loss(module.apply(v, x), x))(v), in_shardings=(shardings, None))
        return step.lower(variables, x), module.mesh


@pytest.mark.parametrize("top_k", [1, 2])
def test_maxtexts_moe_compute_estimate_is_xlas_flops_of_the_step_within_10_percent(top_k):
    """MaxText's Mixtral layer (8 experts, capacity factor 1.25, one layer unscanned: JAX's cost analysis counts a loop
    body once): stage 1's compute over the whole slice (active parameters: top-k x capacity of the experts) within 10%
    of XLA's flops for the step's program, the factory's model as its authors build it under base.yml's rules (no
    explorer code); counting every expert is over 2x."""
    report = analyze(maxtext_moe(num_experts_per_tok=top_k, **MAXTEXT_MOE_OPTIONS))
    target = parse_target(TARGET)
    estimated = advisor.stage1_estimate(report, target)[0].compute_s * target.chip.device_peak_flops * target.devices
    xla = maxtext_moe_step(top_k)[0].cost_analysis()["flops"]
    assert xla == pytest.approx(estimated, rel=0.10)
    assert 6 * report.totals.param_count * 16 * 64 > 2 * xla


def test_maxtexts_moe_under_base_yml_moves_no_tokens_xla_gathers_the_experts_over_the_expert_axis():
    """Under base.yml's rules MaxText's dispatched tokens keep the expert axis on their batch dimension
    (``activation_batch_moe`` takes it before ``activation_exp``: moe.py's "FSDP-style fallback"), so XLA emits no
    all-to-all: each device runs every expert on its own tokens and the experts' kernels are all-gathered over expert
    (after fsdp), forward and backward. Stage 1 costs no all-to-all there but FSDP-like gathers over expert: its
    all-gather bytes over fsdp and expert are XLA's all-gathers over fsdp, expert or both within 25% (before, it
    counted the all-to-alls and no gather over expert: 0.4x). The gathered kernels do not depend on top-k: top-2 only."""
    lowered, mesh = maxtext_moe_step(2)
    hlo = lowered.compile().as_text()
    assert hlo_collectives(hlo, "all-to-all", mesh) == []
    gathers = hlo_collectives(hlo, "all-gather", mesh)
    assert any(axes == {"expert"} for _, axes in gathers)
    xla = sum(size for size, axes in gathers if axes and axes <= {"fsdp", "expert"})

    report = analyze(maxtext_moe(num_experts_per_tok=2, **MAXTEXT_MOE_OPTIONS))
    collectives = [c for _, c in advisor.stage1_estimate(report, parse_target(TARGET)).collectives]
    assert not [c for c in collectives if c.op == "all-to-all"]
    estimated = sum(c.bytes for c in collectives if c.op == "all-gather" and set(c.mesh_axes) <= {"fsdp", "expert"})
    assert estimated == pytest.approx(xla, rel=0.25)


# --- 4. stage 1's ranking and a robust calibration ---------------------------------------------------------


def candidate(seed_dict, name, compute, memory, collective, **fields):
    layout = parse_layout({**seed_dict, "name": name})
    return advisor.Candidate(layout, 1, Estimate(compute * 1e-3, memory * 1e-3, collective * 1e-3), "none", fits=True, **fields)


def test_a_tie_at_the_same_compute_bound_estimate_is_broken_by_hbm_traffic_and_collectives(seed_dict):
    """Every candidate compute-bound at 10 ms: before, the least collective time won alone (a pure expert mesh with
    heavy HBM traffic); now HBM traffic and collectives together decide."""
    search = advisor.Search(
        parse_target(TARGET),
        candidates=[candidate(seed_dict, "few-collectives-much-traffic", 10, 9, 0.5), candidate(seed_dict, "balanced", 10, 2, 1)],
    )
    assert [c.layout.name for c in advisor.shortlist(search)] == ["balanced", "few-collectives-much-traffic"]


def test_one_outlier_compile_cannot_move_a_factor_by_orders_of_magnitude_and_a_refused_program_never_calibrates(seed_dict):
    xla = lambda memory, compiled=True: compile_result(
        TARGET,
        fits=compiled,
        compiled=compiled,
        headroom_bytes=1 if compiled else -1,
        estimate=Estimate(1e-3 if compiled else 1e-5, memory * 1e-3, 1e-3),
    )
    search = advisor.Search(parse_target(TARGET), candidates=[candidate(seed_dict, n, 1, 1, 1) for n in "abcd"])
    search.candidates[0] = advisor.verified(search.candidates[0], xla(2))
    search.candidates[1] = advisor.verified(search.candidates[1], xla(84_000))  # one outlier
    search.candidates[2] = advisor.verified(search.candidates[2], xla(3))
    assert advisor.calibration(search)["memory_s"] == pytest.approx(3.0)  # the median, not the outlier
    alone = advisor.Search(parse_target(TARGET), candidates=[advisor.verified(candidate(seed_dict, "x", 1, 1, 1), xla(84_000))])
    assert advisor.calibration(alone)["memory_s"] == CALIBRATION_CLIP  # clipped
    # E1000: XLA refused it; its figures (the loop body counted once: 100x too cheap) never calibrate, and it ranks
    # with the ones that do not fit, by how much it misses.
    search.candidates[3] = advisor.verified(search.candidates[3], xla(1, compiled=False))
    assert search.candidates[3].refused and advisor.calibration(search)["compute_s"] == pytest.approx(1.0)
    assert search.ranked()[-1].layout.name == "d"


def test_no_compile_goes_to_a_candidate_whose_state_or_estimated_activations_clearly_do_not_fit(seed_dict):
    hbm = parse_target(TARGET).chip.device_hbm_bytes
    over = dataclasses.replace(candidate(seed_dict, "activations-over", 1, 1, 1), state_bytes=hbm // 2, activation_bytes=2 * hbm)
    state_over = dataclasses.replace(candidate(seed_dict, "state-over", 0.5, 0.5, 0.5), state_bytes=hbm + 1)
    ok = dataclasses.replace(candidate(seed_dict, "ok", 2, 1, 1), state_bytes=hbm // 2, activation_bytes=hbm // 4)
    search = advisor.Search(parse_target(TARGET), candidates=[over, state_over, ok])
    assert [c.layout.name for c in advisor.shortlist(search)] == ["ok"]
    assert advisor.next_to_compile(search).layout.name == "ok"


# --- 5. memory as a search dimension ----------------------------------------------------------------------


def transformer(**options):
    return parse_layout(
        {
            "name": "mine",
            "mesh": {"shape": [8], "axes": ["data"]},
            "rules": [["batch", "data"]],
            "model": {
                "name": "transformer",
                "options": {
                    "batch": 8,
                    "seq_len": 16,
                    "layers": 2,
                    "d_model": 32,
                    "heads": 4,
                    "kv_heads": 4,
                    "head_dim": 8,
                    "mlp_dim": 64,
                    "vocab": 128,
                    "scan": True,
                    **options,
                },
            },
        }
    )


def test_microbatches_accumulate_the_same_gradient_and_remat_keeps_the_loss():
    """The train step with 2 microbatches applies the gradient of the whole batch (a mean loss), and each remat policy
    computes the same step as none."""
    from explorer.analysis import analyzer as analysis
    from explorer.compile import train_step
    from explorer.reading import live

    def step_result(**options):
        layout = transformer(**options)
        model = analysis.model_of(layout)
        # jitted, as the explorer compiles them (eager, each of the step's operations ran on its own: 29 CPU-s for the
        # four steps); the same functions, so the same gradients, microbatches and remat policies are compared
        init, step = jax.jit(train_step.make_init(model)), jax.jit(train_step.make_train_step(model))
        tokens = jax.random.randint(jax.random.key(1), (8, 16), 0, 128)
        state = init(jax.random.key(0), tokens)
        assert live(model).built is not None
        return jax.tree_util.tree_leaves(step(state, tokens).params)

    base = step_result()
    for options in ({"microbatches": 2}, {"remat": "full"}, {"remat": "dots_saveable", "microbatches": 4}):
        for a, b in zip(base, step_result(**options)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6, err_msg=str(options))


def test_the_search_takes_the_cheapest_remat_and_microbatches_that_fit_and_shows_them():
    """Activations far over HBM without remat: each mesh's candidate carries the first policy (and microbatch count)
    whose estimated peak fits; its stage-1 activations shrink with the policy; the table and JSON show the fields."""
    layout = transformer(
        batch=64, seq_len=8192, d_model=1024, heads=16, kv_heads=16, head_dim=64, mlp_dim=4096, layers=16, vocab=1024, dtype="bfloat16"
    )
    report = analyze(layout)
    roles = estimate.report_roles(report)
    sizes = [estimate.activation_bytes(report, roles, r) for r in estimate.REMAT_POLICIES]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0] / 4
    assert estimate.activation_bytes(report, roles, "full", 4) == sizes[-1] // 4
    target = parse_target("v5litepod-8")
    hbm = target.chip.device_hbm_bytes
    assert report.totals.state_bytes + sizes[0] > hbm  # does not fit without remat
    search = advisor.stage1(layout, target)
    generated = [c for c in search.candidates if not c.own]
    assert any(c.remat != "none" for c in generated)
    for c in generated:
        assert c.layout.model.options["remat"] == c.remat and c.layout.model.options["microbatches"] == c.microbatches
        if c.remat != "none" or c.microbatches > 1:
            assert c.state_bytes + c.activation_bytes <= hbm
    rows = advisor.table_rows(search)
    assert {"remat", "microbatches", "active params"} <= set(rows[0])
    result = advisor.search_to_dict(search)
    assert {"remat", "microbatches", "active_params"} <= set(result["candidates"][0])


def test_remat_and_microbatch_candidates_memory_against_explorer_compile_on_a_tpu_target():
    """Two compiles for a v5e slice: no remat, and full remat with 2 microbatches. XLA's temporaries shrink as stage
    1's activation estimate does; without remat the estimate is XLA's temporaries within 2x (the attention's scores,
    2 sequences x 8 heads x 2048 x 2048 a layer per device, and the projections' outputs, which no constraint declares,
    are counted: without them it was 0.03x XLA's); with full remat and 2 microbatches within 4x (it counts the whole
    recomputed layer alive at once: 3.4x over here, the safe side)."""
    from explorer.compile.target_compile import compile_target

    options = dict(
        batch=16, seq_len=2048, d_model=256, heads=8, kv_heads=8, head_dim=32, mlp_dim=1024, layers=2, vocab=256, dtype="bfloat16"
    )
    plain, light = transformer(**options), transformer(**options, remat="full", microbatches=2)
    report = analyze(plain)
    roles = estimate.report_roles(report)
    est = estimate.activation_bytes(report, roles), estimate.activation_bytes(report, roles, "full", 2)
    xla = [compile_target(layout, TARGET)[0] for layout in (plain, light)]
    temps = [r.memory.temp_bytes for r in xla]
    assert all(r.compiled and r.fits for r in xla)
    assert temps[1] < temps[0] and est[1] < est[0]
    assert 0.5 < est[0] / temps[0] < 2, (est, temps)
    assert 0.5 < est[1] / temps[1] < 4, (est, temps)


def test_maxtexts_remat_policy_lowers_xlas_temporaries_and_is_the_advisors_remat_dimension():
    """MaxText's ``remat_policy`` (decoders.py's nn.remat policies, on the vendored decoder): full remat compiles to fewer
    temporaries than none for a v5e slice. The advisor searches it as it searches the transformer's ``remat``, with
    MaxText's own values (none, minimal, save_dot_except_mlp, full), each costed as the policy it is like."""
    from explorer.compile.target_compile import compile_target

    results = [compile_target(maxtext_moe(external.MAXTEXT_MESH_SHAPE, length=64, remat_policy=p), TARGET)[0] for p in ("none", "full")]
    assert all(r.compiled and r.fits for r in results)
    assert results[1].memory.temp_bytes < results[0].memory.temp_bytes
    assert list(space.REMAT_ALIASES["remat_policy"]) == ["none", "minimal", "save_dot_except_mlp", "full"]
    assert fitting.remat_cost("save_dot_except_mlp") == "dots_with_no_batch_dims_saveable"
    # activations over HBM without remat (stage 1's estimate): the candidate takes MaxText's first policy that fits
    big = maxtext_moe(
        remat_policy="none",
        batch=64,
        length=4096,
        emb_dim=1024,
        mlp_dim=4096,
        num_heads=8,
        num_kv_heads=8,
        head_dim=128,
        num_decoder_layers=8,
    )
    target = parse_target(TARGET)
    fsdp8 = next(c for c in space.candidate_layouts(big, target) if c.name == "fsdp8")
    report = analyze(fsdp8)
    roles = estimate.report_roles(report)
    ((variant, remat, micro),) = fitting.memory_variants(fsdp8, report, roles, target, own=False)
    assert remat in ("minimal", "save_dot_except_mlp", "full") and micro == 1
    assert variant.model.options["remat_policy"] == remat and variant.name == f"fsdp8+remat_{remat}"
    assert report.totals.state_bytes + estimate.activation_bytes(report, roles) > target.chip.device_hbm_bytes


def test_a_candidate_that_fits_without_remat_gets_none_not_the_users_policy():
    """The user's layout recomputes everything (full remat); a generated candidate whose activations fit without it
    is costed and labelled with no remat, the fastest setting that fits."""
    layout = transformer(remat="full")
    target = parse_target("v5litepod-8")
    fsdp8 = next(c for c in space.candidate_layouts(layout, target) if c.name == "fsdp8")
    assert fsdp8.model.options["remat"] == "full"  # generated from the user's options
    report = analyze(fsdp8)
    ((variant, remat, micro),) = fitting.memory_variants(fsdp8, report, estimate.report_roles(report), target, own=False)
    assert (remat, micro) == ("none", 1) and variant.model.options["remat"] == "none"
    ((kept, remat, _),) = fitting.memory_variants(fsdp8, report, estimate.report_roles(report), target, own=True)
    assert kept is fsdp8 and remat == "full"  # the user's own layout stays as it is
