"""Ground truth for compiling for an NVIDIA GPU cluster without a GPU, with no explorer code at all.

The deviceless recipe (JAX's ``tests/aot_test.py``, MaxText's ``train_compile.py``), step by step:

- ``get_topology_desc(platform="cuda", target_config=TEXT, topology="1xHxG")``: the cluster's devices from
  XLA's GPU target config (a text proto; the caller reads the file), partitions x hosts x GPUs per host;
- ``topologies.make_mesh`` over them;
- the Flax guide's state (https://flax.readthedocs.io/en/latest/guides/parallel_training/flax_on_pjit.html):
  ``jax.eval_shape`` of its ``init_fn`` (``model.init`` then ``TrainState.create`` with Adam) under the
  rules, ``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding``; the inputs' shardings from their
  logical axes through ``nn.logical_to_mesh_axes``;
- the guide's ``train_step`` (``jax.grad`` of the loss, ``apply_gradients``), jitted with those shardings
  and the state donated, lowered with abstract arguments and compiled with the debug option that
  ``XLA_FLAGS=--xla_gpu_experimental_use_collective_kernels=`` sets (NCCL for every collective; this
  process's XLA read its flags long ago, so it is passed per compile).

What it reads back, with its own parser of the optimized HLO text: ``memory_analysis()``; the flops of
every dot (and cuBLAS gemm call) of the GPU program, 2 x output elements x contracted size, counted as
often as its computation runs (a while loop's body ``known_trip_count`` times); each collective's runs
and result bytes (an asynchronous pair once, at its ``-done``).

A model is handed over as its author wrote it: a Linen module, its inputs (anything with ``shape``,
``dtype``, ``logical_axes`` and optionally ``model_arg``) and ``loss(output, *inputs)``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec

COLLECTIVE_KERNELS_OFF = {"xla_gpu_experimental_use_collective_kernels": ""}
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def guide_loss(y, *_):
    """The Flax guide's loss: the sum of the output."""
    return y.sum()


def guide_functions(module: nn.Module, inputs: Sequence[Any], loss: Callable) -> tuple[Callable, Callable]:
    """The Flax guide's ``init_fn(key, *model_inputs)`` (``TrainState`` with Adam 1e-3) and ``train_step(state, *inputs)``
    (``apply_gradients`` on ``jax.grad`` of ``loss(output, *inputs)``)."""

    def init_fn(key, *xs):
        variables = module.init(key, *xs)
        return train_state.TrainState.create(apply_fn=module.apply, params=variables["params"], tx=optax.adam(1e-3))

    def train_step(state, *xs):
        def loss_fn(params):
            return loss(module.apply({"params": params}, *[x for x, i in zip(xs, inputs) if getattr(i, "model_arg", True)]), *xs)

        return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

    return init_fn, train_step


def compile_step(
    module: nn.Module,
    inputs: Sequence[Any],
    rules,
    mesh_shape: Sequence[int],
    mesh_axes: Sequence[str],
    target_config: str,
    hosts: int,
    gpus_per_host: int,
    loss: Callable = guide_loss,
) -> dict[str, Any]:
    """Compile the guide's train step for ``hosts`` x ``gpus_per_host`` GPUs; the figures of the module docstring."""
    topology = topologies.get_topology_desc(platform="cuda", target_config=target_config, topology=f"1x{hosts}x{gpus_per_host}")
    mesh = topologies.make_mesh(topology, tuple(mesh_shape), tuple(mesh_axes))
    rules = tuple(rules)
    abstract_inputs = tuple(jax.ShapeDtypeStruct(tuple(i.shape), jnp.dtype(i.dtype)) for i in inputs)
    model_inputs = [x for x, i in zip(abstract_inputs, inputs) if getattr(i, "model_arg", True)]

    init_fn, train_step = guide_functions(module, inputs, loss)
    key = jax.random.key(0)  # on this process' CPU: the mesh's GPUs run nothing
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        abstract_state = jax.eval_shape(functools.partial(init_fn, key), *model_inputs)
        state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract_state), mesh, rules)
        input_shardings = tuple(
            NamedSharding(mesh, nn.logical_to_mesh_axes(tuple(i.logical_axes), rules))
            if i.logical_axes
            else NamedSharding(mesh, PartitionSpec())
            for i in inputs
        )
        lowered = jax.jit(
            train_step, in_shardings=(state_sharding, *input_shardings), out_shardings=state_sharding, donate_argnums=0
        ).lower(abstract_state, *abstract_inputs)
    compiled = lowered.compile(COLLECTIVE_KERNELS_OFF)
    text = compiled.as_text()
    return {
        "device_kind": topology.devices[0].device_kind,
        "devices": len(topology.devices),
        "memory": memory_of(compiled),
        "cost_analysis": compiled.cost_analysis(),
        "dot_flops": dot_flops(text),
        "collectives": collectives(text),
        "text": text,
    }


