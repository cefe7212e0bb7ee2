"""Stage 5 (``explorer/reading/resolve.py``): the abstract model and the layout's received activations as plain data,
from hand-made stage results (nothing traced)."""

from jax.sharding import AbstractMesh, AxisType

from explorer.reading.activations import Activations, Forward
from explorer.reading.arrays import AbstractArray, TypedValue
from explorer.reading.constraints import Constraint
from explorer.reading.resolve import resolve
from explorer.reading.state import State

KEY, AXES = ("mlp", "{}"), ("data", "model")
PARAM = AbstractArray("params/Dense_0/kernel", "param", (4, 8), "float32", ("embed", "mlp"))
INPUT = AbstractArray("inputs/x", "input", (2, 4), "float32", ("batch", None))


def stage(**changes) -> State:
    fields = dict(built=None, framework="linen", optimizer=None, state=None, state_arrays=(PARAM,), inputs=(INPUT,), variables=None)
    return State(**{**fields, "root": "MLP", **changes})


def constraint(dims, location="MLP/Dense_0", activation=True, runs=1, semantics="linen"):
    return Constraint(dims, (2, 8), "float32", location, runs, activation, semantics)


def test_constraints_become_activations_named_by_where_they_were_declared_and_weights_are_counted():
    hidden, again = constraint(("batch", "mlp"), runs=3), constraint(("batch", None))
    named = Forward((hidden, constraint(("embed", "mlp"), activation=False), again), (2, 8), "float32", again)
    received = Forward((constraint((("data",), ("model",))), constraint((("data",), None))), (2, 8), "float32")
    found = resolve(KEY, AXES, stage(), Activations(frozenset({"batch", "mlp"}), named, received=received, asked=frozenset({"batch"})))
    model = found.model
    assert [a.path for a in model.activations] == ["activations/Dense_0/0", "activations/Dense_0/1"]
    assert model.activations[0].runs_per_step == 3 and "runs 3x per step" in model.activations[0].note
    assert model.weight_constraints == 1 and model.asked_names == {"batch"} and found.traced_names == {"batch", "mlp"}
    assert model.output.logical_axes == ("batch", None) and "last constraint" in model.output.note
    assert model.state_arrays == (PARAM,) and model.inputs == (INPUT,)
    assert [a.logical_axes for a in found.received.activations] == [(("data",), ("model",)), (("data",), None)]
    assert found.received.output.logical_axes is None and "XLA chooses" in found.received.output.note


def test_a_refused_probe_keeps_the_state_and_a_refused_layout_says_why():
    named = Forward(output_shape=(2, 8), output_dtype="float32")
    found = resolve(KEY, AXES, stage(), Activations(frozenset(), named, "ValueError: no", received=Forward(error="ValueError: axis twice")))
    assert found.model.activations == () and found.model.probe_error == "ValueError: no"
    assert found.received.error == "ValueError: axis twice" and found.received.activations == ()


def test_only_the_received_activations_when_the_model_was_read_before():
    found = resolve(KEY, AXES, stage(), Activations(received=Forward(error="boom")))
    assert found.model is None and found.received.error == "boom"


def test_explicit_rows_are_the_values_that_set_a_sharding_with_their_source_line():
    mesh = AbstractMesh((2, 4), AXES, axis_types=(AxisType.Explicit,) * 2)
    value = dict(unreduced=(), reduced=(), type_text="f32[2@data,8@model]", function="MLP.__call__", module="", communication="")
    values = (
        TypedValue(0, "dot_general", (2, 8), "float32", ("data", "model"), source="m.py:3", runs=1, sets_sharding=True, **value),
        TypedValue(1, "tanh", (2, 8), "float32", ("data", "model"), source="m.py:4", runs=1, sets_sharding=False, **value),
    )
    typed = stage(framework="nnx", explicit=True, layout=(mesh, ()))
    found = resolve(KEY, AXES, typed, Activations(values=values, inputs=(("data", None),), output=((2, 8), "float32", ("data", None))))
    model = found.model
    assert [(a.path, a.logical_axes, a.source) for a in model.activations] == [("activations/MLP/0", (("data",), ("model",)), "m.py:3")]
    assert model.inputs[0].type_spec == ("data", None) and model.output.type_spec == ("data", None)
    assert model.axis_types == ("explicit", "explicit") and model.values == values and found.received is None
