"""Tests of the core, one file per module: ``explorer/<module>.py`` is tested in ``tests/explorer/test_<module>.py``."""

from __future__ import annotations

import dataclasses

from explorer.compile_result import Memory, TargetCompile, TargetMesh
from explorer.hlo import LoopWork
from explorer.xla_results import memory_limit
from explorer.targets import parse_target


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
