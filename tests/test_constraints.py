"""How the reader of a traced program classifies sharding constraints: activation or weight, semantics, names.

A constraint is an activation when its value is computed from a model input, through
any program it sits in (loops, conditionals, called programs). These tests build small
programs with JAX alone and check each case; the class models in ``test_ground_truth``
check whole models against Flax's own recipe.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from explorer.reading import constraints as reader
from explorer.reading.trace import path_to_str


def _read(function, *args, inputs=(1,), names=("batch", "embed", "mlp"), mesh_axes=("data",)):
    with jax.sharding.use_abstract_mesh(reader.probe_mesh(names, mesh_axes)), nn.logical_axis_rules(reader.probe_rules(names)):
        closed = jax.make_jaxpr(function)(*args)
    return reader.constraints(closed, input_invars=inputs)


W, X = jnp.zeros((4, 4)), jnp.zeros((2, 4))


def test_a_cast_and_transposed_weight_is_not_an_activation():
    def forward(w, x):
        weight = nn.with_logical_constraint(w.astype(jnp.bfloat16).T, ("mlp", "embed"))
        return nn.with_logical_constraint(x @ weight.astype(jnp.float32), ("batch", "embed"))

    found = _read(forward, W, X)
    assert [(c.dims, c.activation) for c in found] == [(("mlp", "embed"), False), (("batch", "embed"), True)]


def test_a_weight_read_inside_a_scanned_body_is_not_an_activation():
    def forward(ws, x):
        def body(carry, w):
            weight = nn.with_logical_constraint(w.T, ("mlp", "embed"))
            return nn.with_logical_constraint(carry @ weight, ("batch", "embed")), None
        return jax.lax.scan(body, x, ws)[0]

    found = _read(forward, jnp.zeros((3, 4, 4)), X)
    assert [(c.dims, c.activation, c.runs) for c in found] == [(("mlp", "embed"), False, 3), (("batch", "embed"), True, 3)]


def test_a_carry_that_comes_to_depend_on_an_input_is_an_activation():
    """Both carries start as constants; the input reaches ``later`` after one turn and ``first`` after two."""
    def forward(w, x):
        def body(carry, _):
            first, later = carry
            constrained = nn.with_logical_constraint(first, ("batch", "embed"))
            return (later, x + constrained), None
        return jax.lax.scan(body, (jnp.zeros_like(x), jnp.zeros_like(x)), None, length=3)[0]

    found = _read(forward, W, X)
    assert [c.activation for c in found] == [True]


def test_a_while_loop_and_a_conditional_carry_the_input_marks():
    def forward(w, x):
        def body(state):
            i, value = state
            return i + 1, nn.with_logical_constraint(value @ w, ("batch", "embed"))
        looped = jax.lax.while_loop(lambda s: s[0] < 3, body, (0, x))[1]
        weight = jax.lax.cond(True, lambda: nn.with_logical_constraint(w, ("embed", "mlp")), lambda: w)
        return looped @ weight

    found = _read(forward, W, X)
    assert [(c.dims, c.activation, c.in_loop_without_length) for c in found] == [
        (("batch", "embed"), True, True), (("embed", "mlp"), False, False)]


def test_a_constant_is_not_an_activation():
    def forward(w, x):
        positions = nn.with_logical_constraint(jnp.arange(8.0).reshape(2, 4), ("batch", "embed"))
        return x + positions

    assert [c.activation for c in _read(forward, W, X)] == [False]


def test_any_number_of_logical_names():
    names = tuple(f"name{i}" for i in range(200))

    def forward(w, x):
        for i in range(0, 200, 40):
            x = nn.with_logical_constraint(x, (names[i], names[i + 39]))
        return x

    found = _read(forward, W, X, names=names)
    assert [c.dims for c in found] == [(names[i], names[i + 39]) for i in range(0, 200, 40)]


def test_rule_semantics_follow_the_call():
    """Linen's with_logical_constraint resolves the Linen way, an NNX variable's out_sharding the NNX way, a hand call
    with mesh axes is neither."""
    def forward(w, x):
        x = nn.with_logical_constraint(x, ("batch", "embed"))
        x = jax.lax.with_sharding_constraint(x, P("data", None))
        variable = nnx.Param(x * 2, out_sharding=("batch", "mlp"))  # an NNX variable created from an input
        return variable[...]

    found = _read(forward, W, X)
    assert [(c.dims, c.semantics) for c in found] == [
        (("batch", "embed"), "linen"), ((("data",), None), "hand"), (("batch", "mlp"), "nnx")]


def test_paths_keep_a_module_named_value_and_drop_a_box_value():
    params = {"attention": {"value": {"kernel": nn.LogicallyPartitioned(jnp.zeros(2), ("embed",))}}}
    paths = [path_to_str(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    assert paths == ["attention/value/kernel"]


@pytest.mark.parametrize("spec, expected", [
    (P("logical:batch", None), ("batch", None)),
    (P(("data", "model"), "logical:mlp"), (("data", "model"), "mlp")),
    (P(("logical:batch", "data")), (None,)),  # a logical name and a mesh axis on one dimension: not recoverable
])
def test_decoding_probe_specs(spec, expected):
    assert reader.decode_spec(spec, len(expected)) == expected
