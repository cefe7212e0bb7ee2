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

from explorer.hlo import sources
from explorer.reading import constraints as reader


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
        (("batch", "embed"), True, True),
        (("embed", "mlp"), False, False),
    ]


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
    assert [(c.dims, c.semantics) for c in found] == [(("batch", "embed"), "linen"), ((("data",), None), "hand"), (("batch", "mlp"), "nnx")]


@pytest.mark.parametrize(
    "spec, expected",
    [
        (P("logical:batch", None), ("batch", None)),
        (P(("data", "model"), "logical:mlp"), (("data", "model"), "mlp")),
        (P(("logical:batch", "data")), (None,)),  # a logical name and a mesh axis on one dimension: not recoverable
    ],
)
def test_decoding_probe_specs(spec, expected):
    assert reader.decode_spec(spec, len(expected)) == expected


# --- the tagged layout: the layout's own resolution, with each dimension's name kept ----------------

from flax.core import spmd as nnx_spmd  # noqa: E402  (NNX's resolver: the rules read as a dict)
from hypothesis import given, settings, strategies as st  # noqa: E402

NAMES = ("batch", "embed", "mlp", "heads", "kv")
AXES = ("data", "model", "fsdp")
_axes = st.one_of(st.none(), st.sampled_from(AXES), st.lists(st.sampled_from(AXES), min_size=1, max_size=2, unique=True).map(tuple))
_rules = st.lists(st.tuples(st.sampled_from(NAMES), _axes), max_size=7).map(tuple)
_array = st.lists(st.one_of(st.none(), st.sampled_from(NAMES)), min_size=1, max_size=4).filter(
    lambda names: len([n for n in names if n]) == len({n for n in names if n})
)


def _strip(entry):
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    kept = tuple(a for a in axes if not a.startswith(reader.PROBE_PREFIX))
    return kept or None


def _plain(entry):
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    return axes or None


@settings(max_examples=300, deadline=None)
@given(rules=_rules, array=_array)
def test_tagged_rules_resolve_as_the_rules_do_the_linen_way(rules, array):
    """Flax's own Linen resolver: the tagged rules give the same mesh axes, and every named dimension its name."""
    tagged = reader.tagged_rules(rules, NAMES)
    plain = nn.logical_to_mesh_axes(array, rules)
    with_tags = nn.logical_to_mesh_axes(array, tagged)
    assert [_plain(e) for e in plain] == [_strip(e) for e in with_tags]
    assert reader.decode_spec(with_tags, len(array), tagged=True) == tuple(array)


@settings(max_examples=300, deadline=None)
@given(rules=_rules, array=_array)
def test_tagged_rules_resolve_as_the_rules_do_the_nnx_way(rules, array):
    """Flax's own NNX resolver (the last rule of a name wins) on names that have a rule; a name with none is what the
    trace checks afterwards (NNX would read it as a mesh axis)."""
    ruled = {name for name, _ in rules}
    array = [n if n in ruled else None for n in array]
    tagged = reader.tagged_rules(rules, NAMES)
    with nn.logical_axis_rules(rules):
        plain = nnx_spmd.apply_rules(P(*array), None)
    with nn.logical_axis_rules(tagged):
        with_tags = nnx_spmd.apply_rules(P(*array), None)
    assert [_plain(e) for e in plain] == [_strip(e) for e in with_tags]
    assert reader.decode_spec(with_tags, len(array), tagged=True) == tuple(array)


_original_wsc = jax.lax.with_sharding_constraint


def _compat_wsc(x, shardings):
    """Stands for MaxText's tunix adapter's wrapper, which it installs over jax.lax.with_sharding_constraint on import."""
    return _original_wsc(x, shardings)


def test_a_wrapper_installed_over_jaxs_constraint_is_jaxs_call_and_the_models_frame_names_the_constraint(monkeypatch):
    """Issue 55: MaxText's activations were named after ``_compat_wsc`` (its tunix adapter's wrapper, the innermost frame
    outside JAX and Flax); the model's own frame, which called Flax's constraint, names them now."""
    monkeypatch.setattr(jax.lax, "with_sharding_constraint", _compat_wsc)

    def attention_block(x):
        return nn.with_logical_constraint(x * 2, ("batch", "embed"))

    auto = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(auto), nn.logical_axis_rules([("batch", "data")]):
        closed = jax.make_jaxpr(attention_block)(X)
    frame = reader.user_frame(next(e for e in closed.jaxpr.eqns if e.primitive.name == "sharding_constraint").source_info)
    assert frame.function_name.endswith("attention_block"), frame
    monkeypatch.undo()
    assert sources.jax_shims() == frozenset()  # JAX's own functions: no shim


def test_a_tagged_mesh_adds_only_size_one_axes():
    mesh = reader.tagged_mesh(["mlp", "batch"], ("data", "model"), (2, 4))
    assert dict(zip(mesh.axis_names, mesh.axis_sizes)) == {"data": 2, "model": 4, "logical:batch": 1, "logical:mlp": 1}
    assert reader.mesh_spec(P(("data", "logical:batch"), "logical:mlp", "model"), 4) == (("data",), None, ("model",), None)


def test_an_equations_user_frame_is_this_files_line_as_a_source_line():
    """The innermost frame outside JAX, Flax and the standard library (sources.is_library, one rule) is this test's."""

    def forward(x):
        return nn.with_logical_constraint(x * 2, ("batch", "embed"))

    closed = jax.make_jaxpr(forward)(X)
    frame = reader.user_frame(closed.jaxpr.eqns[0].source_info)
    assert isinstance(frame, reader.SourceLine) and frame.file_name == __file__ and frame.function_name.endswith("forward")
