"""Text for people: the command line's tables (via pandas), byte sizes, and names made safe for Markdown."""

from __future__ import annotations

import re

import pandas as pd

from explorer import hlo
from explorer.analysis import KIND_LABELS, Report

# Inline Markdown only: the escaped text never starts a line, so list and heading marks are harmless.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>~$:|])")


def markdown_literal(text: str) -> str:
    """``text`` escaped so that Markdown shows it as typed (a layout name like ``**x**`` or ``<b>``)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    return str(count)


def arrays_frame(report: Report) -> pd.DataFrame:
    """One row per array: the table the dashboard and the command line both show."""
    return pd.DataFrame(
        {
            "path": a.path,
            "kind": a.kind,
            "shape": str(tuple(a.shape)),
            "dtype": a.dtype,
            "logical axes": "—" if a.logical_axes is None else str(tuple(a.logical_axes)),
            "spec": a.spec_text(),
            "shard shape": str(tuple(a.shard_shape)),
            "bytes/device": a.bytes_per_device,
            "replication": a.replication,
        }
        for a in report.arrays
    )


def report_table(report: Report, include_tiles: bool = False) -> str:
    mesh = report.mesh
    kind = "planned (AbstractMesh, hypothetical device ids)" if mesh.abstract else "real devices"
    lines = [
        f"layout {report.layout.name!r}: mesh {dict(zip(mesh.axes, mesh.shape))}, {mesh.size} devices, {kind}",
        f"rules: {[list(r) for r in report.layout.rules_for_flax()]}  ({report.resolution_order})",
        "",
    ]
    frame = arrays_frame(report)
    frame["bytes/device"] = frame["bytes/device"].map(human_bytes)
    lines.append(frame.to_string(index=False))
    totals = report.totals
    lines += [
        "",
        f"per device: state (parameters, optimizer state, inputs; exact) {human_bytes(totals.state_bytes)} = "
        + " + ".join(f"{KIND_LABELS[kind]} {human_bytes(value)}" for kind, value in totals.by_kind().items() if kind != "activation")
        + f"; declared activations {human_bytes(totals.activation_bytes)} (listed, not added: XLA's peak needs a compile)",
        f"model: {totals.param_count:,} parameters ({human_bytes(totals.global_param_bytes)} unsharded)",
    ]
    if report.warnings:
        lines += ["", "warnings:"] + [f"  [{w.code}] {w.message}" for w in report.warnings]
    if include_tiles:
        lines += ["", "tiles (index ranges -> devices):"]
        for info in report.arrays:
            lines.append(f"  {info.path}")
            for tile in report.tiles(info.path):
                ranges = " x ".join(f"{a}:{b}" for a, b in tile.index) or "scalar"
                lines.append(f"    [{ranges}] -> {list(tile.devices)}")
    return "\n".join(lines)


def timing_text(result) -> str:
    """A readable summary of a TimingResult."""
    steps = result.step_s
    lines = [
        f"layout {result.layout_name!r} on {result.devices} {result.platform} device(s)",
        f"compile {result.compile_s:.2f} s" + (" (cached: compiled earlier in this process)" if result.cached else ""),
        f"step: median {steps.median * 1e3:.2f} ms, p10 {steps.p10 * 1e3:.2f}, p90 {steps.p90 * 1e3:.2f}, "
        f"min {steps.min * 1e3:.2f}, max {steps.max * 1e3:.2f} ms over {len(steps.samples)} steps "
        f"(after {result.warmup} warm-up)",
        f"{result.steps_per_s:.2f} steps/s, {result.flops / 1e9:.3f} GFLOP per step, {result.flops_per_s / 1e9:.2f} GFLOP/s",
        "memory per device (XLA): " + ", ".join(f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in result.memory.items()),
    ]
    lines += [f"  - {note}" for note in result.memory_notes()]
    used = hlo.used(result.collectives)
    lines.append("collectives: " + (", ".join(f"{op} x{c['count']} ({human_bytes(c['bytes'])})" for op, c in used.items()) or "none"))
    differing = [a for a in result.activations if a.differs]
    lines.append(f"module outputs: {len(result.activations)}, {len(differing)} where XLA's sharding differs from the declared one")
    lines += [f"  - {a.path} {a.shape}: declared {a.declared}, XLA chose {a.chosen}" for a in differing]
    return "\n".join(lines)


def target_text(result: dict, cached: bool = False) -> str:
    """A readable summary of a compile for a target (``target_compile``'s result)."""
    target, memory, estimate = result["target"], result["memory"], result["estimate"]
    verdict = "fits" if result["fits"] else "does NOT fit"
    lines = [
        f"target {target['name']} ({target['topology']}, {target['chips']} x {target['device_kind']}, "
        f"{human_bytes(target['hbm_bytes'])} HBM per chip)",
        f"compile {result['compile_s']:.2f} s" + (" (from the disk cache)" if cached else "") + "; train state donated",
        "memory per chip (XLA): " + ", ".join(f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in memory.items()),
        f"peak {human_bytes(memory['peak_bytes'])} {verdict} in {human_bytes(target['hbm_bytes'])}: "
        + (f"{human_bytes(result['headroom_bytes'])} to spare" if result["fits"] else f"{human_bytes(-result['headroom_bytes'])} too much"),
        f"per chip per step: {result['flops'] / 1e12:.4f} TFLOP, {human_bytes(int(result['bytes_accessed']))} accessed",
        "collectives: " + ("; ".join(
            f"{c['op']} x{c['count']} over {'x'.join(c['mesh_axes']) or '-'} ({human_bytes(c['bytes'])})" for c in result["collectives"]
        ) or "none"),
        f"roofline lower bound (not a measurement): compute {estimate['compute_s'] * 1e3:.3f} ms, memory "
        f"{estimate['memory_s'] * 1e3:.3f} ms, collectives {estimate['collective_s'] * 1e3:.3f} ms -> step >= "
        f"{estimate['step_s'] * 1e3:.3f} ms, {estimate['bound']}-bound, MFU at most {estimate['mfu_ceiling']:.0%}",
    ]
    return "\n".join(lines)
