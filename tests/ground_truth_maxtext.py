"""Ground truth for ``--maxtext``: MaxText's own train_compile.py path, with no explorer code at all.

For a list of MaxText command-line overrides (``KEY=VALUE``), as ``train_compile.py``'s ``main`` does:
``pyconfig.initialize`` over the package's ``base.yml``; ``get_topology_mesh(config)`` (``compile_topology``'s devices
from libtpu's topology description, ``maxtext_utils.create_device_mesh``: ICI inside a slice, DCN across);
``get_shaped_inputs(mesh, config)``: the train state built abstractly by MaxText's model and optimizer, its shardings
from the config's ``logical_axis_rules``. What it reads back: the mesh's axis names, shape and device ids, and every
model parameter's and every optimizer-state leaf's shape, dtype and PartitionSpec from ``state_mesh_shardings``. With ``debug_sharding=true`` among
the overrides, also the forward pass's activations as MaxText records them (``_collect_nnx_activation_shardings``:
the model called abstractly under ``jax.set_mesh`` of the topology's mesh and the config's rules; each
``maybe_shard_with_name`` logs its value's type and PartitionSpec, size-1 mesh axes dropped): ``activations``, a list
of ``{"where": "attentions/query", "type": "bfloat16[8,128,256]", "spec": [...]}``, one per distinct constraint.

Run as ``python tests/ground_truth_maxtext.py JSON`` with JSON a list of override lists; prints one JSON line, a
result per case. A child process: libtpu is loaded with JAX_PLATFORMS=cpu, as train_compile.py runs.

``python tests/ground_truth_maxtext.py --compile JSON`` runs ``train_compile.main`` itself for each list of overrides
(its ``compile_topology`` and ``compile_topology_num_slices`` among them), as its command line would, and reads the
executable its ``jit_and_compile`` returned (wrapped to keep it, nothing else changed): ``memory_analysis()``'s figures,
``cost_analysis()``'s flops, and the LIBTPU_INIT_ARGS ``main`` left in the environment.
"""

from __future__ import annotations

import ast
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def spec_of(sharding) -> list:
    return [list(axis) if isinstance(axis, tuple) else axis for axis in sharding.spec]


def one_case(overrides: list[str]) -> dict:
    import jax
    import maxtext.configs
    from flax import nnx
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train_compile

    base = os.path.join(os.path.dirname(maxtext.configs.__file__), "base.yml")
    debug = "debug_sharding=true" in overrides  # the activations too: a second config (get_shaped_inputs runs without it)
    config = pyconfig.initialize(["train_compile", base, "run_name=ground_truth", *(o for o in overrides if o != "debug_sharding=true")])
    mesh = train_compile.get_topology_mesh(config)
    shaped = train_compile.get_shaped_inputs(mesh, config)
    abstract_state, state_shardings = shaped[0][0], shaped[2]  # (train args, kwargs, state_mesh_shardings, ...)
    activations = []
    if debug:  # the forward pass traced under the topology's mesh and the config's rules, as MaxText records it
        import jax.numpy as jnp
        from flax.core.spmd import logical_axis_rules
        from maxtext.utils import model_creation_utils, sharding

        config = pyconfig.initialize(["train_compile", base, "run_name=ground_truth", *overrides])
        create_model, _ = model_creation_utils.create_nnx_abstract_model(config, mesh)
        with logical_axis_rules(config.logical_axis_rules):  # built under the rules, as _collect_nnx_activation_shardings
            graphdef, variables = nnx.split(nnx.eval_shape(create_model))  # does (a pipeline's stage specs read them)
        batch = int(config.per_device_batch_size * mesh.devices.size)  # the slice's batch (a CPU process's config counts no devices)
        tokens = jax.ShapeDtypeStruct((batch, config.max_target_length), jnp.int32)

        def forward(variables, tokens, positions, segments):
            return nnx.merge(graphdef, variables)(tokens, positions, decoder_segment_ids=segments, enable_dropout=False)

        sharding.clear_input_shardings_dump()
        with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules):
            jax.make_jaxpr(forward)(variables, tokens, tokens, tokens)
        for entry in sharding._ACTIVATION_SHARDINGS_DUMP:
            ((key, value),) = entry.items()
            text = value["PartitionSpec"].removeprefix("P").replace("UNCONSTRAINED", "'UNCONSTRAINED'")  # P.UNCONSTRAINED
            spec = ast.literal_eval(text)
            where, kind = key.rsplit(": ", 1)  # MaxText's "<file>/<variable>" and the value's type
            activations.append({"where": where, "type": kind, "spec": [list(a) if isinstance(a, tuple) else a for a in spec]})
    shapes = dict(nnx.to_flat_state(abstract_state["model"]))
    parameters = {}
    for path, variable in nnx.to_flat_state(state_shardings["model"]):
        if not isinstance(variable, nnx.Param):  # the model's rng counters and keys are state, not parameters
            continue
        value = shapes[path]
        value = value.value if isinstance(value, nnx.Variable) else value
        name = "/".join(str(part) for part in path)
        parameters[name] = {"shape": list(value.shape), "dtype": str(value.dtype), "spec": spec_of(variable.value)}
    optimizer_shapes = dict(nnx.to_flat_state(abstract_state["optimizer"]))
    optimizer = {}
    for path, variable in nnx.to_flat_state(state_shardings["optimizer"]):
        value = optimizer_shapes[path]
        value = value.value if isinstance(value, nnx.Variable) else value
        sharding = variable.value if isinstance(variable, nnx.Variable) else variable
        name = "/".join(str(part) for part in path)
        optimizer[name] = {"shape": list(value.shape), "dtype": str(value.dtype), "spec": spec_of(sharding)}
    return {
        "axes": list(mesh.axis_names),
        "shape": [int(n) for n in mesh.devices.shape],
        "device_ids": [int(d.id) for d in mesh.devices.flat],
        "parameters": parameters,
        "optimizer": optimizer,
        "activations": activations,
        "jax": jax.__version__,
    }


def compiled_case(overrides: list[str]) -> dict:
    import maxtext.configs
    from maxtext.trainers.pre_train import train_compile

    base = os.path.join(os.path.dirname(maxtext.configs.__file__), "base.yml")
    kept = []
    real = train_compile.jit_and_compile

    def keep(*args, **kwargs):
        kept.append(real(*args, **kwargs))
        return kept[-1]

    train_compile.jit_and_compile = keep
    try:
        train_compile.main(["train_compile", base, "run_name=ground_truth", *overrides])
    finally:
        train_compile.jit_and_compile = real
    stats = kept[-1].memory_analysis()
    fields = ("argument", "output", "alias", "temp", "generated_code")
    return {
        "memory": {f"{name}_bytes": int(getattr(stats, f"{name}_size_in_bytes")) for name in fields},
        "flops": float(kept[-1].cost_analysis()["flops"]),
        "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS", ""),
    }


if __name__ == "__main__":
    if sys.argv[1] == "--compile":
        results = [compiled_case(case) for case in json.loads(sys.argv[2])]
        print("\n" + json.dumps(results))
        sys.exit(0)
    results = [one_case(case) for case in json.loads(sys.argv[1])]
    print("\n" + json.dumps(results))  # the last line: MaxText logs to standard output
