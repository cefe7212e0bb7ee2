"""Tests of the core, one file per module, laid out as the code: ``explorer/<stage>/<module>.py`` is tested in
``tests/explorer/<stage>/test_<module>.py`` (the vocabulary at the root: ``explorer/layout.py`` in ``test_layout.py``)."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys

from explorer.compile.compile_result import Memory, TargetCompile, TargetMesh
from explorer.hlo.program import LoopWork
from explorer.layout import Layout, parse_layout
from explorer.compile.xla_results import memory_limit
from explorer.hardware.targets import parse_target


# The documented JSON form of a target compile, its keys in order (README, "Compile for a target"); then
# ``cross_check`` for a TPU program XLA accepted, ``extrapolated`` for the depth shortcut's, ``cached`` on the command line.
DOCUMENTED_KEYS = [
    "target",
    "mesh",
    "compile_s",
    "compiled",
    "memory",
    "memory_source",
    "memory_limit",
    "judged_peak_bytes",
    "fits",
    "fits_device",
    "headroom_bytes",
    "oom",
    "xla_messages",
    "flops",
    "bytes_accessed",
    "flops_source",
    "bytes_source",
    "loop_work",
    "padding",
    "collectives",
    "estimate",
    "donated",
    "compiled_at",
    "flags",
    "program",
    "refused_flags",
    "memory_breakdown",
]


def compile_result(target: str = "v5litepod-8", **fields) -> TargetCompile:
    """A ``TargetCompile`` for the tests of its readers: a program that fits ``target``, with the figures in ``fields``."""
    parsed = parse_target(target)
    base = TargetCompile(
        target=parsed,
        mesh=TargetMesh((parsed.devices,), ("data",), (), "mesh_utils"),
        compile_s=1.0,
        compiled=True,
        memory=Memory(peak_bytes=1),
        memory_source="memory_analysis",
        memory_limit=memory_limit(parsed),
        fits=True,
        fits_device=True,
        headroom_bytes=1,
        oom=None,
        xla_messages=(),
        flops=None,
        bytes_accessed=None,
        flops_source="cost_analysis",
        bytes_source="cost_analysis",
        loop_work=LoopWork(0.0, 0.0),
        padding=None,
        collectives=(),
        estimate=None,
    )
    return dataclasses.replace(base, **fields)


COMPILE_TARGET = "v5litepod-8"  # the slice the compile tests use: 8 v5e chips, a few seconds per compile of the guide's MLP


def mlp_layout(seed_dict, mesh=(2, 4), axes=("data", "model"), rules=None, **options) -> Layout:
    """The guide's MLP (``seed_dict``) on another mesh, rules or model options."""
    data = copy.deepcopy(seed_dict)
    data["mesh"] = {"shape": list(mesh), "axes": list(axes)}
    if rules is not None:
        data["rules"] = rules
    data["model"]["options"].update(options)
    return parse_layout(data)


def small_mlp(seed_dict, **options) -> Layout:
    """The guide's MLP (``seed_dict``) made small: 2 layers 512 wide, unless ``options`` say otherwise."""
    data = copy.deepcopy(seed_dict)
    data["model"]["options"].update({"layers": 2, "depth": 512, **options})
    return parse_layout(data)


def compile_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m explorer compile ARGS``, as a user runs it: its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "explorer", "compile", *args], capture_output=True, text=True, timeout=120)
