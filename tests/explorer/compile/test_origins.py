"""Every value's sharding after Shardy's propagation on Auto axes, with the origin of each mesh axis."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from explorer.compile import origins
from explorer.compile.compiled import compile_step
from explorer.layout import SEED_LAYOUT, parse_layout
from explorer.models import mlp

MESH = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def step(x, w):
    y = x @ w  # the matmul: data from x, model from w
    y = jax.lax.with_sharding_constraint(y, NamedSharding(MESH, P("data", "model")))
    return jnp.tanh(y).sum(1)


def _line_of(code: str) -> int:
    with open(__file__) as handle:
        return next(n for n, text in enumerate(handle, start=1) if code in text)


def test_each_value_carries_its_propagated_sharding_and_where_each_axis_came_from():
    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(MESH, P("data", None)))
    w = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(MESH, P(None, "model")))
    lowered = jax.jit(step).lower(x, w)
    found = {v.op_name.rsplit("/", 1)[-1]: v for v in origins.values(origins.propagated(lowered))}
    assert found["dot_general"].spec == (("data",), ("model",))
    assert found["dot_general"].origins == {"data": "input: 0", "model": "input: 1"}
    assert found["dot_general"].where == f"test_origins.py:{_line_of('y = x @ w')}"
    assert found["tanh"].origins == {"data": "constraint_0", "model": "constraint_0"}
    # the program's output, as Shardy propagated it, is the sharding XLA's compiled executable gives it
    compiled = lowered.compile()
    spec = tuple(compiled.output_shardings.spec) + (None,) * (1 - len(compiled.output_shardings.spec))
    assert found["reduce_sum"].spec == tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec)


def test_the_seed_steps_values_name_the_model_lines_their_shardings_come_from_and_agree_with_xla():
    """The Flax guide's MLP on 2x4: each layer's second matmul gets 'data' from the layer's output constraint, and
    its propagated sharding is the one XLA's compiled forward pass gives the layer's output (``compile_step``)."""
    layout = parse_layout(copy.deepcopy(SEED_LAYOUT))
    found = origins.of_layout(layout)
    with open(mlp.__file__) as handle:
        code = handle.read().splitlines()
    chosen = {a.path: a.chosen for a in compile_step(layout)[0].activations}
    # the guide's loss is a sum: its gradient needs no forward value of the last matmul, which JAX drops; the first three
    for layer in range(3):
        [matmul] = [v for v in found if v.op_name == f"jit(train_step)/jvp(LogicalMLP)/LogicalDotReluDot_{layer}/dot_general"]
        assert set(matmul.described) == {"data"}
        line = int(matmul.described["data"].rsplit(":", 1)[1])
        assert matmul.described["data"].startswith("the constraint at mlp.py:")
        assert "nn.with_logical_constraint(" in code[line - 1]  # the layer's own constraints (y's or z's)
        assert matmul.spec == tuple(() if e is None else (e,) for e in chosen[f"LogicalDotReluDot_{layer}"])
    backward = [v for v in found if "transpose(" in v.op_name]
    assert backward and all(v.origins for v in backward)  # the backward pass's values too, each with an origin


def test_origin_text_names_each_sharding_axis_and_says_where_no_origin_was_recorded():
    value = origins.PropagatedValue(
        index=0,
        op="stablehlo.dot_general",
        op_name="jit(train_step)/dot_general",
        where="mlp.py:23",
        spec=(("data",), ("model",)),
        origins={"data": "input: 0"},
        described={"data": "the input inputs[0]"},
    )
    assert value.origin_text == "data ← input inputs[0]; model ← no origin recorded"  # not guessed, not "replicated"
    assert origins.PropagatedValue(0, "stablehlo.add", "add", "", ((), ()), {}).origin_text == "replicated"


def test_an_axis_from_the_steps_output_names_the_state_leaf_as_jax_names_the_output():
    """Issue 45 item 12: the optimizer's values said ``model ← output: 14`` (Shardy's numbering of the step's outputs)."""
    from explorer.compile.compiled import lower_step

    layout = parse_layout(copy.deepcopy(SEED_LAYOUT))
    found = origins.of_layout(layout)
    said = {d for v in found for d in v.described.values() if d.startswith("output")}
    assert said and not [d for d in said if d[len("output") :].lstrip(": ").isdigit()], said
    # each names a leaf of the step's output pytree by JAX's key path (the new state, named as its input is: state...)
    leaves = {
        "output state" + jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(lower_step(layout).out_info)[0]
    }
    assert said <= leaves, said - leaves
    assert any(d.startswith("output state.opt_state") and ".mu[" in d for d in said), said
