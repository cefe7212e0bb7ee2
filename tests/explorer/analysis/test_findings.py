"""explorer/analysis/findings.py, through ``analyze``: what the report says beside the arrays, checked against JAX where JAX
decides (an uneven constraint compiles and is padded; an uneven argument is refused)."""

import jax
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from explorer.analysis.analyzer import analyze
from explorer.analysis.findings import indivisible_error
from explorer.layout import parse_layout

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"


def test_indivisible_dimension_warning_names_everything(seed_dict):
    seed_dict["model"]["options"]["depth"] = 1022
    report = analyze(parse_layout(seed_dict))
    messages = [w.message for w in report.warnings if w.code == "indivisible" and w.path == KERNEL]
    assert len(messages) == 1
    for fragment in (KERNEL, "dim 1 ('hidden')", "size 1022", "model", "product 4", "1024"):
        assert fragment in messages[0]


def test_unused_rules_unmatched_names_and_large_replicated(seed_dict):
    seed_dict["rules"] = [["batch", "data"], ["vocab", "model"], ["batch", "model"]]
    report = analyze(parse_layout(seed_dict))
    by_code = {}
    for warning in report.warnings:
        by_code.setdefault(warning.code, []).append(warning)
    unused = " ".join(w.message for w in by_code["rule-unused"])
    assert "rule 1 (vocab, model)" in unused and "no array has a dimension named 'vocab'" in unused
    assert "rule 2 (batch, model)" in unused
    assert {"'embed'", "'hidden'"} <= {w.message.split()[2] for w in by_code["name-unmatched"]}
    assert len(by_code["replicated-large"]) == 3
    assert all(report.array(w.path).replication == 8 for w in by_code["replicated-large"])


def test_an_activation_the_mesh_does_not_divide_is_padded_by_xla_not_refused(monkeypatch):
    """JAX refuses an uneven sharding for an argument of the step (jit, device_put) but accepts it in a
    constraint, where XLA pads the blocks: the analysis says so and does not refuse to compile or time."""
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.class_models:make_twelve_axis")
    layout = parse_layout(
        {
            "name": "uneven-heads",
            "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
            "rules": [["activation_heads", ["data", "model"]]],
            "model": {"name": "tests.class_models:make_twelve_axis", "options": {}},
        }
    )
    report = analyze(layout)
    padded = [w for w in report.warnings if w.code == "indivisible-padded"]
    assert len(padded) == 1 and padded[0].level == "warning" and padded[0].path.startswith("activations/")
    assert "has size 4" in padded[0].message and "XLA pads each block to 1" in padded[0].message
    assert not [w for w in report.warnings if w.code == "indivisible"] and indivisible_error(report) is None
    heads = report.array(padded[0].path)
    assert heads.shard_shape[2] == 1

    # JAX itself: the constraint compiles and each device's block of that dimension is the padded 1
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    sharding = NamedSharding(mesh, PartitionSpec(*heads.spec))

    def step(x):
        return jax.numpy.tanh(jax.lax.with_sharding_constraint(x * 2, sharding)).sum()

    text = jax.jit(step).lower(jax.ShapeDtypeStruct(heads.shape, heads.dtype)).compile().as_text()
    block = "f32[" + ",".join(str(n) for n in heads.shard_shape) + "]"
    assert any("tanh(" in line and block in line for line in text.splitlines()), block
    with pytest.raises(ValueError, match="should evenly divide"):  # as an argument, JAX refuses the same sharding
        jax.jit(step, in_shardings=sharding).lower(jax.ShapeDtypeStruct(heads.shape, heads.dtype))


def test_many_rules_that_never_apply_are_one_finding_with_each_in_its_items(seed_dict):
    """Issue 55: `analyze --maxtext` printed 68 [rule-unused] lines, one per rule of MaxText's base.yml a dense model
    never uses. More than three are one finding naming the first few, each of them in its items (--json, the app)."""
    from explorer.analysis.analyzer import report_to_dict as report_json

    seed_dict["rules"] += [[f"other_{i}", "model"] for i in range(5)] + [["batch", "model"]]
    report = analyze(parse_layout(seed_dict))
    unused = [w for w in report.warnings if w.code == "rule-unused"]
    assert len(unused) == 1, [w.message for w in unused]
    assert unused[0].message.startswith(
        "6 of the 8 rules never apply to this model (other_0, other_1, other_2, other_3, other_4, batch, …): "
    )
    assert (
        "5 name logical names no array of this model has" in unused[0].message
        and "1 is for names another rule decides" in unused[0].message
    )
    assert (
        len(unused[0].items) == 6
        and unused[0].items[0] == "rule 2 (other_0, model) never applies: no array has a dimension named 'other_0'."
    )
    listed = next(w for w in report_json(report)["warnings"] if w["code"] == "rule-unused")
    assert list(listed["items"]) == list(unused[0].items)
    assert all("items" not in w for w in report_json(report)["warnings"] if w["code"] != "rule-unused")
