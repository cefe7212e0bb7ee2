"""A compile for a target as text: XLA's verdict and memory, the roofline, the predicted step and what separates it
from the bound, several slices' DCN lines and the lines of the model that communicate most (``explorer compile``,
the notebook, the pages' captions)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence
from explorer.formats import human_bytes, human_flops, human_seconds, plain_number, share
from explorer.compile.compile_result import TargetCompile, memory_room
from explorer.hlo.sources import LineRow, by_line
from explorer.hardware.accelerators import FP8_SOURCES, Chip, Gpu
from explorer.predict.step_model import SCOPE

if TYPE_CHECKING:
    from explorer.predict.roofline import Estimate


def multislice_lines(result: TargetCompile) -> list[str]:
    """For several TPU slices: the slices, the DCN figure, which mesh axes cross the DCN, and its traffic per step."""
    target = result.target
    if not target.multislice:
        return []
    crossing = [p.axis for p in result.mesh.placement if p.link == "dcn"]
    seconds = sum(c.seconds for c in result.dcn_collectives)
    return [
        f"{target.num_slices} slices of {target.slice_topology} joined by the data-center network: "
        f"{plain_number(target.dcn.bandwidth / 1e9)} GB/s per chip one way ({target.dcn.what}; {target.dcn.source})",
        "placement: " + "; ".join(p.text or p.axis for p in result.mesh.placement),
        f"across the DCN: {', '.join(crossing) or 'no axis'}; {human_bytes(result.dcn_bytes)} per device per step in "
        f"{len(result.dcn_collectives)} collective kind(s), {human_seconds(seconds)} at the DCN figure (an estimate)",
    ]


def mfu_ceiling_words(estimate: Estimate) -> str:
    """What the roofline's bound says of MFU: at most the compute's share of the bound; nothing where compute is the
    bound (it would read "MFU at most 100%").

    >>> from explorer.predict.roofline import Estimate
    >>> mfu_ceiling_words(Estimate(1e-3, 9e-3, 0.0)), mfu_ceiling_words(Estimate(2e-3, 1e-3, 0.0))
    ("MFU at most 11% (the compute's share of the bound)", 'the bound does not cap MFU (compute is the bound)')
    """
    if estimate.mfu_ceiling >= 1:
        return "the bound does not cap MFU (compute is the bound)"
    return f"MFU at most {share(estimate.mfu_ceiling)} (the compute's share of the bound)"


def judged_peak_note(result: TargetCompile) -> str | None:
    """Which peak the verdict judges, where it is not ``memory_analysis()``'s (``compile_result.judged_peak``: a TPU
    program's HBM total), and that one beside it; None where they are the same figure."""
    judged = result.judged_peak_bytes
    if result.cross_check is None or judged == result.memory.peak_bytes:
        return None
    return (
        f"XLA's peak in HBM ({human_bytes(judged)}) is the total of its memory-usage report, the figure its compiler "
        f"refuses a program for; memory_analysis()'s peak ({human_bytes(result.memory.peak_bytes)}) is counted another "
        "way: it can count donated arguments and the outputs that reuse them both, and buffers offloaded to host memory."
    )


def compile_text(result: TargetCompile, cached: bool = False) -> str:
    """A readable summary of a compile for a target (``target_compile``'s result)."""
    target, memory, estimate = result.target, result.memory, result.estimate
    hbm = target.chip.device_hbm_bytes
    verdict = "fits" if result.fits else "does NOT fit"
    topology = "" if target.topology == target.name else f"{target.topology}, "  # a GPU cluster's name is its topology
    if cached:  # this run compiled nothing: say so, and what the original compile took
        when = f" on {result.compiled_when}" if result.compiled_when else ""
        compiled = f"read from the disk cache (the compile that wrote it{when} took {result.compile_s:.2f} s)"
    else:
        compiled = f"compile {result.compile_s:.2f} s"
    lines = [
        f"target {target.name} ({topology}{target.chips} x {target.chip.device_kind}"
        + (f", {target.devices} devices" if target.devices != target.chips else "")
        + f", {human_bytes(hbm)} HBM per device)",
        f"{compiled}; " + ("train state donated" if result.donated else "no argument donated"),
        "memory per device (XLA's memory_analysis()"
        + (", read from its dump: it refused the program" if result.oom else "")
        + "): "
        + ", ".join(f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in memory.figures().items()),
        f"XLA's peak{' in HBM' if judged_peak_note(result) else ''} {human_bytes(result.judged_peak_bytes)} {verdict} in "
        f"{memory_room(target, result.memory_limit)}: "
        + (f"{human_bytes(result.headroom_bytes)} to spare" if result.fits else f"{human_bytes(-result.headroom_bytes)} too much"),
    ]
    if note := judged_peak_note(result):
        lines.append(note)
    if result.oom:
        lines.append(f"XLA: {result.oom.message}")
    if result.flops is not None:
        source = " (dots and convolutions of the optimized program only: a lower bound)" if result.flops_source == "hlo_matmuls" else ""
        lines.append(f"per device per step: {human_flops(result.flops)}, {human_bytes(int(result.bytes_accessed))} accessed{source}")
    lines.append(
        "collectives: "
        + (
            "; ".join(
                f"{c.op} x{c.count} over {'x'.join(c.mesh_axes) or '-'} ({human_bytes(c.bytes)}{', DCN' if c.link == 'dcn' else ''})"
                for c in result.collectives
            )
            or "none"
        )
    )
    lines += multislice_lines(result)
    if estimate:
        lines.append(
            f"roofline lower bound (not a measurement): compute {human_seconds(estimate.compute_s)}, memory "
            f"{human_seconds(estimate.memory_s)}, collectives {human_seconds(estimate.collective_s)} -> step >= "
            f"{human_seconds(estimate.step_s)}, {estimate.bound}-bound, {mfu_ceiling_words(estimate)}"
        )
    if estimate and estimate.predicted_s is not None:
        lines.append(f"predicted step: {human_seconds(estimate.predicted_s)} (the step model, kernel by kernel; {SCOPE})")
        if gap := prediction_gap(estimate):
            lines.append(gap)
        if fp8 := fp8_note(estimate.prediction_parts, target.chip):
            lines.append(fp8)
    lines.append(compiled_as(result))
    return "\n".join(lines + communication_lines(by_line(result.traced())))


