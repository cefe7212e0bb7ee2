"""A Linen model is traced twice, as Flax's recipe does: init without a mesh (the state), then the forward pass under the
layout tagged with the names (that layout's activations, and their names); a rules edit re-traces the forward pass under
the new rules only."""

import pytest

from explorer.reading import activations, build, constraints as program, contexts, resolve, state, trace as tracing
from explorer.analysis import analyze, jax_mesh
from explorer.layout import parse_layout
from tests.paths import ROOT
from tests.test_ground_truth import CASES, CLASS_FACTORIES, EXTERNAL, EXTERNAL_FACTORIES

TRANSFORMER = {"batch": 8, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 4, "kv_heads": 4, "head_dim": 8, "mlp_dim": 64, "vocab": 128}
EVERY_NAME = [
    ["batch", "data"],
    ["embed", None],
    ["heads", "model"],
    ["kv_heads", "model"],
    ["kv", None],
    ["mlp", "model"],
    ["vocab", "model"],
    ["length", None],
]


def layout(rules, name="t"):
    return parse_layout(
        {
            "name": name,
            "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
            "rules": rules,
            "model": {"name": "transformer", "options": TRANSFORMER},
        }
    )


@pytest.fixture
def fresh(monkeypatch, cleared):
    """Nothing traced yet, in memory or on disk."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", "off")


@pytest.fixture
def traces(fresh, monkeypatch):
    """Each trace, as "init" (a Linen init), "forward" (the forward pass under the probe or the tagged layout) or
    "layout" (the forward pass under the layout's mesh and rules alone)."""
    calls = []
    real_init, real_read, real_layout = tracing._linen_state, program.constraints, activations.received_by_forward
    in_layout = []

    def init(*args):
        calls.append("init")
        return real_init(*args)

    def read(closed, input_invars, parameter_invars=()):
        if parameter_invars and not in_layout:
            calls.append("forward")
        return real_read(closed, input_invars, parameter_invars)

    def layout_trace(*args):
        calls.append("layout")
        in_layout.append(True)
        try:
            return real_layout(*args)
        finally:
            in_layout.pop()

    monkeypatch.setattr(tracing, "_linen_state", init)
    monkeypatch.setattr(program, "constraints", read)
    monkeypatch.setattr(activations, "received_by_forward", layout_trace)
    return calls


def test_a_first_analysis_traces_init_and_the_forward_pass(traces):
    report = analyze(layout(EVERY_NAME))
    assert traces == ["init", "forward"]  # the forward pass under the tagged layout gives its activations and names
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]


def test_a_parameter_name_without_a_rule_is_still_seen_on_activations(traces):
    rules = [rule for rule in EVERY_NAME if rule[0] != "kv"]
    report = analyze(layout(rules))
    assert traces == ["init", "forward"]
    query = [a for a in report.arrays if a.kind == "activation" and a.module == "block_0/attention"]
    assert ("batch", "length", "heads", "kv") in [a.logical_axes for a in query]
    analyze(layout(rules, name="again"))
    assert traces == ["init", "forward"]  # every name told apart, these rules traced: nothing is traced again
    analyze(layout(rules[::-1], name="edited"))
    assert traces == ["init", "forward", "layout"]  # a rules edit: the forward pass under the new rules only
    analyze(layout(rules + [["never_carried", None]], name="new name"))
    assert traces == ["init", "forward", "layout", "forward"]  # a new name: the forward pass under the tagged layout


LINEN_CASES = [
    "guide-mlp-scan",
    "transformer-scan-3d",
    "partitioning-style",
    "repeated-scan",
    "bridged",
    "dead-in-call",
    "t5x-1d",
    "lm1b",
    "mu-transformer",
    "vit-scan-2x2x2",
]


@pytest.mark.parametrize("name", LINEN_CASES)
def test_the_tagged_layout_receives_what_the_layout_alone_receives(name, fresh, monkeypatch):
    """The two ways a Linen model's activations are read under a layout agree: the forward pass under the layout tagged
    with the names (probe axes stripped), and under the layout alone (ground truth checks the analysis, case by case)."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", CLASS_FACTORIES + "," + EXTERNAL_FACTORIES)
    case = CASES[name]
    spec = parse_layout({"name": name, "mesh": case["mesh"], "rules": case["rules"], "model": case["model"]})
    key, axes = spec.model.key(), tuple(case["mesh"]["axes"])
    mesh, rules = jax_mesh(tuple(case["mesh"]["shape"]), axes), spec.rules_for_flax()
    stage = state.read(tracing.trace(key, build.build(key), (mesh, rules)))
    layout_alone = activations.received_by_forward
    with monkeypatch.context() as patch:  # the tagged layout's own reading, not the layout alone's
        patch.setattr(activations, "received_by_forward", lambda *a: pytest.fail("the tagged layout was refused"))
        from_init = resolve.resolve(key, axes, stage, activations.read(stage, axes, frozenset(), (mesh, rules))).received
    from_forward = resolve.resolve(key, axes, stage, activations.read(stage, axes, None, (mesh, rules))).received
    assert activations.received_by_forward is layout_alone

    def rows(found):
        return [(a.path, a.shape, a.logical_axes, a.runs_per_step, a.module) for a in found.activations + (found.output,)]

    assert not from_init.error and rows(from_init) == rows(from_forward)


def test_no_parameter_read_or_initialiser_is_an_activation(traces):
    """Init constrains every parameter as it is made and read: none of that is the step's (ground truth checks the rest)."""
    one = analyze(layout(EVERY_NAME))
    activations = [(a.path, a.shape, a.logical_axes, a.runs_per_step) for a in one.arrays if a.kind == "activation"]
    assert len(activations) > 10
    assert all(
        a.shape != p.shape or a.logical_axes != p.logical_axes
        for a in one.arrays
        if a.kind == "activation"
        for p in one.arrays
        if p.kind == "param"
    )


