"""Helpers that ask JAX itself: materialise a train state, read a jaxpr's sharding constraints."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from explorer.abstract import abstract_model, init_fn
from explorer.analysis import jax_mesh, state_shardings


def mesh_of(layout):
    return jax_mesh(tuple(layout.mesh.shape), tuple(layout.mesh.axes))


def example_inputs(built):
    return tuple(jnp.zeros(i.shape, i.dtype) for i in built.inputs)


def materialise_state(report):
    """Run the Flax guide's jitted init with out_shardings taken from the report."""
    model = abstract_model(report.layout.model)
    mesh = mesh_of(report.layout)
    init = functools.partial(init_fn, model=model.built.module, optimizer=model.optimizer)
    with jax.set_mesh(mesh), nn.logical_axis_rules(report.layout.rules_for_flax()):
        state = jax.jit(init, out_shardings=state_shardings(report, model))(
            jax.random.key(0), *example_inputs(model.built)
        )
    return nn.unbox(state)


def flax_recipe_shardings(layout):
    """The guide's own recipe: eval_shape, get_partition_spec, logical_to_mesh_sharding."""
    model = abstract_model(layout.model)
    init = functools.partial(init_fn, model=model.built.module, optimizer=model.optimizer)
    abstract = jax.eval_shape(init, jax.random.key(0), *example_inputs(model.built))
    return nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh_of(layout), layout.rules_for_flax())


def _walk(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if isinstance(inner, jax.extend.core.Jaxpr):
                yield from _walk(inner)


def declared_constraints(layout):
    """Every sharding_constraint in the jaxpr of the forward pass, in program order: (shape, spec)."""
    return [(shape, spec) for shape, spec, _ in _constraints(layout)]


def declared_constraint_bytes(layout):
    """Bytes one device holds of each sharding_constraint's value, by JAX's own shard shape."""
    mesh = mesh_of(layout)
    return [
        math.prod(NamedSharding(mesh, spec).shard_shape(shape)) * dtype.itemsize
        for shape, spec, dtype in _constraints(layout)
    ]


def _constraints(layout):
    model = abstract_model(layout.model)
    mesh = mesh_of(layout)
    built = model.built
    params = nn.unbox(model.state_shapes.params)
    forward = lambda p, *xs: built.module.apply({"params": p}, *xs)
    with jax.set_mesh(mesh), nn.logical_axis_rules(layout.rules_for_flax()):
        closed = jax.make_jaxpr(forward)(params, *example_inputs(built))
    found = []
    for eqn in _walk(closed.jaxpr):
        sharding = eqn.params["sharding"]
        spec = sharding.spec if isinstance(sharding, NamedSharding) else sharding
        aval = eqn.invars[0].aval
        found.append((tuple(aval.shape), PartitionSpec(*spec), aval.dtype))
    return found
