"""Tiny programs compiled for a TPU topology by libtpu (no TPU needed), their optimized HLO text on stdout.

Run as ``python -m tests.tpu_programs NAME ...`` (a JSON object of each named program's text on stdout) with
``JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1`` (libtpu's lock: one loader per process tree). Imports no
explorer code: what the step model reads is what XLA built.

- ``attention``: a splash-attention-like Pallas kernel (q, k, v of [batch, heads, seq, head_dim]; softmax(q k^T) v
  per (batch, head) block) with the cost estimate ``FLOPS``/``BYTES`` that ``pl.pallas_call(cost_estimate=)`` carries.
- ``attention-no-estimate``: the same kernel without one.
- ``offload``: a remat policy that offloads each layer's activation to pinned host memory and brings it back;
  ``offload-scanned`` the same layers under ``jax.lax.scan``.
- ``scanned``: ``offload-scanned``'s layers without the policy: each iteration's activations saved in HBM, stacked.
- ``refused-GENERATION`` (``REFUSALS``): not a program but the compiler's refusal of one far too big for one device of
  that TPU generation (E1000, which names the HBM XLA lets a program use).

``python -m tests.tpu_programs --dump FOLDER NAME ...`` compiles each named program with XLA's dump of it (text and
``HloProto``, ``xla_dump_to``) in ``FOLDER/NAME``, for the memory breakdown's tests against XProf's Memory Viewer.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

TOPOLOGY = "v5e:2x2"
SHAPE = (4, 8, 512, 128)  # batch, heads, seq, head_dim of one device's q, k and v
# The estimate a causal kernel would give: half of q k^T and p v's flops; q, k, v read and o written (bf16) and a float32
# log-sum-exp per row written; not what the shapes give (all of both products; q, k, v and o).
FLOPS, BYTES = 2 * 4 * 8 * 512 * 512 * 128, 4 * 4 * 8 * 512 * 128 * 2 + 4 * 8 * 512 * 4
OFFLOADED = (2048, 1024)  # one layer's activation, bf16, per device, offloaded to the host
LAYERS = 3
OPTIONS: dict = {}  # compile options of every program (``--dump`` sets XLA's dump)


def _mesh():
    return topologies.make_mesh(topologies.get_topology_desc(TOPOLOGY, "tpu"), (4,), ("x",))


def _attention_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[0, 0], k_ref[0, 0], v_ref[0, 0]
    s = jnp.dot(q, k.T, preferred_element_type=jnp.float32)
    p = jnp.exp(s - s.max(axis=-1, keepdims=True))
    o = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32) / p.sum(axis=-1, keepdims=True)
    o_ref[0, 0] = o.astype(o_ref.dtype)


def attention(estimate: bool) -> str:
    mesh = _mesh()
    batch, heads, seq, dim = SHAPE
    block = pl.BlockSpec((1, 1, seq, dim), lambda b, h: (b, h, 0, 0))
    cost = {"cost_estimate": pl.CostEstimate(flops=FLOPS, transcendentals=batch * heads * seq * seq, bytes_accessed=BYTES)}

    def local(q, k, v):
        return pl.pallas_call(
            _attention_kernel,
            out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.bfloat16),
            grid=(batch, heads),
            in_specs=[block, block, block],
            out_specs=block,
            **(cost if estimate else {}),
        )(q, k, v)

    spec = P("x")
    sharded = jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    array = jax.ShapeDtypeStruct((4 * batch, heads, seq, dim), jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    return jax.jit(sharded).lower(array, array, array).compile(OPTIONS).as_text()


def offload() -> str:
    mesh = _mesh()
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"], offload_src="device", offload_dst="pinned_host"
    )

    def layer(w, x):
        return jnp.tanh(checkpoint_name(jnp.tanh(x @ w), "hidden") @ w.T)

    def loss(ws, x):
        for w in ws:
            x = jax.checkpoint(layer, policy=policy)(w, x)
        return x.astype(jnp.float32).sum()

    rows, width = OFFLOADED
    weight = jax.ShapeDtypeStruct((width, width), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((4 * rows, width), jnp.bfloat16, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(jax.grad(loss)).lower([weight] * LAYERS, x).compile(OPTIONS).as_text()


def offload_scanned() -> str:
    """``offload`` with the layers under ``jax.lax.scan``, as MaxText scans them: the compiler writes each iteration's
    activation into a stacked buffer in host memory and reads it back slice by slice in the backward loop."""
    mesh = _mesh()
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"], offload_src="device", offload_dst="pinned_host"
    )

    def layer(x, w):
        return jnp.tanh(checkpoint_name(jnp.tanh(x @ w), "hidden") @ w.T), None

    def loss(ws, x):
        x, _ = jax.lax.scan(jax.checkpoint(layer, policy=policy), x, ws)
        return x.astype(jnp.float32).sum()

    rows, width = OFFLOADED
    weights = jax.ShapeDtypeStruct((LAYERS, width, width), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((4 * rows, width), jnp.bfloat16, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(jax.grad(loss)).lower(weights, x).compile(OPTIONS).as_text()


def scanned() -> str:
    """``offload-scanned``'s layers saving every activation in HBM (no policy): stacked, one slice per iteration."""
    mesh = _mesh()

    def layer(x, w):
        return jnp.tanh(jnp.tanh(x @ w) @ w.T), None

    def loss(ws, x):
        x, _ = jax.lax.scan(layer, x, ws)
        return x.astype(jnp.float32).sum()

    rows, width = OFFLOADED
    weights = jax.ShapeDtypeStruct((LAYERS, width, width), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((4 * rows, width), jnp.bfloat16, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(jax.grad(loss)).lower(weights, x).compile(OPTIONS).as_text()


def refused(topology: str, chip_config: str | None) -> str:
    """The compiler's refusal (its message) of a 256 GiB program for one device of ``topology``."""
    config = {"chip_config_name": chip_config} if chip_config else {}
    device = topologies.get_topology_desc(topology, "tpu", **config).devices[0]
    big = jax.ShapeDtypeStruct((2**36,), jnp.float32, sharding=SingleDeviceSharding(device))
    try:
        jax.jit(lambda x: x * 2).lower(big).compile()
    except Exception as error:  # the refusal is what is asked for
        return str(error)
    return ""


# one slice of each TPU generation, for ``refused``, as train_compile.py describes it: v4 as megacores (one device per
# chip, two TensorCores), TPU7x with its default chip config (two devices per chip)
ONE_SLICE = {
    "v4": ("v4:2x2x1", "megacore"),
    "v5e": ("v5e:2x2", None),
    "v5p": ("v5p:2x2x1", None),
    "v6e": ("v6e:2x2", None),
    "tpu7x": ("tpu7x:2x2x1", "default"),
}
REFUSALS = {f"refused-{generation}": (lambda slice_=slice_: refused(*slice_)) for generation, slice_ in ONE_SLICE.items()}

PROGRAMS = {
    "attention": lambda: attention(True),
    "attention-no-estimate": lambda: attention(False),
    "offload": offload,
    "offload-scanned": offload_scanned,
    "scanned": scanned,
}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--dump"]:
        for which in sys.argv[3:]:
            OPTIONS.update({"xla_dump_to": f"{sys.argv[2]}/{which}", "xla_dump_hlo_as_proto": True, "xla_dump_hlo_as_text": True})
            PROGRAMS[which]()
    else:
        json.dump({which: (PROGRAMS | REFUSALS)[which]() for which in sys.argv[1:]}, sys.stdout)
