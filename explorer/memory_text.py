"""What fills the memory at the peak, and what to change, as text: ``explorer compile --memory`` (and ``--levers``).

Reads a ``compile.memory_breakdown.MemoryBreakdown`` and the advisor's levers (``advisor.levers``); every byte figure is
per device, from XLA's buffer assignment.
"""

from __future__ import annotations

import os

from typing import Sequence

from explorer.compile.memory_breakdown import KIND_RULES, MemoryBreakdown, PeakBuffer
from explorer.formats import counted, fit, human_bytes, plain_table, share, short_path

TABLE_ROWS = 20  # buffers listed in the text; the JSON keeps every buffer the result holds


def peak_headline(breakdown: MemoryBreakdown) -> str:
    """Where the peak is and how it adds up to XLA's figure, in one line."""
    where = _pass_at(breakdown)
    gap = (
        f" + {human_bytes(breakdown.fragmentation_bytes)} unused between buffers (the heap's fragmentation and alignment)"
        if breakdown.fragmentation_bytes
        else ""
    )
    return (
        f"peak: {human_bytes(breakdown.peak_bytes)} live at program point {breakdown.peak_position:,} of {breakdown.positions:,} "
        f"({breakdown.peak_instruction}{where}){gap} = {human_bytes(breakdown.allocated_bytes)}, XLA's total for the device's memory"
    )


def _pass_at(breakdown: MemoryBreakdown) -> str:
    if breakdown.backward is None:
        return ""
    start, end = breakdown.backward
    position = breakdown.peak_position
    return (
        ", in the backward pass"
        if start <= position <= end
        else ", before the backward pass"
        if position < start
        else ", after the backward pass"
    )


def buffer_rows(buffers: Sequence[PeakBuffer]) -> list[dict[str, str]]:
    """The peak's buffers as table rows (the page's table and the text's)."""
    return [
        {
            "size": human_bytes(b.bytes),
            "unpadded": human_bytes(b.unpadded_bytes) if b.unpadded_bytes is not None else "—",
            "kind": b.kind,
            "shape": b.shape if len(b.shape) <= 28 else b.shape[:27] + "…",
            "line": b.where or "—",
            "what": _what(b),
        }
        for b in buffers
    ]


def _file_line(name: str) -> str:
    """``/abs/path/mlp.py:23`` as the other tables name a line: ``mlp.py:23`` (--json keeps the whole path)."""
    file, colon, rest = name.partition(".py:")
    return os.path.basename(file) + colon + rest if colon else short_path(name, 70)


def _what(buffer: PeakBuffer) -> str:
    layers = f" ({buffer.layers} layers stacked)" if buffer.layers > 1 else ""
    if buffer.module:
        return short_path(f"{buffer.module} [{buffer.name}]", 60) + layers
    return short_path(buffer.name, 60) + layers


def memory_text(breakdown: MemoryBreakdown | None, rows: int = TABLE_ROWS) -> str:
    """The breakdown as text: the headline, by kind, the largest buffers, by line and by layer."""
    if breakdown is None:
        return "memory at the peak: not available (XLA's dump of this compile was not read)"
    lines = ["memory at the peak (per device, from XLA's buffer assignment):", fit("  " + peak_headline(breakdown))]
    lines.append(
        fit(
            "  by kind: "
            + "; ".join(f"{g.name} {human_bytes(g.bytes)} ({share(g.bytes / breakdown.peak_bytes)})" for g in breakdown.by_kind if g.bytes)
        )
    )
    shown = list(breakdown.buffers[:rows])
    rest = len(breakdown.buffers) - len(shown) + breakdown.others_count
    rest_bytes = sum(b.bytes for b in breakdown.buffers[rows:]) + breakdown.others_bytes
    lines.append(f"  the largest buffers live at the peak ({len(shown)} of {len(breakdown.buffers) + breakdown.others_count}):")
    table = plain_table(buffer_rows(shown), ("size", "unpadded", "kind", "shape", "line", "what"))
    lines += ["    " + line for line in table.splitlines()]
    if rest:
        lines.append(f"    and {counted(rest, 'other buffer')}, {human_bytes(rest_bytes)}")
    lined = [g for g in breakdown.by_line if g.name]
    if lined:
        lines.append("  by line of the model's code:")
        lines += [f"    {human_bytes(g.bytes):>10}  {_file_line(g.name)}: {_kinds(g.kinds)}" for g in lined[:8]]
    if breakdown.by_layer:
        lines.append(f"  by layer ({counted(len(breakdown.by_layer), 'layer')}; a scanned stack's bytes shared by its layers):")
        lines += [f"    {human_bytes(g.bytes):>10}  {g.name}: {_kinds(g.kinds)}" for g in breakdown.by_layer[:12]]
        if len(breakdown.by_layer) > 12:
            lines.append(f"    ... {counted(len(breakdown.by_layer) - 12, 'more layer')}")
    if breakdown.host_bytes:
        lines.append(f"  in host memory (offloaded, not in the device's peak): {human_bytes(breakdown.host_bytes)}")
    lines.append(fit("  kinds: " + "; ".join(f"{k}: {v}" for k, v in KIND_RULES.items() if k in {g.name for g in breakdown.by_kind})))
    return "\n".join(lines)


def _kinds(kinds) -> str:
    return ", ".join(f"{k} {human_bytes(b)}" for k, b in kinds)


def levers_text(found, peak_bytes: int | None = None) -> str:
    """The levers (``advisor.levers.Lever``, or ``LeverOutcome`` once compiled) as text, the most freeing first."""
    if not found:
        return "what to change: no lever shrinks this peak's largest contributors"
    lines = ["what to change (the largest contributors at the peak, each with the lever that shrinks it):"]
    for item in found:
        lever = getattr(item, "lever", item)
        head = f"  {lever.name}: {', '.join(lever.shrinks)} {human_bytes(lever.target_bytes)} at the peak"
        if lever.layout is None:
            lines.append(fit(f"{head}; not compiled: {lever.unavailable}"))
            continue
        estimate = f"frees about {human_bytes(lever.saving_bytes)} (an estimate)"
        outcome = getattr(item, "result", None)
        if outcome is not None:
            change = f" ({human_bytes(peak_bytes - item.peak_bytes)} less)" if peak_bytes else ""
            verdict = "fits" if outcome.fits else "does not fit"
            lines.append(
                fit(f"{head}; compiled: XLA's peak {human_bytes(item.peak_bytes)}{change}, {verdict}; {estimate}; cost: {lever.cost}")
            )
        elif getattr(item, "error", ""):
            lines.append(fit(f"{head}; {estimate}; compile failed: {item.error}"))
        else:
            lines.append(fit(f"{head}; {estimate}; cost: {lever.cost}"))
        lines.append(f"    layout: {lever.layout.name}")
    return "\n".join(lines)


def memory_section(result, memory: bool, outcomes=None) -> str:
    """What ``compile --memory`` (``memory``) and ``--levers`` (``outcomes``: the levers compiled) add under the compile's
    text: "" for neither."""
    if not memory and outcomes is None:
        return ""
    text = "\n" + memory_text(result.memory_breakdown)
    return text + ("\n" + levers_text(outcomes, result.judged_peak_bytes) if outcomes is not None else "")