def memory_of(compiled) -> dict[str, int]:
    """``memory_analysis()``'s figures per device, by the names the explorer's JSON gives them."""
    stats = compiled.memory_analysis()
    return {
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
        "peak_bytes": stats.peak_memory_in_bytes,
    }


# --- the optimized HLO text, read with this module's own code -------------------------------------

_HEADER = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_CALL = re.compile(r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)")
_CALL_LIST = re.compile(r"\b(?:branch_computations|called_computations)=\{([^}]*)\}")
_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\(.*?\)|\S+)\s+([\w\-]+)\(")
_ARRAY = re.compile(r"([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    computations, entry, current = {}, None, None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = header.group(2)
            computations[current] = []
            if header.group(1):
                entry = current
        elif line.startswith("}"):
            current = None
        elif current is not None:
            computations[current].append(line)
    return computations, entry


def runs_per_computation(text: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Each computation's lines and how many times it runs per call of the entry (trip counts included)."""
    computations, entry = _computations(text)
    callers: dict[str, list[tuple[str, int]]] = {}
    for caller, lines in computations.items():
        for line in lines:
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line) if " while(" in line else None
            for role, name in _CALL.findall(line):
                times = int(trip.group(1)) + (role == "condition") if trip and role in ("body", "condition") else 1
                callers.setdefault(name, []).append((caller, times))
            for names in _CALL_LIST.findall(line):
                for name in names.split(","):
                    if name.strip():
                        callers.setdefault(name.strip().lstrip("%"), []).append((caller, 1))

    @functools.cache
    def runs(name: str) -> int:
        return 1 if name == entry else sum(runs(caller) * times for caller, times in callers.get(name, ()))

    return computations, {name: runs(name) for name in computations}


def _shape_of(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        match = _DEFINITION.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _dims(shape: str) -> list[int]:
    array = _ARRAY.search(shape)
    return [int(d) for d in array.group(2).split(",") if d]


def array_bytes(shape: str) -> int:
    """The bytes of an HLO shape (a tuple's arrays added up)."""
    return sum(math.prod(int(d) for d in dims.split(",") if d) * BYTES[dtype] for dtype, dims in _ARRAY.findall(shape))


def dot_flops(text: str) -> float:
    """2 x output elements x contracted size of every dot and cuBLAS gemm call, times its computation's runs."""
    computations, runs = runs_per_computation(text)
    total = 0.0
    for name, lines in computations.items():
        shapes = _shape_of(lines)
        for line in lines:
            match = _DEFINITION.match(line)
            if not match or runs[name] == 0:
                continue
            shape, opcode = match.group(2), match.group(3)
            if opcode == "dot":
                lhs = re.search(r"\sdot\(%?([\w.\-]+)", line).group(1)
                contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line).group(1)
            elif opcode == "custom-call" and "__cublas$" in line and "lhs_contracting_dimensions" in line:
                lhs = re.search(r"custom-call\((?:[^%,)]*\s)?%?([\w.\-]+)", line).group(1)
                contracting = ",".join(re.findall(r"\d+", re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', line).group(1)))
            else:
                continue
            lhs_dims = _dims(shapes[lhs])
            contracted = math.prod(lhs_dims[int(d)] for d in contracting.split(",") if d)
            total += runs[name] * 2.0 * math.prod(_dims(shape)) * contracted
    return total


def collectives(text: str) -> dict[str, dict[str, int]]:
    """Per collective: its runs and result bytes per call (an asynchronous pair counted at its ``-done``)."""
    computations, runs = runs_per_computation(text)
    found = {op: {"count": 0, "bytes": 0} for op in COLLECTIVES}
    for name, lines in computations.items():
        for line in lines:
            match = _DEFINITION.match(line)
            if not match:
                continue
            opcode = match.group(3).removesuffix("-done")
            if opcode in COLLECTIVES and not match.group(3).endswith("-start"):
                found[opcode]["count"] += runs[name]
                found[opcode]["bytes"] += runs[name] * array_bytes(match.group(2))
    return {op: stats for op, stats in found.items() if stats["count"]}
