"""Ground truth for which line of a model each collective comes from, with no explorer code at all.

The model's train step is compiled with plain JAX and Flax (the Flax guides' recipe: Adam 1e-3, ``jax.grad`` of the
loss, Linen's ``TrainState.apply_gradients`` or NNX's ``nnx.Optimizer.update``), jitted with the parameters' shardings
from Flax (``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding``; NNX: ``nnx.get_named_sharding`` of the
abstract model and optimizer built under the mesh) and the inputs' mesh specs as given. The compiled module's text is
then read with this module's own parser:

- every collective instruction (an asynchronous pair once, at its ``-done``) with its ``stack_frame_id``;
- the module's tables ``FileNames``, ``FunctionNames``, ``FileLocations`` and ``StackFrames``: frame N's location
  and its caller, frame ``parent_frame_id - 1`` (0: none);
- the collective's line: the innermost frame of its chain whose file is the model's: not an installed JAX, Flax or
  optax file, not the standard library, not this harness and not the explorer's own code (its built-in models
  excepted);
- how often it runs per step: its computation's runs, a while loop's body ``known_trip_count`` times
  (``ground_truth_gpu.runs_per_computation``).
"""

from __future__ import annotations

import collections
import functools
import os
import re
import sysconfig
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from tests.ground_truth_gpu import guide_functions, runs_per_computation
from tests.paths import ROOT

_COLLECTIVE = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*.*?\s(?P<op>all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)"
    r"(?P<phase>-start|-done)?\("
)
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_LIBRARIES = ("jax", "jaxlib", "flax", "optax")


def _input_shardings(mesh, input_specs: Sequence[tuple]) -> tuple[NamedSharding, ...]:
    return tuple(NamedSharding(mesh, PartitionSpec(*spec)) for spec in input_specs)


def linen_step_text(module: nn.Module, inputs: Sequence[Any], input_specs: Sequence[tuple], loss: Callable, mesh, rules) -> str:
    """The compiled text of the Flax guide's Linen train step on ``mesh`` (Auto axes) under ``rules``."""
    rules = tuple(rules)
    abstract_inputs = tuple(jax.ShapeDtypeStruct(tuple(i.shape), jnp.dtype(i.dtype)) for i in inputs)
    model_inputs = [x for x, i in zip(abstract_inputs, inputs) if getattr(i, "model_arg", True)]

    init_fn, train_step = guide_functions(module, inputs, loss)
    key = jax.random.key(0)  # a concrete array: made outside the mesh (a TPU slice's devices run nothing here)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract_state = jax.eval_shape(functools.partial(init_fn, key), *model_inputs)
        state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract_state), mesh, rules)
        compiled = (
            jax.jit(train_step, in_shardings=(state_sharding, *_input_shardings(mesh, input_specs)), out_shardings=state_sharding)
            .lower(abstract_state, *abstract_inputs)
            .compile()
        )
    return compiled.as_text()


def nnx_step_text(build: Callable, inputs: Sequence[Any], input_specs: Sequence[tuple], loss: Callable, mesh, rules=()) -> str:
    """The compiled text of the NNX guide's train step (``nnx.Optimizer.update`` on ``nnx.grad``) on ``mesh``."""

    def create():
        model = build()
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    with jax.set_mesh(mesh), nnx.logical_axis_rules(tuple(rules)):
        graphdef, abstract = nnx.split(nnx.eval_shape(create))
        shardings = nnx.get_named_sharding(abstract, mesh)

        def train_step(state, *xs):
            model, optimizer = nnx.merge(graphdef, state)
            grads = nnx.grad(lambda m: loss(m(*xs), *xs))(model)
            optimizer.update(model, grads)
            return nnx.state((model, optimizer))

        abstract_inputs = tuple(jax.ShapeDtypeStruct(tuple(i.shape), jnp.dtype(i.dtype)) for i in inputs)
        compiled = (
            jax.jit(train_step, in_shardings=(shardings, *_input_shardings(mesh, input_specs)), out_shardings=shardings)
            .lower(abstract, *abstract_inputs)
            .compile()
        )
    return compiled.as_text()


# --- the module's own stack frames, read with this module's code --------------------------------------------


def _rows(text: str, table: str) -> dict[int, str]:
    lines = text.splitlines()
    start = lines.index(table) + 1
    rows = {}
    for line in lines[start:]:
        number, _, rest = line.partition(" ")
        if not number.isdigit():
            break
        rows[int(number)] = rest
    return rows


