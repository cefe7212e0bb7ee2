"""What XLA built for a target, read into one ``TargetCompile``: memory, flops, collectives and the verdict.

This module's one job is reading a compile's results (the compile itself is ``xla_compile``): from
the compiled executable (``memory_analysis()``, ``cost_analysis()``, the optimized program's text)
for a program that fits, or from XLA's dump for one it refused for HBM (``analyze_dump``: arguments,
outputs, aliased, temporaries and the peak from the HBM total of XLA's memory-usage report, the
collectives and the dot/convolution flops of the optimized program, with ``fits: false`` and
E1000's own figures under ``oom``; ``flops_source`` says which route counted the flops). A program
that fits is read both ways (``dump_cross_check``), which is what makes the figures of a refused
program trustworthy. On a TPU the verdict judges the dump's HBM total (``compile_result.judged_peak``), the figure
XLA's compiler checks, against the HBM it lets a program use; ``memory_analysis()``'s figures are kept as XLA gives them.

On a GPU cluster ``cost_analysis()`` is empty: flops are the dots of the optimized program (Triton
gemm fusions and cuBLAS calls included), each counted as often as its computation runs, a loop body
once per iteration (``hlo.matmul_work``); the memory term reads the same dots' operands and results,
a lower bound on the bytes the step moves (``flops_source``/``bytes_source``: ``hlo_matmuls``). The
verdict (``memory_limit``, ``with_verdict``) compares XLA's peak per GPU with what JAX lets one
process use, 75% of the GPU's memory unless ``XLA_PYTHON_CLIENT_MEM_FRACTION`` says otherwise
(``memory_limit`` says which figure); ``fits_device`` compares it with the whole memory. Collectives
are costed on the level they ride: the torus for a TPU slice, NVLink or the network for a GPU
cluster whose devices are host-major (``placement.device_host``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re

from explorer.compile.compile_result import (
    CollectiveCost,
    CrossCheck,
    Memory,
    MemoryLimit,
    Oom,
    Padding,
    TargetCompile,
    TargetMesh,
    judged_peak,
)
from explorer.errors import first_line
from explorer.hlo.dumps import dumped_memory, read_dump
from explorer.hlo.program import LoopWork
from explorer.hlo.megascale import megascale_ops
from explorer.hardware.placement import device_coords, device_host, device_slice, placement
from explorer.hardware.accelerators import JAX_MEMORY_FRACTION, MEMORY_FRACTION_ENV, memory_fraction
from explorer.hardware.targets import Target

_E1000 = re.compile(
    r"E1000: CompileTimeHbmOom:.*?\((?P<required>[\d.]+)(?P<unit>[KMGT]?)\) exceeds available HBM \((?P<available>[\d.]+)(?P<unit2>[KMGT]?)\)",
    re.S,
)


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_oom(message: str) -> Oom | None:
    """E1000's figures (bytes, as XLA rounds them: two decimals of its unit), or None for another error.

    >>> parse_oom("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory "
    ...           "required for HLO temporaries (25.00G) exceeds available HBM (15.75G). HLO module: jit_train_step.").available_bytes
    16911433728
    """
    found = _E1000.search(message)
    if found is None:
        return None
    return Oom(
        required_bytes=round(float(found["required"]) * _UNITS[found["unit"]]),
        available_bytes=round(float(found["available"]) * _UNITS[found["unit2"]]),
        message=first_line(Exception(message)),
    )


def analyze_dump(folder: str, oom: Oom, target: Target, mesh, method: str, compile_s: float) -> TargetCompile:
    """The result for a program XLA refused for HBM, read from its dump (see the module docstring)."""
    from explorer.hlo import program as hlo

    try:
        memory = dumped_memory(
            read_dump(folder, "after_optimizations-buffer-assignment.txt"),
            read_dump(folder, "after_optimizations-memory-usage-report.txt"),
        )
        text = read_dump(folder, "after_optimizations.txt")
    except (OSError, ValueError):  # no dump: E1000's own figures only
        return _result(target, mesh, method, compile_s, Memory(peak_bytes=oom.required_bytes), None, None, [], "", oom)
    work = hlo.matmul_work(text)
    return _result(
        target, mesh, method, compile_s, Memory(**memory), work.flops, work.bytes, _mesh_collectives(text, mesh, target), text, oom
    )


def dump_cross_check(folder: str) -> CrossCheck | None:
    """What the route for a program that does not fit would have read, for a program that fits.

    The tests compare these with ``memory_analysis()`` and ``cost_analysis()``, which is what
    makes the figures of a refused program trustworthy.
    """
    from explorer.hlo import program as hlo

    try:
        memory = dumped_memory(
            read_dump(folder, "after_optimizations-buffer-assignment.txt"),
            read_dump(folder, "after_optimizations-memory-usage-report.txt"),
        )
        work = hlo.matmul_work(read_dump(folder, "after_optimizations.txt"))
    except (OSError, ValueError):
        return None
    return CrossCheck(Memory(**memory), work.flops)


def counted_work(compiled, text: str) -> tuple[float, float, LoopWork]:
    """``cost_analysis()``'s flops and bytes with every loop's further iterations added: XLA counts a while loop's body
    once, so a scanned model's layers past the first are the dots ``hlo.loop_work`` finds (also returned). The count
    a TPU target's figures and a timing run on CPU devices give."""
    from explorer.hlo import program as hlo

    cost = compiled.cost_analysis() or {}
    if isinstance(cost, list):  # older JAX returned one dict per program
        cost = cost[0] if cost else {}
    extra = hlo.loop_work(text)
    return float(cost.get("flops", 0.0)) + extra.flops, float(cost.get("bytes accessed", 0.0)) + extra.bytes, extra


