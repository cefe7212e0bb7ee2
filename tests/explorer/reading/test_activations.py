"""Stage 4 (``explorer/reading/activations.py``): the forward pass traced on the state, under the layout tagged with
the names, the probe, or the layout alone, and its live constraints read: the tagged layout receives what the layout
alone receives, no parameter read is an activation, a rules edit is traced anew, and the names a model's own code
asks Flax to resolve are read though its constraints carry none."""

import pytest

from explorer.analysis.analyzer import analyze
from explorer.meshes import jax_mesh
from explorer.layout import parse_layout
from explorer.reading import activations, build, resolve, state, trace as tracing
from tests.explorer.reading.test_trace import EVERY_NAME, layout
from tests.test_ground_truth import CASES, CLASS_FACTORIES, EXTERNAL, EXTERNAL_FACTORIES

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

    from explorer.analysis.analyzer import logical_names
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


def test_a_refusal_quoting_the_probe_mesh_says_it_in_words():
    """MaxText's shard_map refuses the probe by quoting its whole mesh (85 axes for a small dense config). Issue 55: the
    finding read "AbstractMesh(+73 probe axes of size 1 not listed; ...)"; it says what happened in one sentence, and any
    other refusal quoting the probe's mesh says that mesh in words, the rest of the message as said."""
    from explorer.reading import constraints

    probe = constraints.probe_mesh([f"name_{i}" for i in range(40)], ["data", "model"])
    error = ValueError(
        f"The context mesh {probe} should match the mesh passed to shard_map Mesh('data': 2, 'model': 4, axis_types=(Auto, Auto))"
    )
    assert activations.probe_refusal(error) == (
        "its shard_map runs only on its own mesh, not on the explorer's naming mesh of one size-1 axis per logical name"
    )
    other = ValueError(f"Sharding on {probe} is not supported here")
    assert activations.probe_refusal(other) == (
        "ValueError: Sharding on [the explorer's naming mesh: an axis of size 1 for each of 40 logical names] is not supported here"
    )
    assert activations.probe_refusal(ValueError("no")) == "ValueError: no"
