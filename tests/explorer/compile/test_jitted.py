"""A user's own jitted step planned for a target (``explorer.plan`` in a notebook, ``explorer compile --step`` on the
command line), against the same step compiled by hand with JAX's AOT API (``tests/ground_truth_step.py``).

The step is the docs' worked example, ``examples/steps/ema_step.py``: an MLP with its own loss, two optimizers and EMA
weights, not the explorer's train step. ``explorer.plan`` is given it as a notebook has it, its arguments sharded over
this process's CPU mesh; ``compile --step`` gives its factory the target's mesh. Both must be the program the AOT API
compiles for the target's devices: ``memory_analysis()`` to the byte and the flops (TPU: ``cost_analysis()``'s; GPU:
the optimized program's dots), for a TPU slice and an NVIDIA GPU cluster (compile-only: no GPU needed).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import jax
import pytest
from jax.sharding import AxisType

import explorer
from examples.steps import ema_step
from explorer.compile import jitted
from explorer.models import steps
from explorer.compile.xla_compile import gpu_plugin
from explorer.errors import ExplorerError
from explorer.hardware.targets import parse_target
from explorer.layout import parse_layout
from tests import ground_truth_step

FACTORY = "examples.steps.ema_step:make_step"
TARGETS = {"v5e-8": {"tpu": "v5e:2x4"}, "h100:1x8": {"gpu": "1x1x8"}}
needs_gpu_plugin = pytest.mark.skipif(gpu_plugin() is None, reason="JAX's CUDA plugin is not installed (the gpu extra)")


@functools.lru_cache(maxsize=None)  # one AOT compile per target for both doors' tests
def by_hand(target: str) -> dict:
    """The ground truth for ``target``: the example's step compiled with JAX's AOT API on an 8-device mesh ``data``."""
    how = dict(TARGETS[target])
    if "gpu" in how:  # XLA's own target config for the GPU (the text proto the explorer vendors), and the topology
        how["gpu"] = (parse_target(target).chip.target_config, how["gpu"])
    return ground_truth_step.compile_step(ema_step.make_step, (8,), ("data",), **how)


def _same_program(result, truth: dict, gpu: bool) -> None:
    memory = result.memory.to_json() if hasattr(result, "memory") else result["memory"]
    assert {k: memory[k] for k in truth["memory"]} == truth["memory"]
    flops = result.flops if hasattr(result, "flops") else result["flops"]
    loop = (result.loop_work.flops if hasattr(result, "loop_work") else result["loop_work"]["flops"]) if not gpu else 0.0
    assert flops - loop == (truth["dot_flops"] if gpu else truth["flops"]) > 0


@pytest.mark.parametrize("target", ["v5e-8", pytest.param("h100:1x8", marks=needs_gpu_plugin)])
def test_plan_is_the_step_compiled_by_hand(target):
    """``explorer.plan(step, *args, target=...)`` with the arguments on this process's CPU mesh: the explorer rebuilds
    the mesh over the target's devices and compiles the program JAX's AOT API compiles there; the result names the
    step and says its state was donated (the step donates it)."""
    cpu_mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    step, args = ema_step.make_step(cpu_mesh)
    result = explorer.plan(step, *args, target=target)
    _same_program(result, by_hand(target), gpu=target.startswith("h100"))
    assert result.program == "your own step, jit(train_step)" and result.donated and result.fits
    assert "compiled: your own step, jit(train_step)" in repr(result)  # a notebook shows it as the command line prints it


@pytest.mark.usefixtures("own_compile_cache")
@pytest.mark.parametrize("target", ["v5e-8", pytest.param("h100:1x8", marks=needs_gpu_plugin)])
def test_compile_step_is_the_step_compiled_by_hand(target):
    """``explorer compile --step MODULE:FACTORY --target T --json``: the factory, allow-listed, is given the target's
    mesh (one axis ``data`` over its devices, the default) in the compile child; the same program as by hand."""
    env = {**os.environ, "EXPLORER_ALLOWED_FACTORIES": FACTORY}
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "compile", "--step", FACTORY, "--target", target, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    _same_program(result, by_hand(target), gpu=target.startswith("h100"))
    assert result["program"] == f"your own step, jit(train_step) from {FACTORY}" and result["mesh"]["axes"] == ["data"]


def test_a_step_factory_must_be_allow_listed(monkeypatch):
    monkeypatch.delenv("EXPLORER_ALLOWED_FACTORIES", raising=False)
    with pytest.raises(
        ExplorerError, match=r"^model\.options\.factory: 'examples\.steps\.ema_step:make_step' is a user factory that is not allow-listed"
    ):
        parse_layout(steps.step_layout_data(FACTORY, parse_target("v5e-8")))


def test_arguments_on_two_meshes_are_one_message():
    one = jax.ShapeDtypeStruct((8,), "float32", sharding=jax.sharding.NamedSharding(jax.make_mesh((8,), ("data",)), jax.P("data")))
    two = jax.ShapeDtypeStruct((8,), "float32", sharding=jax.sharding.NamedSharding(jax.make_mesh((2, 4), ("a", "b")), jax.P("a")))
    with pytest.raises(ExplorerError, match=r"^args: .* are sharded over two meshes"):
        jitted.args_mesh((one, two))


def test_the_docs_step_example_runs(monkeypatch):
    """Every ``>>>`` example in docs/step.md runs, from the project folder as a reader would."""
    import doctest
    import re

    from tests.paths import ROOT

    monkeypatch.chdir(ROOT)
    page = ROOT / "docs" / "step.md"
    text = re.sub(r"^```.*$", "", page.read_text(), flags=re.MULTILINE)  # a fence after an output would read as output
    test = doctest.DocTestParser().get_doctest(text, {}, "docs/step.md", str(page), 0)
    assert len(test.examples) >= 8
    output = []
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test, out=output.append)
    assert result.failed == 0, "".join(output)