def compiled_as(result: TargetCompile) -> str:
    """Which program was compiled and under which flags (they are part of the compile: its cache key), in one line."""
    program = f"{result.program}, " if result.program else ""
    refused = "".join(f"; {line}" for line in result.refused_flags)
    return f"compiled: {program}under {result.flags_text}{refused}"


def prediction_gap(estimate: Estimate) -> str:
    """One line on why the predicted step differs from the roofline's bound, from what the prediction is made of
    (``Estimate.prediction_parts``); '' where it is not known (no program read, an extrapolation).

    Above the bound: the step model adds the host's dispatch of the step and each kernel's launch, and runs the kernels one
    after another at the rates a step gets, where the bound has every term at peak and overlapped. Equal to it: the
    kernels the program shows add up to less than the bound, and a prediction is never below the bound.
    """
    parts = estimate.prediction_parts
    if not parts or estimate.predicted_s is None:
        return ""
    bound, kernels = estimate.step_s, parts["kernels_s"]
    if kernels < bound:
        why = (
            "XLA's cost_analysis() counts more bytes than the kernels the program shows move in HBM"
            if estimate.bound == "memory"
            else f"its {estimate.bound} term is more than the kernels the program shows take"
        )
        return (
            f"why the prediction is the bound: the program's kernels add up to {human_seconds(kernels)} (host dispatch "
            f"included), under the bound's {human_seconds(bound)} ({why}); a prediction is never below the bound"
        )
    terms = [
        ("host dispatch", parts["dispatch_s"]),
        ("matmul kernels", parts["matmul_s"]),
        ("other kernels", parts["memory_s"]),
        ("collectives", parts["collective_s"]),
        ("host transfers", parts.get("host_s", 0.0)),
    ]
    added = " + ".join(f"{name} {human_seconds(seconds)}" for name, seconds in terms if seconds)
    launches = int(parts["launches"])
    launched = (
        f", {launches:,} kernel {'launch' if launches == 1 else 'launches'} ({human_seconds(parts['launch_s'])}) among them"
        if parts.get("launch_s")
        else ""
    )
    return (
        f"why the prediction is above the bound ({human_seconds(bound)}): it adds {added}, one after another{launched}; "
        "the bound has only flops, bytes and collective bandwidth, at peak and overlapped"
    )


def communication_lines(rows: Sequence[LineRow], top: int = 10) -> list[str]:
    """The lines of the user's code that communicate most (``sources.by_line``), as text: where, bytes, the collectives, modules."""
    if not rows:
        return []
    out = [f"top lines by communication ({min(top, len(rows))} of {len(rows)}; per device per step):"]
    for row in rows[:top]:
        modules = ", ".join(m or "(top)" for m in row.modules[:3]) + (f" +{len(row.modules) - 3}" if len(row.modules) > 3 else "")
        timing = f", ~{human_seconds(row.seconds)} (roofline estimate)" if row.seconds is not None else ""
        combined = " [XLA combined several ops]" if row.combined else ""
        out.append(
            f"  {human_bytes(row.bytes)} in {row.count} collective(s){timing}: {row.where}: {row.kinds}; modules {modules}{combined}"
        )
    return out


def fp8_note(parts: dict | None, chip: Chip | Gpu) -> str:
    """One line on the fp8 matmuls of a predicted step, at which rate they were costed ('' where there are none): the
    chip's fp8 rate where its spec sheet has one (TPU7x), else the bf16 rate, said so (``step_rates``).

    >>> from explorer.hardware.accelerators import CHIPS
    >>> fp8_note({"fp8_flops": 1e15}, CHIPS["v6e"])[:80]
    'fp8 matmuls: 1.00 PFLOP a step, costed at the bf16 rate: v6e has no fp8 rate (ht'
    """
    flops = (parts or {}).get("fp8_flops", 0.0)
    if not flops:
        return ""
    fp8 = getattr(chip, "device_fp8_flops", None)
    if fp8:
        return f"fp8 matmuls: {human_flops(flops)} a step, costed at {chip.generation}'s fp8 rate ({human_flops(fp8)}/s per device, {FP8_SOURCES[chip.generation]})"
    if isinstance(chip, Gpu):
        return f"fp8 matmuls: {human_flops(flops)} a step, costed at twice the bf16 rate (assumed, not measured)"
    return f"fp8 matmuls: {human_flops(flops)} a step, costed at the bf16 rate: {chip.generation} has no fp8 rate ({FP8_SOURCES[chip.generation]})"