def frames(text: str) -> dict[int, list[tuple[str, int, str]]]:
    """Frame id -> its chain of (file, line, function), innermost first."""
    files = {k: v.strip('"') for k, v in _rows(text, "FileNames").items()}
    functions = {k: v.strip('"') for k, v in _rows(text, "FunctionNames").items()}
    locations = {k: dict(re.findall(r"(\w+)=(\d+)", v)) for k, v in _rows(text, "FileLocations").items()}
    stack = {k: dict(re.findall(r"(\w+)=(\d+)", v)) for k, v in _rows(text, "StackFrames").items()}

    def chain(number: int) -> list[tuple[str, int, str]]:
        out = []
        while number:
            where = locations[int(stack[number]["file_location_id"])]
            out.append((files[int(where["file_name_id"])], int(where["line"]), functions[int(where["function_name_id"])]))
            number = int(stack[number]["parent_frame_id"]) - 1
        return out

    return {number: chain(number) for number in stack}


def is_models_code(file: str) -> bool:
    """Not an installed JAX/Flax/optax file, not the standard library, not this harness, not the explorer (its
    built-in models excepted)."""
    parts = file.split("/")
    if any(p in ("site-packages", "dist-packages") and parts[i + 1] in _LIBRARIES for i, p in enumerate(parts[:-1])):
        return False
    if file.startswith("<") or os.path.abspath(file) == os.path.abspath(__file__):
        return False
    explorer = str(ROOT / "explorer") + "/"
    if file.startswith(explorer):
        return file.startswith(explorer + "models/")
    stdlib = os.path.join(sysconfig.get_paths()["stdlib"], "")
    return not (file.startswith(stdlib) and "-packages/" not in file)


def collective_lines(text: str) -> dict[str, tuple[str, str | None, int | None, int]]:
    """Instruction name -> (op, file, line, runs per step) of every collective of the module."""
    computations, runs = runs_per_computation(text)
    chains = frames(text)
    found = {}
    for computation, lines in computations.items():
        for line in lines:
            match = _COLLECTIVE.match(line)
            if not match or match["phase"] == "-start":
                continue
            frame_id = _FRAME_ID.search(line)
            chain = chains.get(int(frame_id[1]), []) if frame_id else []
            user = next(((file, number) for file, number, _ in chain if is_models_code(file)), (None, None))
            found[match["name"]] = (match["op"],) + user + (runs[computation],)
    return found


def by_line(found: dict[str, tuple[str, str | None, int | None, int]]) -> collections.Counter:
    """(op, file, line) -> collectives per step."""
    total: collections.Counter = collections.Counter()
    for op, file, line, runs in found.values():
        total[(op, file, line)] += runs
    return total


TPU_SCRIPT = r"""
import json, sys
from jax.experimental import mesh_utils, topologies
from jax.sharding import AxisType, Mesh
from tests import ground_truth_sources
from tests.external import factories

topology, shape, axes, rules, input_specs, factory, options = json.loads(sys.argv[1])
devices = list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)
mesh = Mesh(mesh_utils.create_device_mesh(shape, devices), tuple(axes), axis_types=(AxisType.Auto,) * len(axes))
module, inputs, loss = getattr(factories, factory)(**options)
rules = tuple((name, tuple(a) if isinstance(a, list) else a) for name, a in rules)
text = ground_truth_sources.linen_step_text(module, inputs, [tuple(s) for s in input_specs], loss, mesh, rules)
print(json.dumps([[op, file, line, runs] for op, file, line, runs in ground_truth_sources.collective_lines(text).values()]))
"""


def tpu_collective_lines(topology: str, shape, axes, rules, input_specs, factory: str, options: dict) -> collections.Counter:
    """``by_line`` of a Linen model's bare train step compiled for a TPU slice (libtpu's topology, in a child process:
    libtpu is loaded once per process tree), the mesh laid out by ``mesh_utils.create_device_mesh``."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TF_CPP_MIN_LOG_LEVEL="3")
    argument = json.dumps([topology, list(shape), list(axes), rules, [list(s) for s in input_specs], factory, options])
    done = subprocess.run([sys.executable, "-c", TPU_SCRIPT, argument], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return by_line({str(i): (op, file, line, runs) for i, (op, file, line, runs) in enumerate(rows)})