def analyze_compiled(
    compiled,
    target: Target,
    mesh,
    method: str,
    compile_s: float,
    *,
    xla_messages: tuple[str, ...] = (),
    cross_check: CrossCheck | None = None,
    pipeline: tuple[int, int] | None = None,
) -> TargetCompile:
    """The result from a program XLA compiled for ``target`` on ``mesh`` (laid out by ``method``); ``pipeline`` a
    pipelined layout's (stages, loop trip count): the result then says its bubble's share of the predicted step."""
    from explorer.hlo import program as hlo

    stats = compiled.memory_analysis()
    arguments, outputs, aliased, temporaries = (
        int(stats.argument_size_in_bytes),
        int(stats.output_size_in_bytes),
        int(stats.alias_size_in_bytes),
        int(stats.temp_size_in_bytes),
    )
    memory = Memory(
        argument_bytes=arguments,
        output_bytes=outputs,
        alias_bytes=aliased,
        temp_bytes=temporaries,
        peak_bytes=int(stats.peak_memory_in_bytes) or arguments + outputs - aliased + temporaries,
        generated_code_bytes=int(stats.generated_code_size_in_bytes),
    )
    text = compiled.as_text()
    flops, bytes_accessed, extra = counted_work(compiled, text)
    source = "cost_analysis"
    if target.is_gpu:  # no cost_analysis(): the optimized program's dots, loops counted per iteration
        work = hlo.matmul_work(text)
        flops, bytes_accessed, source = work.flops, work.bytes, "hlo_matmuls"
    result = _result(
        target,
        mesh,
        method,
        compile_s,
        memory,
        flops,
        bytes_accessed,
        _mesh_collectives(text, mesh, target),
        text,
        None,
        source=source,
        loop_work=extra,
        xla_messages=xla_messages,
        cross_check=cross_check,
    )
    if pipeline is None:
        return result
    from explorer.predict.step_model import pipeline_bubble

    return dataclasses.replace(
        result,
        bubble=pipeline_bubble(text, target.chip, *pipeline, result.collectives, result.estimate.predicted_s if result.estimate else None),
    )


def _mesh_collectives(text: str, mesh, target: Target | None = None) -> list:
    import numpy as np

    from explorer.hlo import program as hlo

    coords = np.array([device_coords(d) for d in mesh.devices.flat])
    hosts = np.array([device_host(d, target) for d in mesh.devices.flat]) if target is not None and target.is_gpu else None
    if target is None or not target.multislice:
        return aggregate_collectives(
            hlo.collective_ops(text, mesh.size), tuple(mesh.devices.shape), tuple(mesh.axis_names), coords, hosts, text
        )
    slices = np.array([device_slice(d) for d in mesh.devices.flat])
    ops = _slice_ops(text, mesh, slices)
    return aggregate_collectives(ops, tuple(mesh.devices.shape), tuple(mesh.axis_names), coords, hosts, text, slices)