def test_a_rules_edit_reads_the_new_rules_not_a_cached_program(fresh):
    """JAX caches a traced function by identity and mesh, not by Flax's rules: the edit must be traced anew."""
    first = analyze(layout(EVERY_NAME))  # init under these rules
    unsharded = analyze(layout([[name, None if name == "vocab" else axes] for name, axes in EVERY_NAME]))  # forward
    sharded = analyze(layout(EVERY_NAME[::-1]))  # the forward pass again, same mesh, other rules

    def logits(report):
        return report.array("activations/output").spec

    assert logits(first)[-1] == "model" and logits(unsharded)[-1] is None and logits(sharded)[-1] == "model"


def test_names_a_models_own_code_resolves_are_read_though_its_constraints_carry_none(fresh, monkeypatch, tmp_path):
    """MaxText's ``maybe_shard_with_logical`` resolves names itself and drops mesh axes of size 1, the probe's among
    them: its activations reach JAX with no name. The names it asked Flax's rules about are read all the same (the MoE's
    dispatch over ``activation_exp``/``activation_batch_moe``/``activation_embed_moe``), from a trace under the probe and
    from one under the layout, and kept on disk; Flax's function is as it was after each trace."""
    from flax.linen import spmd

    from explorer.analysis import logical_names
    from explorer import caches
    from explorer.reading import abstract_model, disk
    from tests.external import factories as external

    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", EXTERNAL_FACTORIES)
    original = spmd._logical_to_mesh_axes
    spec = parse_layout(
        {
            "name": "moe",
            "mesh": {"shape": [int(n) for n in external.MAXTEXT_MESH_SHAPE.split("x")], "axes": list(external.maxtext_base.MESH_AXES)},
            "rules": external.maxtext_rules(),
            "model": {"name": f"{EXTERNAL}:make_maxtext_moe", "options": {}},
        }
    )
    moe_names = {"activation_exp", "activation_batch_moe", "activation_embed_moe", "activation_mlp", "activation_norm_length_moe"}
    dispatch = [a for a in analyze(spec).arrays if a.kind == "activation" and "dispatch" in a.module]
    assert dispatch and all(n is None or isinstance(n, tuple) for a in dispatch for n in a.logical_axes)  # no name reaches JAX
    names = set(logical_names(spec.model, tuple(spec.mesh.axes)))
    assert moe_names <= names and {"exp", "embed_moe", "mlp_moe"} <= names
    assert spmd._logical_to_mesh_axes is original
    key, axes = spec.model.key(), tuple(spec.mesh.axes)
    stage = state.read(tracing.trace(key, build.build(key)))
    probed = resolve.resolve(key, axes, stage, activations.read(stage, axes, frozenset(), None)).model  # under the probe alone
    assert moe_names <= probed.asked_names
    caches.clear()
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path))
    disk.store(key, axes, [(frozenset(), probed)])
    ((_, loaded),) = disk.load(key, axes)
    assert loaded.asked_names == probed.asked_names
    assert abstract_model(spec.model, frozenset(), tuple(spec.mesh.axes)).asked_names >= moe_names
    assert spmd._logical_to_mesh_axes is original


def test_the_garbage_collector_runs_again_after_a_trace_and_after_a_refused_one(fresh):
    import gc

    from explorer.errors import ExplorerError

    assert gc.isenabled()
    analyze(layout(EVERY_NAME))
    assert gc.isenabled()
    with pytest.raises(ExplorerError):
        with contexts.tracing("broken"):
            assert not gc.isenabled()  # paused while tracing
            raise RuntimeError("the model's own code failed")
    assert gc.isenabled()


def test_importing_the_tracing_code_runs_the_collector_once_and_leaves_it_on():
    """Importing Flax and optax makes tens of thousands of objects: with the collector on it runs about a hundred
    times; paused, once, when it comes back on (the collection that fell due meanwhile)."""
    import subprocess
    import sys

    code = (
        "import gc, sys\n"
        "from explorer import reading\n"
        "runs = []  # collections once the tracing module's import has begun\n"
        "gc.callbacks.append(lambda phase, info: runs.append(phase)\n"
        "                    if phase == 'start' and 'explorer.reading.trace' in sys.modules else None)\n"
        "reading._stage_modules()\n"
        "assert 'flax' in sys.modules and 'optax' in sys.modules\n"
        "print(len(runs), gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    collections, enabled = out.stdout.split()
    assert int(collections) <= 1 and enabled == "True"
