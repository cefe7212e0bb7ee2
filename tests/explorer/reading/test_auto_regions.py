"""Implicit communication on Explicit meshes: the embedding lookup's ``auto_axes`` reshards, listed at the user's line.

Bonsai's Qwen3 looks its tokens up with ``embedding[...].at[(tokens,)].get(out_sharding=...)``: JAX reshards the
table and the token ids onto an Auto copy of the mesh before the gather. The reading must list both, at the model's
line, as communication, in the per-value view and the activation rows; checked against the jaxpr read here directly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from tests.external import factories
from tests.external.bonsai_qwen3 import modeling

QWEN3 = "tests.external.factories:make_bonsai_qwen3"


def _line_of(code: str) -> int:
    with open(modeling.__file__) as handle:
        return next(n for n, text in enumerate(handle, start=1) if code in text)


def _entries_read_directly() -> list[tuple[tuple[int, ...], tuple]]:
    """(shape, source spec) of every reshard in Qwen3's forward jaxpr from an Explicit type onto an Auto mesh."""
    builder, inputs, _ = factories.make_bonsai_qwen3()
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        graphdef, state = nnx.split(nnx.eval_shape(builder))
        typed = [jax.ShapeDtypeStruct(i.shape, jnp.dtype(i.dtype), sharding=NamedSharding(mesh, PartitionSpec())) for i in inputs]
        closed = jax.make_jaxpr(lambda s, *xs: nnx.merge(graphdef, s)(*xs))(state, *typed)
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "reshard":
                source, target = eqn.invars[0].aval.sharding, eqn.params["dst_sharding"]
                if AxisType.Explicit in source.mesh.axis_types and AxisType.Auto in target.mesh.axis_types:
                    found.append((tuple(eqn.outvars[0].aval.shape), tuple(source.spec)))
            for value in eqn.params.values():
                for item in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(item, "jaxpr", item)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(closed.jaxpr)
    return found


def test_the_embedding_lookups_two_reshards_are_listed_at_the_users_line_as_communication(monkeypatch):
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", QWEN3)
    layout = parse_layout(
        {
            "name": "qwen3",
            "rules": [],
            "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
            "model": {"name": QWEN3, "options": {}},
        }
    )
    report = analyze(layout)
    entered = [v for v in report.values if v.communication.startswith("into auto_axes")]
    direct = _entries_read_directly()
    assert len(direct) == 2  # the table (vocab, embed) and the token ids (batch, length)
    assert [v.shape for v in entered] == [shape for shape, _ in direct] == [(128, 64), (8, 16)]
    line = f"modeling.py:{_line_of('.at[(tokens,)].get(out_sharding=')}"
    assert {v.source for v in entered} == {line}
    assert all(v.sets_sharding for v in entered)
    assert str(PartitionSpec(*direct[0][1])) in entered[0].communication  # the table's own sharding, as it was
    rows = [a for a in report.arrays if a.kind == "activation" and "into auto_axes" in (a.note or "")]
    assert [a.shape for a in rows] == [(128, 64), (8, 16)] and all(line in a.note for a in rows)
    left = [v for v in report.values if v.communication.startswith("out of auto_axes")]
    assert [v.source for v in left] == [line]