def _slice_ops(text: str, mesh, slices) -> list:
    """A multi-slice program's collectives with their groups as positions in the whole mesh.

    XLA compiles one program per slice: its in-slice collectives name the slice's devices by their
    place in it (the mesh's devices of slice 0, in mesh order); its cross-slice parts are MegaScale
    transfers (``megascale.megascale_ops``) naming global device ids, or slices and in-slice places. Their
    bytes are put as the roofline reads a collective's: the result (an all-gather's input times the
    group, a reduce-scatter's over it).
    """
    import dataclasses

    from explorer.hlo import program as hlo

    ids = [int(d.id) for d in mesh.devices.flat]
    place_of = {device: position for position, device in enumerate(ids)}
    in_slice: dict[int, list[int]] = {}  # slice -> the mesh positions of its devices, in mesh order
    for position, index in enumerate(slices.tolist()):
        in_slice.setdefault(index, []).append(position)
    first = in_slice[min(in_slice)]
    ops = [
        dataclasses.replace(
            op, groups=None if op.groups is None else tuple(tuple(first[i] for i in g if i < len(first)) for g in op.groups)
        )
        for op in hlo.collective_ops(text, len(first))
    ]
    for op in megascale_ops(text):
        if op.groups is not None:
            groups = tuple(tuple(place_of[i] for i in g if i in place_of) for g in op.groups)
        else:
            groups = tuple(tuple(in_slice[s][d] for s in op.slices if s in in_slice and d < len(in_slice[s])) for d in op.devices)
        if not any(len(g) > 1 for g in groups):  # a target this reader does not place: across slices all the same
            groups = (tuple(positions[0] for positions in in_slice.values()),)
        n = max((len(g) for g in groups), default=1)
        size = op.bytes * n if op.op == "all-gather" else op.bytes // n if op.op == "reduce-scatter" else op.bytes
        ops.append(hlo.CollectiveOp(op.op, op.runs, size, groups, op.name))
    return ops


def memory_limit(target: Target) -> MemoryLimit:
    """The figure the verdict compares XLA's peak with, and what it is.

    On a TPU, the HBM XLA's compiler lets one device's program use (``Chip.program_hbm_bytes``: it refuses a program
    over it); on a GPU, what JAX's
    GPU client lets one process use: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of the memory the
    GPU's target config gives, 75% by default (https://docs.jax.dev/en/latest/gpu_memory_allocation.html).
    """
    from explorer.formats import human_bytes

    device = target.chip.device_hbm_bytes
    if not target.is_gpu:
        program = target.chip.program_hbm_bytes
        return MemoryLimit(
            program,
            device,
            program / device,
            f"the {human_bytes(program)} of the device's {human_bytes(device)} of HBM XLA lets a program use",
        )
    fraction = memory_fraction()
    chosen = os.environ.get(MEMORY_FRACTION_ENV, "").strip()
    how = (
        f"with {MEMORY_FRACTION_ENV}={chosen}"
        if chosen and fraction != JAX_MEMORY_FRACTION
        else f"by default ({MEMORY_FRACTION_ENV}, 0.75)"
    )
    return MemoryLimit(
        int(device * fraction),
        device,
        fraction,
        f"{fraction:.0%} of the GPU's {human_bytes(device)} (its memory in XLA's target config): what JAX lets one process use {how}",
    )


def with_verdict(result: TargetCompile, target: Target) -> TargetCompile:
    """``result`` with its target's figures, memory limit and verdict for this environment (a cached result was
    judged where it was compiled; the GPU memory fraction may differ here)."""
    return dataclasses.replace(result, target=target, **_verdict(result.compiled, result.judged_peak_bytes, memory_limit(target)))


def _verdict(compiled: bool, peak: int, limit: MemoryLimit) -> dict:
    """The verdict's fields of a result: the limit, whether the peak (``judged_peak``) fits in it and in the device's
    whole memory (never for a program XLA refused), and the room left."""
    return {
        "memory_limit": limit,
        "fits": bool(compiled and peak <= limit.bytes),
        "fits_device": bool(compiled and peak <= limit.device_bytes),
        "headroom_bytes": limit.bytes - peak,
    }


