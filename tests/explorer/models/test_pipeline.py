"""The built-in transformer pipelined over stages (explorer/models/pipeline.py), as MaxText's layers/pipeline.py runs it.

The pipelined model is the same function as the plain one (same weights: same loss and gradients); its stacked block
weights carry the logical name ``stage`` and are placed by the rule ``stage -> stage`` exactly as JAX materialises
them (tests/ground_truth.py, no explorer code); the compiled program moves the microbatches between stages with
collective-permutes inside the loop, whose trip count is MaxText's ``microbatches * repeats + stages - 1``.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.models import build_model, validate_model
from explorer.analysis.stage_plan import stage_plan
from explorer.models.schedule import blocks_of, bubble_fraction, iterations
from explorer.models.transformer import Transformer, next_token_loss
from explorer.models.options import TransformerOptions
from tests import ground_truth as truth
from tests import ground_truth_explicit as truth_explicit

SMALL = dict(batch=8, seq_len=8, layers=4, d_model=16, heads=2, kv_heads=2, head_dim=8, mlp_dim=32, vocab=64)
RULES = [["stage", "stage"], ["batch", "data"]]
BATCH = 16  # the placed layout's: 4 microbatches of 4, each split over the 4-way data axis


def _stacked_like(blocks, repeats, stages):
    """The scanned model's ``[layers, ...]`` block weights as the pipeline stacks them: ``[repeats, stages, per, ...]``."""
    return jax.tree_util.tree_map(lambda w: w.reshape(repeats, stages, w.shape[0] // (repeats * stages), *w.shape[1:]), blocks)


def test_the_pipelined_model_is_the_plain_model_same_loss_and_gradients():
    """A circular pipeline (2 stages, 2 repeats: stage 0 holds blocks 0 and 2) over 2 microbatches: the loop, the shift,
    the weights each stage picks per repeat and the microbatches fed back all take part."""
    stages, microbatches, repeats = 2, 2, 2
    tokens = jax.random.randint(jax.random.key(1), (SMALL["batch"], SMALL["seq_len"]), 0, SMALL["vocab"])
    plain = Transformer(TransformerOptions(**SMALL, scan=True))
    options = dict(pipeline_stages=stages, pipeline_microbatches=microbatches, pipeline_repeats=repeats)
    piped = Transformer(TransformerOptions(**SMALL, **options))
    weights = nn.meta.unbox(jax.jit(plain.init)(jax.random.key(0), tokens))["params"]
    blocks = _stacked_like(weights["blocks"], repeats, stages)
    if repeats == 1:
        blocks = jax.tree_util.tree_map(lambda w: w[0], blocks)
    same = {k: v for k, v in weights.items() if k != "blocks"} | {"pipeline": {"layers": {"blocks": blocks}}}
    shapes = jax.tree_util.tree_map(jnp.shape, nn.meta.unbox(jax.eval_shape(piped.init, jax.random.key(0), tokens))["params"])
    assert jax.tree_util.tree_map(jnp.shape, same) == shapes  # the pipeline's own init stacks the same shapes

    def loss(module, params):
        return next_token_loss(module.apply({"params": params}, tokens), tokens)

    plain_loss, plain_grads = jax.jit(jax.value_and_grad(lambda p: loss(plain, p)))(weights)
    piped_loss, piped_grads = jax.jit(jax.value_and_grad(lambda p: loss(piped, p)))(same)
    np.testing.assert_allclose(piped_loss, plain_loss, rtol=1e-6)
    unstacked = jax.tree_util.tree_map(
        lambda w: w.reshape(-1, *w.shape[(3 if repeats > 1 else 2) :]), piped_grads["pipeline"]["layers"]["blocks"]
    )
    for got, want in zip(jax.tree_util.tree_leaves(unstacked), jax.tree_util.tree_leaves(plain_grads["blocks"])):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(piped_grads["embedding"], plain_grads["embedding"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "options, field, value",
    [
        (dict(layers=4, pipeline_stages=3), "pipeline_stages", 3),
        (dict(layers=4, pipeline_stages=2, pipeline_repeats=4), "pipeline_repeats", 4),
        (dict(batch=8, pipeline_stages=2, pipeline_microbatches=3), "pipeline_microbatches", 3),
        (dict(batch=8, microbatches=4, pipeline_stages=2, pipeline_microbatches=4), "pipeline_microbatches", 4),
        (dict(layers=8, pipeline_stages=4, pipeline_repeats=2, pipeline_microbatches=2), "pipeline_microbatches", 2),
    ],
)
def test_a_pipeline_that_does_not_divide_is_refused_naming_the_option_and_value(options, field, value):
    spec = parse_layout({"name": "p", "mesh": {"shape": [8], "axes": ["data"]}, "rules": [], "model": {"name": "mlp"}}).model
    with pytest.raises(ExplorerError) as error:
        validate_model(type(spec)(name="transformer", options={**SMALL, **options}))
    assert (error.value.field, error.value.value) == (f"model.options.{field}", value)
    assert f"model.options.{field}" in str(error.value)


def test_which_blocks_each_stage_holds_and_the_bubble_as_maxtext_counts_it():
    assert blocks_of(8, 2, 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]  # circular: non-adjacent groups
    assert iterations(4, 8, 1) == 11 and iterations(4, 8, 2) == 19
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11) and bubble_fraction(1, 8) == 0


@pytest.fixture(scope="module")
def layout():
    options = {**SMALL, "batch": BATCH, "pipeline_stages": 2, "pipeline_microbatches": 4}
    mesh = {"shape": [2, 4], "axes": ["stage", "data"], "axis_types": ["auto", "auto"]}
    return parse_layout({"name": "pipelined", "mesh": mesh, "rules": RULES, "model": {"name": "transformer", "options": options}})


def test_the_stacked_weights_are_placed_by_stage_as_jax_materialises_them(layout):
    report = analyze(layout)
    real = truth.linen_state(truth.model_of(build_model(layout.model)), truth.mesh_of((2, 4), ("stage", "data")), truth.flax_rules(RULES))
    assert truth.compare(report, real) == []
    query = real["params/pipeline/layers/blocks/attention/query"]
    assert query["spec"][0] == ("stage",) and query["shard_shape"][0] == 1  # one stage's blocks per device
    plan = stage_plan(layout.model.options, report)  # the Layout page's stage picture: devices and bytes as JAX has them
    holders = {key[0][0]: tuple(devices) for key, devices in query["tiles"].items()}
    assert [row.devices for row in plan.rows] == [holders[0], holders[1]] and holders[0] != holders[1]
    stacked = sum(v["bytes_per_device"] for k, v in real.items() if k.startswith("params/pipeline/"))
    assert all(row.weight_bytes_per_device == stacked for row in plan.rows) and plan.placed
    assert [row.blocks for row in plan.rows] == [(0, 1), (2, 3)] and plan.iterations == 5 and plan.bubble == pytest.approx(1 / 5)


def test_the_compiled_loop_sends_each_microbatch_to_the_next_stage(layout):
    """Ground truth from JAX alone: the compiled step's while loop runs MaxText's trip count and its body holds the
    collective-permute over the stage axis (pairs {0->4, 4->0} on this 2 x 4 mesh), of one microbatch's activations."""
    built = build_model(layout.model)
    mesh = truth.mesh_of((2, 4), ("stage", "data"))
    tokens = jnp.zeros((BATCH, SMALL["seq_len"]), jnp.int32)
    with jax.set_mesh(mesh), nn.logical_axis_rules(truth.flax_rules(RULES)):
        variables = jax.jit(built.module.init)(jax.random.key(0), tokens)
        text = jax.jit(lambda v, t: built.module.apply(v, t)).lower(variables, tokens).compile().as_text()
    permutes = [line for line in text.splitlines() if re.search(r"collective-permute(-start)?\(", line)]
    assert permutes, "no collective-permute in the compiled forward pass"
    # one stage's share of one microbatch's activations: [1 stage, batch / microbatches / 4 data, length, embed]
    assert {re.search(r"= (\w+\[[\d,]*\])", line).group(1) for line in permutes} == {
        f"f32[1,{BATCH // 4 // 4},{SMALL['seq_len']},{SMALL['d_model']}]"
    }
    for line in permutes:  # device d sits at (stage d // 4, data d % 4): every send goes to the other stage, same data column
        pairs = [tuple(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", line.split("source_target_pairs=")[1].split("}}")[0] + "}")]
        assert pairs and all(a % 4 == b % 4 and a // 4 != b // 4 for a, b in pairs)
    trips = [int(n) for n in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text)]
    assert 4 + 2 - 1 in trips  # MaxText's microbatches * repeats + stages - 1


# --- Explicit axes (jax.make_mesh's default): shardings in the values' types ------------------------------------------

EXPLICIT_RULES = (("stage", "stage"), ("batch", "data"))


@pytest.fixture(scope="module")
def explicit_run():
    """The plain and the circular pipelined model (2 stages, 2 repeats, 2 microbatches) on a 2 x 4 mesh of Explicit
    axes, the pipelined one given the plain one's weights in its own stacked types: (loss, gradients) of each, the
    pipelined init's weight specs and its compiled train program, from JAX alone."""
    stages, microbatches, repeats = 2, 2, 2
    the_mesh = truth_explicit.mesh((2, 4), ("stage", "data"))
    options = dict(pipeline_stages=stages, pipeline_microbatches=microbatches, pipeline_repeats=repeats)
    plain = Transformer(TransformerOptions(**{**SMALL, "batch": BATCH}, scan=True))
    piped = Transformer(TransformerOptions(**{**SMALL, "batch": BATCH}, **options))
    tokens = jax.random.randint(jax.random.key(1), (BATCH, SMALL["seq_len"]), 0, SMALL["vocab"])
    with jax.set_mesh(the_mesh), nn.logical_axis_rules(EXPLICIT_RULES):
        tokens = jax.device_put(tokens, P("data", None))
        weights = nn.meta.unbox(jax.jit(plain.init)(jax.random.key(0), tokens))["params"]
        own = nn.meta.unbox(jax.jit(piped.init)(jax.random.key(0), tokens))["params"]
        specs = {path: jax.typeof(w).sharding.spec for path, w in jax.tree_util.tree_leaves_with_path(own)}
        blocks = jax.tree_util.tree_map(
            lambda w, like: jax.device_put(w, NamedSharding(the_mesh, jax.typeof(like).sharding.spec)),
            _stacked_like(weights["blocks"], repeats, stages),
            own["pipeline"]["layers"]["blocks"],
        )
        same = {k: v for k, v in weights.items() if k != "blocks"} | {"pipeline": {"layers": {"blocks": blocks}}}

        def step(module):
            return jax.jit(jax.value_and_grad(lambda p: next_token_loss(module.apply({"params": p}, tokens), tokens)))

        piped_step = step(piped)
        program = piped_step.lower(same).compile().as_text()
        return step(plain)(weights), piped_step(same), specs, program


def test_on_explicit_axes_the_pipelined_model_is_the_plain_model_same_loss_and_gradients(explicit_run):
    (plain_loss, plain_grads), (piped_loss, piped_grads), _, _ = explicit_run
    np.testing.assert_allclose(piped_loss, plain_loss, rtol=1e-6)
    unstacked = jax.tree_util.tree_map(lambda w: np.asarray(w).reshape(-1, *w.shape[3:]), piped_grads["pipeline"]["layers"]["blocks"])
    for got, want in zip(jax.tree_util.tree_leaves(unstacked), jax.tree_util.tree_leaves(plain_grads["blocks"])):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(piped_grads["embedding"], plain_grads["embedding"], rtol=1e-4, atol=1e-6)


def test_on_explicit_axes_the_stacked_weights_are_typed_by_stage(explicit_run):
    """Every stacked block weight's type: ``[circular_repeats, stage, layer, ...]`` with the stage on the stage axis."""
    specs = explicit_run[2]
    stacked = {path: spec for path, spec in specs.items() if "pipeline" in jax.tree_util.keystr(path)}
    assert len(stacked) == 8 and all(tuple(spec)[:3] == (None, "stage", None) for spec in stacked.values()), stacked


def test_on_explicit_axes_the_compiled_loop_sends_each_microbatch_to_the_next_stage(explicit_run):
    """The shift stays a collective-permute over the stage axis (device d at (stage d // 4, data d % 4)), of one
    microbatch's activations ([1 stage, 16 / 2 microbatches / 4 data, length, embed]), forward and backward, inside the
    loop of MaxText's trip count (2 microbatches * 2 repeats + 2 - 1)."""
    program = explicit_run[3]
    shape = f"f32[1,{BATCH // 2 // 4},{SMALL['seq_len']},{SMALL['d_model']}]"
    sends = []
    for line in program.splitlines():
        if re.search(r"collective-permute(-start)?\(", line) and re.search(r"= (\w+\[[\d,]*\])", line).group(1) == shape:
            pairs = [tuple(map(int, p)) for p in re.findall(r"\{(\d+),(\d+)\}", line.split("source_target_pairs=")[1].split("}}")[0] + "}")]
            if pairs and all(a % 4 == b % 4 and a // 4 != b // 4 for a, b in pairs):
                sends.append(set(pairs))
    assert len(sends) >= 2, "no collective-permute between stages in the compiled program"
    assert {(d, (d + 4) % 8) for d in range(8)} in sends  # the shift: every device sends its stage's output one stage on
    assert 2 * 2 + 2 - 1 in [int(n) for n in re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', program)]


@pytest.fixture(scope="module")
def explicit_layout():
    options = {**SMALL, "batch": BATCH, "pipeline_stages": 2, "pipeline_microbatches": 4}
    mesh = {"shape": [2, 4], "axes": ["stage", "data"], "axis_types": ["explicit", "explicit"]}
    return parse_layout({"name": "pipelined", "mesh": mesh, "rules": RULES, "model": {"name": "transformer", "options": options}})


def test_on_explicit_axes_the_report_shows_the_stage_sharding_jax_types_and_materialises(explicit_layout):
    """The report's every parameter and optimizer leaf against tests/ground_truth_explicit.py (the init's types, then
    the init and forward pass run for real); the stage picture's devices from those tiles."""
    report = analyze(explicit_layout)
    built = build_model(explicit_layout.model)
    the_mesh, rules = truth_explicit.mesh((2, 4), ("stage", "data")), tuple(map(tuple, RULES))
    expected = truth_explicit.linen_state_specs(built.module, built.inputs, the_mesh, [("data", None)], rules)
    shown = {a.path: truth_explicit.normal(a.spec, len(a.shape)) for a in report.arrays if a.kind in ("param", "opt_state")}
    assert shown == expected
    assert shown["params/pipeline/layers/blocks/attention/query"] == ("stage", None, None, None, None)
    materialised, output = truth_explicit.linen_materialised(built.module, built.inputs, the_mesh, [("data", None)], rules)
    assert materialised == expected and output == ("data", None, None)
    plan = stage_plan(explicit_layout.model.options, report)
    assert plan.placed and len({row.devices for row in plan.rows}) == 2
    # the shift between stages, an auto_axes region of the model's own: shown where it leaves the types and comes back
    shift = [v.communication for v in report.values if v.function.endswith("shift") and v.communication]
    assert len(shift) == 2 and shift[0].startswith("into auto_axes") and "P('stage', 'data', None, None)" in shift[1], shift


def _temp_bytes(microbatches: int) -> tuple[int, int]:
    """XLA's temporaries (CPU) for the loss and gradients of a 2-stage pipeline with wide weights and few tokens, and
    the stacked block weights' bytes."""
    options = TransformerOptions(
        **{**SMALL, "layers": 2, "batch": 8, "seq_len": 4, "d_model": 64, "mlp_dim": 256, "heads": 4, "kv_heads": 4, "head_dim": 16},
        pipeline_stages=2,
        pipeline_microbatches=microbatches,
    )
    model = Transformer(options)
    tokens = jnp.zeros((8, 4), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    grad = jax.jit(jax.grad(lambda p: next_token_loss(model.apply({"params": p}, tokens), tokens)))
    compiled = grad.lower(params).compile()
    weights = sum(w.size * w.dtype.itemsize for w in jax.tree_util.tree_leaves(params["pipeline"]))
    return compiled.memory_analysis().temp_size_in_bytes, weights


def test_the_backward_loop_keeps_the_stage_weights_once_not_once_per_iteration():
    """Without repeats every iteration runs the same weights. Picked afresh in each iteration, a copy of them was kept
    for the backward loop once per iteration (on two v5e slices, 2 stages of a 14 B-parameter model: 33.1 GiB peak
    where 19.6 GiB now). From 2 to 8 microbatches (3 to 9 iterations) the temporaries must grow by less than the weights."""
    few, weights = _temp_bytes(2)
    many, _ = _temp_bytes(8)
    assert many - few < weights, (few, many, weights)
