"""Ground truth for ``--maxtext``: MaxText's own train_compile.py path, with no explorer code at all.

For a list of MaxText command-line overrides (``KEY=VALUE``), as ``train_compile.py``'s ``main`` does:
``pyconfig.initialize`` over the package's ``base.yml``; ``get_topology_mesh(config)`` (``compile_topology``'s devices
from libtpu's topology description, ``maxtext_utils.create_device_mesh``: ICI inside a slice, DCN across);
``get_shaped_inputs(mesh, config)``: the train state built abstractly by MaxText's model and optimizer, its shardings
from the config's ``logical_axis_rules``. What it reads back: the mesh's axis names, shape and device ids, and every
model parameter's shape, dtype and PartitionSpec from ``state_mesh_shardings``.

Run as ``python tests/ground_truth_maxtext.py JSON`` with JSON a list of override lists; prints one JSON line, a
result per case. A child process: libtpu is loaded with JAX_PLATFORMS=cpu, as train_compile.py runs.
"""

from __future__ import annotations

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
    config = pyconfig.initialize(["train_compile", base, "run_name=ground_truth", *overrides])
    mesh = train_compile.get_topology_mesh(config)
    shaped = train_compile.get_shaped_inputs(mesh, config)
    abstract_state, state_shardings = shaped[0][0], shaped[2]  # (train args, kwargs, state_mesh_shardings, ...)
    shapes = dict(nnx.to_flat_state(abstract_state["model"]))
    parameters = {}
    for path, variable in nnx.to_flat_state(state_shardings["model"]):
        if not isinstance(variable, nnx.Param):  # the model's rng counters and keys are state, not parameters
            continue
        value = shapes[path]
        value = value.value if isinstance(value, nnx.Variable) else value
        name = "/".join(str(part) for part in path)
        parameters[name] = {"shape": list(value.shape), "dtype": str(value.dtype), "spec": spec_of(variable.value)}
    return {
        "axes": list(mesh.axis_names),
        "shape": [int(n) for n in mesh.devices.shape],
        "device_ids": [int(d.id) for d in mesh.devices.flat],
        "parameters": parameters,
        "jax": jax.__version__,
    }


if __name__ == "__main__":
    results = [one_case(case) for case in json.loads(sys.argv[1])]
    print("\n" + json.dumps(results))  # the last line: MaxText logs to standard output
