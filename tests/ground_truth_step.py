"""Ground truth for planning a user's own jitted step: JAX's AOT API by hand, with no explorer code at all.

The deviceless recipe (JAX's ``tests/aot_test.py``, MaxText's ``train_compile.py``): the target's devices from a
topology description (``get_topology_desc``: libtpu's for a TPU slice; the CUDA plugin's from XLA's GPU target config,
a text proto the caller reads, for a GPU cluster), ``topologies.make_mesh`` over them, the user's step factory called
with that mesh (``factory(mesh) -> (fn, args)``), ``fn.lower(*args)`` under ``jax.set_mesh(mesh)``, then ``compile``
(for a GPU with the debug option ``XLA_FLAGS=--xla_gpu_experimental_use_collective_kernels=`` sets: NCCL for every
collective; this process's XLA read its flags long ago, so it is passed per compile). What it reads back:
``memory_analysis()``'s figures, ``cost_analysis()``'s flops (TPU) and the optimized program's dot flops (GPU, with
``ground_truth_gpu``'s own parser: ``cost_analysis()`` is empty there).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
from jax.experimental import topologies

from tests.ground_truth_gpu import COLLECTIVE_KERNELS_OFF, dot_flops, memory_of


def compile_step(
    factory: Callable, mesh_shape: Sequence[int], mesh_axes: Sequence[str], *, tpu: str | None = None, gpu: tuple[str, str] | None = None
) -> dict:
    """``factory``'s step compiled for a TPU slice (``tpu``: libtpu's topology, ``v5e:2x4``) or a GPU cluster (``gpu``:
    its target config's text and the topology ``1xHOSTSxGPUS``), on a mesh of ``mesh_shape`` and ``mesh_axes``."""
    if tpu is not None:
        topology = topologies.get_topology_desc(topology_name=tpu, platform="tpu")
    else:
        topology = topologies.get_topology_desc(platform="cuda", target_config=gpu[0], topology=gpu[1])
    mesh = topologies.make_mesh(topology, tuple(mesh_shape), tuple(mesh_axes))
    step, args = factory(mesh)
    with jax.set_mesh(mesh):
        lowered = step.lower(*args)
    compiled = lowered.compile(COLLECTIVE_KERNELS_OFF if gpu is not None else {})
    return {
        "memory": memory_of(compiled) | {"generated_code_bytes": compiled.memory_analysis().generated_code_size_in_bytes},
        "flops": float((compiled.cost_analysis() or {}).get("flops", 0.0)),
        "dot_flops": dot_flops(compiled.as_text()),
    }