def _result(
    target: Target,
    mesh,
    method: str,
    compile_s: float,
    memory: Memory,
    flops,
    bytes_accessed,
    collectives: list,
    text: str,
    oom: Oom | None,
    *,
    source: str | None = None,
    loop_work: LoopWork = LoopWork(0.0, 0.0),
    xla_messages: tuple[str, ...] = (),
    cross_check: CrossCheck | None = None,
) -> TargetCompile:
    """The result, built once. ``oom`` is E1000's figures when XLA refused the program for HBM, else None."""
    from explorer.hlo import program as hlo
    from explorer.predict import roofline
    from explorer.predict import step_model

    costs = tuple(CollectiveCost.of(c, target, sources) for c, sources in collectives)
    known = flops is not None
    source = source or ("cost_analysis" if oom is None else ("hlo_matmuls" if known else None))
    return TargetCompile(
        compiled_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        target=target,
        mesh=TargetMesh(tuple(mesh.devices.shape), tuple(mesh.axis_names), placement(mesh, target), method),
        compile_s=compile_s,
        compiled=oom is None,
        memory=memory,
        memory_source="memory_analysis" if oom is None else ("xla_dump" if memory.argument_bytes is not None else "e1000"),
        **_verdict(oom is None, judged_peak(memory, cross_check), memory_limit(target)),
        oom=oom,
        xla_messages=xla_messages,
        flops=flops,
        bytes_accessed=bytes_accessed,
        flops_source=source,
        bytes_source=source,
        loop_work=loop_work,
        padding=_padding(hlo.entry_parameters(text)) if text else None,
        collectives=costs,
        estimate=step_model.with_prediction(
            roofline.estimate(flops, bytes_accessed, [c for c, _ in collectives], target.chip), text, target.chip, costs
        )
        if known
        else None,
        cross_check=cross_check,
    )


def _padding(parameters) -> Padding:
    """How the arguments' tiled layout pads them: the totals and every parameter that grows."""
    return Padding(
        bytes=sum(p.bytes for p in parameters),
        padded_bytes=sum(p.padded_bytes for p in parameters),
        padded=tuple(p for p in parameters if p.padded_bytes != p.bytes),
    )


def aggregate_collectives(
    ops, mesh_shape: tuple[int, ...], mesh_axes: tuple[str, ...], coords, hosts=None, text: str = "", slices=None
) -> list:
    """Aggregate the program's collectives per (op, mesh axes spanned, group size, torus axes spanned, hosts spanned,
    slices spanned), each with the lines of the user's code its instructions come from (``sources.line_sources`` of
    ``text``).

    ``hosts``, for a GPU cluster, holds each mesh position's host: a group's collective crosses
    the network when its members sit on more than one. ``slices``, for several TPU slices, each
    position's slice: a group's collective crosses the DCN when its members sit on more than one
    (each part of one XLA split into an in-slice and a cross-slice collective is judged on its own groups).
    """
    from explorer.predict.roofline import Collective
    from explorer.hlo.sources import line_sources

    totals: dict[tuple, list] = {}
    for op in ops:
        spanned, torus, across = _spanned(op.groups, mesh_shape, mesh_axes, coords, hosts)
        crossing = _spanned(op.groups, mesh_shape, mesh_axes, coords, slices)[2] if slices is not None else 1
        key = (op.op, spanned, op.group_size, torus, across, crossing)
        entry = totals.setdefault(key, [0, 0, []])
        entry[0] += op.runs
        entry[1] += op.runs * op.bytes
        entry[2].append(op)
    return [
        (Collective(op, count, size, axes, group, torus, across, crossing), line_sources(text, members) if text else ())
        for (op, axes, group, torus, across, crossing), (count, size, members) in sorted(totals.items(), key=lambda item: item[0])
    ]


def _spanned(groups, mesh_shape, mesh_axes, coords, hosts=None) -> tuple[tuple[str, ...], int, int]:
    """Which mesh axes the groups' members differ along, how many torus axes their chips span, and how many
    hosts the largest group spans (1 without ``hosts``).

    Ids in the groups are positions in the mesh's devices in mesh order (the program's
    device assignment); ``coords`` holds each position's chip coordinates.
    """
    import numpy as np

    if not groups:
        return (("?",) if groups is None else ()), 0, 1
    axes: set[int] = set()
    torus: set[int] = set()
    across = 1
    for group in groups:
        members = [i for i in group if i < int(np.prod(mesh_shape))]
        if len(members) < 2:
            continue
        positions = np.array(np.unravel_index(members, mesh_shape)).T
        axes.update(int(a) for a in np.nonzero(positions.min(0) != positions.max(0))[0])
        chip = coords[members]
        torus.update(int(a) for a in np.nonzero(chip.min(0) != chip.max(0))[0])
        if hosts is not None:
            across = max(across, len(set(hosts[members].tolist())))
    return tuple(mesh_axes[a] for a in sorted(axes)), len(torus), across
