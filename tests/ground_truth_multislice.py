"""Ground truth for compiling for several TPU slices without a TPU, with no explorer code at all.

The recipe of the issue, step by step, in a child process (the caller must not load libtpu; JAX's own
``JAX_PLATFORMS=cpu`` and ``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` as MaxText's ``train_compile.py`` runs it):

- ``get_topology_desc(topology_name=SLICE, platform="tpu", num_slices=N)``: N slices' devices, slice by slice;
- the mesh in libtpu's device order (``np.array(devices).reshape(shape)``): the outermost axis spans the slices;
  or, where a case says per axis how many slices it spans (``dcn``), ``mesh_utils.create_hybrid_device_mesh``;
- the Flax guide's model (https://flax.readthedocs.io/en/latest/guides/parallel_training/flax_on_pjit.html:
  ``LogicalDotReluDot`` layers, ``nn.scan`` when asked) and its ``train_step`` (``jax.grad`` of the sum of the
  output, Adam's ``apply_gradients``), the state's shardings from ``nn.get_partition_spec`` and
  ``nn.logical_to_mesh_sharding`` under the rules, donated, lowered with abstract arguments and compiled.

What it reads back: ``memory_analysis()``, ``cost_analysis()``'s flops, and the collectives of the optimized
program with its own parser (``ground_truth_gpu``'s, which imports no explorer code either): the in-slice ones
(XLA compiles one program per slice) and, separately, the cross-slice ones, which XLA writes as ``send``s to the
MegaScale runtime (``_xla_megascale_transfer_type``): per kind, runs and result bytes (an all-gather's input
times the slices in its group, a reduce-scatter's over them).

Run as ``python tests/ground_truth_multislice.py JSON`` with JSON a list of cases
``{"slice": "v5p:2x2x1", "slices": 2, "mesh": [..], "axes": [..], "rules": [[logical, axes], ..], "options": {..}}``;
prints one JSON line, a result per case.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

SCRIPT_ENV = {"JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
_MEGASCALE = re.compile(
    r"=\s*\((?P<array>[a-z]+\d*[a-z0-9]*\[[\d,]*\])[^=]*?\s+send\(.*_xla_megascale_target=(?P<target>\"[^\"]*\"|\{[{}\d,\s]*\})"
    r".*_xla_megascale_transfer_type=\"(?P<kind>\w+)\""
)


def compile_cases(cases: list[dict]) -> list[dict]:
    """Each case compiled by the recipe in one child process (see the module docstring)."""
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **SCRIPT_ENV},
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _guide_model():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class LogicalDotReluDot(nn.Module):
        depth: int

        @nn.compact
        def __call__(self, x):
            y = nn.Dense(
                self.depth,
                kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_normal(), ("embed", "hidden")),
                use_bias=False,
            )(x)
            y = jax.nn.relu(y)
            y = nn.with_logical_constraint(y, ("batch", "hidden"))
            W2 = self.param(
                "W2", nn.with_logical_partitioning(nn.initializers.xavier_normal(), ("hidden", "embed")), (self.depth, x.shape[-1])
            )
            z = jnp.dot(y, W2)
            z = nn.with_logical_constraint(z, ("batch", "embed"))
            return z, None

    class LogicalMLP(nn.Module):
        num_layers: int
        depth: int
        use_scan: bool

        @nn.compact
        def __call__(self, x):
            if self.use_scan:
                x, _ = nn.scan(
                    LogicalDotReluDot,
                    length=self.num_layers,
                    variable_axes={"params": 0},
                    split_rngs={"params": True},
                    metadata_params={nn.PARTITION_NAME: "layer"},
                )(self.depth)(x)
            else:
                for _ in range(self.num_layers):
                    x, _ = LogicalDotReluDot(self.depth)(x)
            return x

    return LogicalMLP


def compile_case(case: dict) -> dict:
    """One case by the recipe: XLA's memory and flops, the in-slice and cross-slice collectives; or XLA's refusal."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import mesh_utils, topologies
    from jax.sharding import Mesh, NamedSharding

    from tests import ground_truth_gpu

    topology = topologies.get_topology_desc(topology_name=case["slice"], platform="tpu", num_slices=case["slices"])
    devices = list(topology.devices)
    if "dcn" in case:  # the slices each axis spans, as MaxText lays them
        ici = tuple(size // count for size, count in zip(case["mesh"], case["dcn"]))
        grid = mesh_utils.create_hybrid_device_mesh(ici, tuple(case["dcn"]), devices)
    else:  # libtpu's device order: slice by slice, so the outermost axis spans the slices
        grid = np.array(devices, dtype=object).reshape(tuple(case["mesh"]))
    mesh = Mesh(grid, tuple(case["axes"]))
    rules = tuple((logical, tuple(axes) if isinstance(axes, list) else axes) for logical, axes in case["rules"])
    options = case["options"]
    module = _guide_model()(options["layers"], options["depth"], options["scan"])
    x = jax.ShapeDtypeStruct((options["batch"], options["depth"]), jnp.float32)
    init_fn, train_step = ground_truth_gpu.guide_functions(module, [x], ground_truth_gpu.guide_loss)
    key = jax.random.key(0)  # on this process' CPU, outside the mesh: the slices' devices run nothing
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract_state = jax.eval_shape(functools.partial(init_fn, key), x)
        state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract_state), mesh, rules)
        x_sharding = NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "embed"), rules))
        lowered = jax.jit(train_step, in_shardings=(state_sharding, x_sharding), out_shardings=state_sharding, donate_argnums=0).lower(
            abstract_state, x
        )
    try:
        compiled = lowered.compile()
    except Exception as error:  # XLA's refusal for HBM: its own line
        return {"devices": len(devices), "slice_index": [d.slice_index for d in devices], "error": str(error).splitlines()[0]}
    text = compiled.as_text()
    return {
        "devices": len(devices),
        "slice_index": [d.slice_index for d in devices],
        "memory": ground_truth_gpu.memory_of(compiled),
        "flops": compiled.cost_analysis()["flops"],
        "ici": ground_truth_gpu.collectives(text),
        "dcn": cross_slice(text),
    }


def cross_slice(text: str) -> dict[str, dict[str, int]]:
    """Per collective kind across slices (MegaScale ``send``s): runs and result bytes per step."""
    from tests import ground_truth_gpu

    computations, runs = ground_truth_gpu.runs_per_computation(text)
    found: dict[str, dict[str, int]] = {}
    for name, lines in computations.items():
        for line in lines:
            match = _MEGASCALE.search(line)
            if not match:
                continue
            kind = match["kind"].lower().replace("_", "-")
            target = match["target"]
            compact = re.fullmatch(r'"\{([\d,]+)\}x\{[\d:,]+\}"', target)
            members = len(compact[1].split(",")) if compact else max(len(g.split(",")) for g in re.findall(r"\{([\d,\s]+)\}", target))
            sent = ground_truth_gpu.array_bytes(match["array"])
            result = sent * members if kind == "all-gather" else sent // members if kind == "reduce-scatter" else sent
            entry = found.setdefault(kind, {"count": 0, "bytes": 0})
            entry["count"] += runs[name]
            entry["bytes"] += runs[name] * result
    return found


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps([compile_case(case) for case in json.loads(sys.argv[1])]))
