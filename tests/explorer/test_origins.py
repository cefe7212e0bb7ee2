"""Every value's sharding after Shardy's propagation on Auto axes, with the origin of each mesh axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from explorer import origins

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
