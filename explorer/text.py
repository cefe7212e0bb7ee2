"""Text for people: the command line's tables (via pandas, or ``plain_table`` for plain rows), device grids
drawn with box characters, byte sizes, and names made safe for Markdown.

pandas is imported only by the functions that build tables with it, so ``analyze --json`` never loads it.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Mapping, Sequence

from explorer.hlo import program as hlo
from explorer.formats import WIDTH, counted, human_bytes, human_seconds, plain_number, plain_table
from explorer.analysis.analyzer import tiled_arrays
from explorer.analysis.report import KIND_LABELS, Report
from explorer.hlo.sources import by_line, module_path
from explorer.specs import SpecEntry, spec_axes, spec_text
from explorer.tiles import GridView, MeshInfo, block_ranges, default_dims, devices_label, grid_view, shard_counts
from explorer.target_text import communication_lines

if TYPE_CHECKING:
    import pandas as pd


# Every mark that can make a link, an image, HTML, emphasis, code, math, a table or a
# Streamlit directive (":red[...]", ":material/...:") is escaped; line breaks become
# spaces and a leading list or heading mark is escaped, so the text stays one plain line.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>~$:|#])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x85\x0b\x0c]+")
_LEADING_MARK = re.compile(r"^(\s*)([-+=]|\d+[.)])")


def markdown_literal(text: str) -> str:
    """``text`` escaped so that Markdown shows it as typed, on one line.

    A name from someone else's link such as ``**x**``, ``<b>``, ``![t](http://host/x.png)``
    or ``[Click](...)`` shows as those characters: no image is fetched, no link drawn.
    """
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", text))
    return _LEADING_MARK.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], escaped)


def code_literal(text: str) -> str:
    """``text`` as a Markdown code span, shown exactly as typed (no escapes inside code), on one line.

    >>> code_literal("y.__class__")
    '`y.__class__`'
    >>> code_literal("a`b")
    '``a`b``'
    """
    text = _LINE_BREAKS.sub(" ", text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def memory_relation(memory: dict, peak_name: str = "XLA's peak", fullest: int | None = None) -> str:
    """One sentence saying how XLA's ``memory_analysis()`` figures relate, with this program's numbers; ``peak_name``
    is what the page calls ``memory_analysis()``'s peak (where another figure is "XLA's peak": a TPU verdict's peak in
    HBM, ``judged_peak_note``, it is "memory_analysis()'s peak").

    XLA's peak is the most bytes live at one moment (its heap simulation); arguments, outputs and
    temporaries are allocation sizes, which need not all be live at that moment. Where the buffer assignment's
    fullest point (``fullest``: the memory breakdown's peak) differs, as on XLA's CPU backend, whose peak leaves the
    temporaries out, that figure is named instead.

    >>> memory_relation({"argument_bytes": 12, "output_bytes": 12, "alias_bytes": 0, "temp_bytes": 4, "peak_bytes": 24})
    "XLA's peak (24 B) is the most bytes live at one moment; here it equals arguments + outputs − aliased (24 B) and does not include the temporaries (4 B)."
    >>> memory_relation({"argument_bytes": 2, "output_bytes": 2, "alias_bytes": 2, "temp_bytes": 12, "peak_bytes": 11})
    "XLA's peak (11 B) is the most bytes live at one moment, by XLA's heap simulation; arguments + outputs − aliased + temporaries add up to 14 B, 3 B more, because not all of them are live at that moment (the temporaries' allocation alone can exceed the peak)."
    """
    peak, temp = memory["peak_bytes"], memory["temp_bytes"]
    held = memory["argument_bytes"] + memory["output_bytes"] - memory["alias_bytes"]
    if fullest is not None and fullest != peak:  # the buffer assignment's fullest point (compile.memory_breakdown)
        return (
            f"{peak_name} ({human_bytes(peak)}) is not the most bytes live at one moment here: XLA's buffer assignment "
            f"holds {human_bytes(fullest)} at its fullest point of the program (what fills the memory, below); "
            f"arguments + outputs − aliased are {human_bytes(held)}, temporaries {human_bytes(temp)}."
        )
    lead = f"{peak_name} ({human_bytes(peak)}) is the most bytes live at one moment"
    if peak == held + temp:
        return f"{lead}; here it is arguments + outputs − aliased + temporaries: all of them are live together."
    if peak == held:
        return (
            f"{lead}; here it equals arguments + outputs − aliased ({human_bytes(held)}) and does not include the "
            f"temporaries ({human_bytes(temp)})."
        )
    total, difference = held + temp, held + temp - peak
    gap = f"{human_bytes(abs(difference))}" if abs(difference) >= 1024 else f"{abs(difference):,} B"
    if difference > 0:
        return (
            f"{lead}, by XLA's heap simulation; arguments + outputs − aliased + temporaries add up to "
            f"{human_bytes(total)}, {gap} more, because not all of them are live at that moment (the temporaries' "
            "allocation alone can exceed the peak)."
        )
    return (
        f"{lead}, by XLA's heap simulation; arguments + outputs − aliased + temporaries add up to "
        f"{human_bytes(total)}, {gap} less: the peak also counts buffers these figures do not list."
    )


def arrays_frame(report: Report) -> "pd.DataFrame":
    """One row per array: the table the dashboard and the command line both show."""
    import pandas as pd

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


def arrays_lines(frame, below: Sequence[str] = ("logical axes", "spec", "shard shape", "replication")) -> list[str]:
    """The arrays table; wider than a terminal (``WIDTH``), each array on two lines: what it is, then how it is sharded."""
    whole, rows = frame.to_string(index=False).splitlines(), frame.to_dict("records")
    if len(frame) == 0 or max(map(len, whole)) <= WIDTH:
        return whole
    first, second = plain_table(rows, [c for c in frame.columns if c not in below]), plain_table(rows, below)
    return [line for one, two in zip(first.splitlines(), second.splitlines()) for line in (one, "    " + two)]


def mesh_words(axes: Sequence[str], shape: Sequence[int]) -> str:
    """A mesh as a person reads it: its axes that shard (``fsdp=8``), the axes of size 1 counted (MaxText's mesh has 12
    axes, most of size 1), and their names.

    >>> mesh_words(("data", "model"), (2, 4)), mesh_words(("diloco", "data", "fsdp", "tensor"), (1, 1, 8, 1))
    ('data=2 x model=4', 'fsdp=8 (and 3 axes of size 1: diloco, data, tensor)')
    """
    sharding = [f"{axis}={size}" for axis, size in zip(axes, shape) if size > 1] or ["every axis of size 1"]
    ones = [axis for axis, size in zip(axes, shape) if size == 1]
    if not ones or len(sharding) == 1 and sharding[0].startswith("every"):
        return " x ".join(f"{axis}={size}" for axis, size in zip(axes, shape)) if not ones else f"{len(ones)} axes of size 1"
    return " x ".join(sharding) + f" (and {counted(len(ones), 'axis')} of size 1: {', '.join(ones)})"


def rules_words(rules: Sequence[Sequence], width: int = WIDTH) -> str:
    """The rules on one line: every one where they fit, else the first few and how many more (``--json`` lists them).

    >>> rules_words([("batch", "data"), ("hidden", "model")])
    'rules: [batch: data, hidden: model]'
    >>> rules_words([(f"name_{i}", ("fsdp", "tensor")) for i in range(40)], width=90)
    '40 rules: [name_0: fsdp+tensor, name_1: fsdp+tensor, …] (--json lists every rule)'
    """
    items = [f"{logical}: {'+'.join(spec_axes(mesh)) or '-'}" for logical, mesh in rules]
    whole = "rules: [" + ", ".join(items) + "]"
    if len(whole) <= width:
        return whole
    frame = f"{len(items)} rules: [{{}}, …] (--json lists every rule)"
    shown: list[str] = []
    for item in items:
        if len(frame.format(", ".join(shown + [item]))) > width:
            break
        shown.append(item)
    return frame.format(", ".join(shown))


def spec_without_unit_axes(spec: Sequence, sizes: Mapping[str, int]) -> str:
    """``P(...)`` with the mesh axes of size 1 left out (they shard nothing): ``P('fsdp', None)`` for MaxText's
    ``P(('fsdp', 'context', 'expert'), 'stage')`` on a mesh where only fsdp is larger than 1.

    >>> spec_without_unit_axes((("fsdp", "context"), "stage", None), {"fsdp": 8, "context": 1, "stage": 1})
    "P('fsdp', None, None)"
    """
    entries = []
    for entry in spec:
        axes = tuple(a for a in spec_axes(entry) if sizes.get(a, 2) > 1) if isinstance(entry, (str, tuple, list)) else None
        entries.append(entry if axes is None and entry is not None else None if not axes else axes[0] if len(axes) == 1 else axes)
    return spec_text(entries)


def report_table(report: Report, include_tiles: bool = False, tiles_for: str = "*") -> str:
    mesh = report.mesh
    kind = "planned (AbstractMesh, hypothetical device ids)" if mesh.abstract else "real devices"
    lines = [
        f"layout {report.layout.name!r}: mesh {mesh_words(mesh.axes, mesh.shape)}, {counted(mesh.size, 'device')}, {kind}",
        f"{rules_words(report.layout.rules_for_flax())}  ({report.resolution_order})",
        "",
    ]
    sizes = dict(zip(mesh.axes, mesh.shape))
    if report.typed:
        types = ", ".join(f"{axis}: {kind}" for axis, kind in zip(mesh.axes, report.layout.mesh.types))
        lines.insert(
            1, f"axis types: {types}; every spec is the one in its value's type ({len(report.values):,} forward values: analyze --values)"
        )
    frame = arrays_frame(report)
    frame["bytes/device"] = frame["bytes/device"].map(human_bytes)
    if 1 in mesh.shape and len(mesh.shape) > 1:  # MaxText's 12 axes: a spec names the axes that shard, --json all of them
        frame["spec"] = [spec_without_unit_axes(a.spec, sizes) for a in report.arrays]
        lines[-1:] = ["specs leave out the mesh's axes of size 1, which shard nothing (--json gives each spec whole)", ""]
    lines += arrays_lines(frame)
    totals = report.totals
    lines += [
        "",
        f"per device: state (parameters, optimizer state, inputs; exact) {human_bytes(totals.state_bytes)} = "
        + " + ".join(f"{KIND_LABELS[kind]} {human_bytes(value)}" for kind, value in totals.by_kind().items() if kind != "activation")
        + f"; declared activations {human_bytes(totals.activation_bytes)} (listed, not added: XLA's peak needs a compile)",
        f"model: {totals.param_count:,} parameters ({human_bytes(totals.global_param_bytes)} unsharded)",
    ]
    if report.warnings:
        lines += ["", "warnings:"] + [
            f"  [{w.code}] {w.message}" + (f" (--json lists each of the {len(w.items)})" if w.items else "") for w in report.warnings
        ]
    if include_tiles:
        lines += ["", "tiles (index ranges -> devices):"]
        for info in tiled_arrays(report, tiles_for):
            lines.append(f"  {info.path}")
            for tile in report.tiles(info.path):
                ranges = " x ".join(f"{a}:{b}" for a, b in tile.index) or "scalar"
                lines.append(f"    [{ranges}] -> {list(tile.devices)}")
    return "\n".join(lines)


def values_text(values, query: str = "") -> str:
    """The per-value view (Explicit axes) as text: groups by source line, each value's type and any communication."""
    from explorer.analysis.values import grouped, matching, spec_text

    chosen = matching(values, query)
    lines = [
        f"{len(chosen):,} of {len(values):,} forward values"
        + (f" matching {query!r}" if query else "")
        + "; '*' set by the model (reshard, out_sharding=, sharding_constraint), '!' implies communication"
    ]
    for group in grouped(chosen):
        lines += ["", f"{group.where}  ({len(group.values)} values, {group.communicating} communicating)"]
        for value in group.values:
            mark = ("*" if value.sets_sharding else " ") + ("!" if value.communication else " ")
            runs = f"  x{value.runs}/step" if value.runs > 1 else ""
            lines.append(f"  {mark} {value.op:<22} {value.type_text:<36} {spec_text(value)}{runs}")
            if value.communication:
                lines.append(f"       ! {value.communication}")
    return "\n".join(lines)


def origins_text(values, query: str = "") -> str:
    """Every value's sharding after Shardy's propagation (``explorer.compile.origins``), grouped by source line, with where
    each mesh axis came from."""
    lines = [
        f"{len(values):,} values" + (f" matching {query!r}" if query else "") + " after Shardy's propagation; per mesh axis, its origin"
    ]
    where = None
    for value in values:
        if value.where != where:
            where = value.where
            lines += ["", where or "(no line of the model's code)"]
        name = "/".join(p for p in (module_path(value.op_name), value.op_name.rsplit("/", 1)[-1]) if p)
        name += " (backward)" if "transpose(" in value.op_name else ""
        lines.append(f"  {name:<44} {value.spec_text:<16} {value.origin_text}")
    return "\n".join(lines)


def grid_text(
    shape: Sequence[int],
    spec: Sequence[SpecEntry],
    mesh: MeshInfo,
    dims: tuple[int | None, int | None] | None = None,
    index: Mapping[int, int] | None = None,
) -> str:
    """Which devices hold which block, drawn with box characters like ``jax.debug.visualize_array_sharding``.

    Any rank: ``dims`` are the (row, column) dimensions drawn (``default_dims`` when
    None); every other dimension is cut at block ``index[dim]`` (default 0) and named
    under the grid. Ranges label the rows and columns; each cell lists its devices.
    Pure data in, a string out.

    >>> mesh = MeshInfo((2, 2), ("data", "model"), ((0, 1), (2, 3)), abstract=False)
    >>> print(grid_text((4, 6), ("data", None), mesh))
          0:6
        ┌─────┐
    0:2 │ 0,1 │
        ├─────┤
    2:4 │ 2,3 │
        └─────┘
    >>> print(grid_text((4, 4, 6), ("data", "model", None), mesh, dims=(2, 1), index={0: 1}))
          0:2   2:4
        ┌─────┬─────┐
    0:6 │  2  │  3  │
        └─────┴─────┘
    dim 0: block 1 of 2 (2:4)
    """
    shape = tuple(shape)
    row_dim, col_dim = default_dims(shape, spec, mesh) if dims is None else dims
    view = grid_view(shape, spec, mesh, row_dim, col_dim, dict(index or {}))
    row_names = [f"{a}:{b}" if row_dim is not None else "" for a, b in view.rows]
    col_names = [f"{a}:{b}" if col_dim is not None else "" for a, b in view.cols]
    labels = [[devices_label(tile.devices, limit=8) for tile in row] for row in view.cells]
    widths = [max(len(col_names[c]), *(len(labels[r][c]) for r in range(len(view.rows)))) + 2 for c in range(len(view.cols))]
    margin = max(len(name) for name in row_names)
    pad = " " * margin

    def rule(left: str, middle: str, right: str) -> str:
        return f"{pad} {left}" + middle.join("─" * w for w in widths) + right

    lines = [f"{pad}  " + " ".join(name.center(w) for name, w in zip(col_names, widths)).rstrip()]
    lines.append(rule("┌", "┬", "┐"))
    for r, name in enumerate(row_names):
        if r:
            lines.append(rule("├", "┼", "┤"))
        lines.append(f"{name.rjust(margin)} │" + "│".join(label.center(w) for label, w in zip(labels[r], widths)) + "│")
    lines.append(rule("└", "┴", "┘"))
    counts = shard_counts(tuple(spec) + (None,) * (len(shape) - len(spec)), mesh)
    for dim, block in view.fixed:
        start, stop = block_ranges(shape[dim], counts[dim])[block]
        lines.append(f"dim {dim}: block {block} of {counts[dim]} ({start}:{stop})")
    return "\n".join(line.rstrip() if not line.strip() else line for line in lines)


def timing_text(result) -> str:
    """A readable summary of a TimingResult."""
    steps = result.step_s
    lines = [
        f"layout {result.layout_name!r} on {result.devices} {result.platform} device(s)"
        + (f" in {result.processes} processes × {result.devices_per_process} (jax.distributed)" if result.processes > 1 else ""),
        f"compile {result.compile_s:.2f} s" + (" (cached: compiled earlier in this process)" if result.cached else ""),
        f"step: median {human_seconds(steps.median)}, p10 {human_seconds(steps.p10)}, p90 {human_seconds(steps.p90)}, "
        f"min {human_seconds(steps.min)}, max {human_seconds(steps.max)} over {counted(len(steps.samples), 'step')} "
        f"(after {result.warmup} warm-up)",
        f"{result.steps_per_s:.2f} steps/s, {result.flops / 1e9:.3f} GFLOP per step ({result.flops_source}), "
        f"{result.flops_per_s / 1e9:.2f} GFLOP/s",
        f"MFU {result.mfu:.1%} ({result.peak_note})" if result.mfu is not None else result.peak_note,
        "step, measured beside what was expected:",
        *[f"  {line}" for line in expectations_text(result)],
        "memory per device (XLA): " + ", ".join(f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in result.memory.items()),
    ]
    lines += [f"  - {note}" for note in result.memory_notes()]
    lines.append(peak_in_use_text(result))
    used = hlo.used(result.collectives)
    lines.append("collectives: " + (", ".join(f"{op} x{c['count']} ({human_bytes(c['bytes'])})" for op, c in used.items()) or "none"))
    differing = [a for a in result.activations if a.differs]
    lines.append(f"module outputs: {len(result.activations)}, {len(differing)} where XLA's sharding differs from the declared one")
    lines += [f"  - {a.path} {a.shape}: declared {a.declared}, XLA chose {a.chosen}" for a in differing]
    if result.stopped:
        lines.append(result.stopped_note())
    return "\n".join(lines + communication_lines(by_line(result.sources)))


def expectations_text(result) -> list[str]:
    """The measured step, the predicted step and the lower bound, one line each with the ratio measured / it."""
    lines = []
    for row in result.expectations():
        seconds = "—" if row["step_s"] is None else human_seconds(row["step_s"])
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        lines.append(f"{row['what']:<12} {seconds:>12}  measured/it {ratio:>7}  {row['note']}")
    return lines


def peak_in_use_text(result) -> str:
    """The device's real peak in use beside XLA's analysis, or why there is none."""
    if result.peak_bytes_in_use is None:
        return "peak in use (memory_stats): not available, the backend gives no memory_stats() (the CPU backend has none)"
    limit = "" if result.bytes_limit is None else f" of {human_bytes(result.bytes_limit)} (JAX's limit)"
    return (
        f"peak in use (memory_stats, this process's peak so far): {human_bytes(result.peak_bytes_in_use)}{limit}; "
        f"XLA's peak for the step {human_bytes(result.memory['peak_bytes'])}"
    )


# --- box-drawing device grids (like jax.debug.visualize_array_sharding, any rank) ----------------

MAX_TEXT_SLICES = 4


def _cell_label(devices: tuple[int, ...], kind: str) -> str:
    shown = ",".join(str(d) for d in devices) if len(devices) <= 8 else f"{devices[0]},{devices[1]}…{devices[-1]} ({len(devices)})"
    return f"{kind} {shown}"


def box_grid(view: GridView, kind: str = "CPU") -> str:
    """One 2-D cut of an array's tiles as box-drawing text, a cell per block naming the devices holding it."""
    labels = [[_cell_label(cell.devices, kind) for cell in row] for row in view.cells]
    width = max(len(label) for row in labels for label in row) + 2

    def rule(left: str, middle: str, right: str) -> str:
        return left + middle.join("─" * width for _ in view.cols) + right

    lines = [rule("┌", "┬", "┐")]
    for index, row in enumerate(labels):
        lines.append("│" + "│".join(label.center(width) for label in row) + "│")
        lines.append(rule("├", "┼", "┤") if index + 1 < len(labels) else rule("└", "┴", "┘"))
    return "\n".join(lines)


def sharding_text(shape: Sequence[int], spec: Sequence, mesh: MeshInfo, kind: str = "CPU") -> str:
    """The array's blocks as box-drawing grids.

    1-D arrays draw as one row and 2-D as rows x columns; for higher ranks the two
    dimensions cut into the most blocks are drawn, one grid per block of the others
    (the first ``MAX_TEXT_SLICES``, each labelled).
    """
    shape = tuple(shape)
    spec = tuple(spec) + (None,) * (len(shape) - len(spec))
    counts = shard_counts(spec, mesh)
    if not shape:
        return f"scalar, held by every device: {_cell_label(tuple(sorted(mesh.coordinates())), kind)}"
    if len(shape) == 1:
        return f"columns: dim 0 ({shape[0]}, {counts[0]} block(s))\n" + box_grid(grid_view(shape, spec, mesh, None, 0), kind)
    row_dim, col_dim = sorted(sorted(range(len(shape)), key=lambda d: (counts[d], d))[-2:]) if len(shape) > 2 else (0, 1)
    header = f"rows: dim {row_dim} ({shape[row_dim]}, {counts[row_dim]} block(s)) · columns: dim {col_dim} ({shape[col_dim]}, {counts[col_dim]} block(s))"
    others = [d for d in range(len(shape)) if d not in (row_dim, col_dim)]
    slices = list(itertools.product(*(range(counts[d]) for d in others)))
    parts = [header]
    for blocks in slices[:MAX_TEXT_SLICES]:
        fixed = dict(zip(others, blocks))
        view = grid_view(shape, spec, mesh, row_dim, col_dim, fixed)
        if others:
            parts.append(
                "slice "
                + ", ".join(
                    f"dim {d} block {b} of {counts[d]} ({r[0]}:{r[1]})"
                    for d, b in fixed.items()
                    for r in [block_ranges(shape[d], counts[d])[b]]
                )
            )
        parts.append(box_grid(view, kind))
    if len(slices) > MAX_TEXT_SLICES:
        parts.append(f"… {len(slices) - MAX_TEXT_SLICES} more slice(s) not drawn")
    return "\n".join(parts)


def op_text(analysis, timing=None) -> str:
    """The ``op`` command's report: every array's spec and grid, XLA's choice, the collectives, the timing."""
    from explorer.specs import spec_text

    mesh = analysis.mesh
    kind = "planned" if analysis.planned else "real devices"
    lines = [
        f"mesh {dict(zip(mesh.axes, mesh.shape))}: {counted(mesh.size, 'device')} ({kind})",
        f"expr: {analysis.op.expr}"
        + ("" if analysis.op.out_spec is None else f"  (with_sharding_constraint to {spec_text(analysis.op.out_spec)})"),
        "",
    ]
    device_kind = "dev" if analysis.planned else jax_platform_label()
    for view in analysis.inputs + (analysis.output,):
        title = "output" if view is analysis.output else f"input {view.name}"
        lines.append(f"{title}: {view.dtype}{list(view.shape)} spec {spec_text(view.spec)}")
        if view.spec is None:
            lines.append("  (no sharding known)")
        else:
            lines.append(
                f"  shard {list(view.shard_shape)} = {human_bytes(view.bytes_per_device())} per device, each block on {view.replication} device(s)"
            )
            lines.append(sharding_text(view.shape, view.spec, mesh, device_kind))
        lines.append("")
    lines.append(analysis.note)
    if analysis.collectives is not None:
        used = hlo.used(analysis.collectives)
        lines.append(
            "collectives: " + (", ".join(f"{op} x{c['count']} ({human_bytes(c['bytes'])} per device)" for op, c in used.items()) or "none")
        )
    if analysis.compile_s is not None:
        lines.append(f"compiled in {analysis.compile_s:.2f} s")
    if timing is not None:
        lines.append(op_timing_text(timing))
    return "\n".join(lines)


def op_timing_text(timing) -> str:
    def row(label, t):
        return (
            f"{label}: median {human_seconds(t.median)}, p10 {human_seconds(t.p10)}, p90 {human_seconds(t.p90)} "
            f"over {len(t.samples)} call(s)"
        )

    lines = [
        row(f"sharded over {timing.devices} {timing.platform} device(s)", timing.sharded),
        row("one device", timing.single),
        f"speedup {timing.speedup:.2f}x (one-device median / sharded median), after {timing.warmup} warm-up call(s) each; "
        f"max |sharded - one device| = {plain_number(timing.max_abs_difference)}",
    ]
    if timing.stopped:
        lines.append("stopped early: the figures cover the calls made so far")
    return "\n".join(lines)


def jax_platform_label() -> str:
    import jax

    return jax.devices()[0].platform.upper()


def array_text(report, info, dims_option: str | None = None, blocks: list[str] | tuple[str, ...] = ()) -> str:
    """One array's header and device grid as text (``analyze --array``): ``dims_option`` is ``--dims`` ('R,C', the two
    dimensions drawn), ``blocks`` are ``--block`` ('DIM=K', the block shown of each other dimension)."""
    from explorer.errors import ExplorerError
    from explorer.tiles import default_dims

    ndim = len(info.shape)
    dims = default_dims(info.shape, info.spec, report.mesh)
    if dims_option is not None:
        parts = dims_option.split(",")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) < ndim for p in parts) or parts[0].strip() == parts[1].strip():
            raise ExplorerError("--dims", dims_option, f"is not two different dimensions of a {ndim}-D array, like 0,1")
        dims = (int(parts[0]), int(parts[1]))
    index = {}
    for item in blocks:
        dim, _, block = item.partition("=")
        if not (dim.strip().isdigit() and block.strip().isdigit() and int(dim) < ndim and int(dim) not in dims):
            raise ExplorerError("--block", item, f"is not DIM=K with DIM a dimension of the {ndim}-D array other than the drawn {dims}")
        index[int(dim)] = int(block)
    header = (
        f"{info.path}: shape {tuple(info.shape)} {info.dtype}, spec {info.spec_text()}, "
        f"shard {tuple(info.shard_shape)} on each device, each block on {info.replication} device(s)"
    )
    return header + "\n" + grid_text(info.shape, info.spec, report.mesh, dims=dims, index=index)
