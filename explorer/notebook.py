"""The notebook API behind ``explorer.analyze``: a report that is a DataFrame, an HTML summary and device grids.

``explorer.plan(fn, *args, target=...)`` compiles a person's own jitted step for a TPU slice or GPU cluster
(``plan``: a ``NotebookCompile``, the compile's result that shows itself as the command line prints it).

``explorer.analyze(layout)`` takes what a person has at hand in Jupyter or Colab (a
layout file's path, a dict in the file format, or a ``Layout``) and returns a
``NotebookReport``: the analysis' ``Report`` (every field and method of it) plus

- ``to_pandas()``: one row per array, the JSON report's field names as columns;
- ``_repr_html_()``: what a notebook shows for the report (the layout, per-device memory,
  findings and the first arrays), every name escaped;
- ``device_grid(path)``: the Layout page's Plotly figure of which device holds which block.

pandas and plotly are imported by the methods that need them, so an analysis alone loads
neither (and, when the trace's disk cache answers, no Flax either).
"""

from __future__ import annotations

import dataclasses
import html
import numbers
import os
from typing import TYPE_CHECKING, Any, Mapping


from explorer.analysis.report import KIND_LABELS, ArrayInfo, Report
from explorer.compile.compile_result import TargetCompile
from explorer.analysis.report import itemsize as element_bytes
from explorer.analysis.analyzer import analyze as analyze_layout
from explorer.errors import ExplorerError
from explorer.layout import Layout, load_layout_file, parse_layout
from explorer.formats import human_bytes
from explorer.tiles import default_dims, grid_view
from explorer.formats import counted

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

HTML_ARRAY_ROWS = 40  # arrays listed in the HTML summary; to_pandas() has them all
FRAME_COLUMNS = (
    "path",
    "kind",
    "shape",
    "dtype",
    "logical_axes",
    "spec",
    "shard_shape",
    "bytes_per_device",
    "global_bytes",
    "replication",
    "runs_per_step",
)


def analyze(layout: str | os.PathLike | Mapping[str, Any] | Layout) -> NotebookReport:
    """The sharding of every array in ``layout``'s train step, as a ``NotebookReport``.

    ``layout`` is a layout file's path, a dict in the layout file format (see docs/layout-file.md)
    or an ``explorer.layout.Layout``. Bad input raises ``ExplorerError`` naming the field
    and the value. Meshes with more devices than this process has are analyzed as planned
    meshes (exact shard shapes and bytes, hypothetical device ids); call
    ``explorer.hardware.devices.configure(8)`` before JAX starts for 8 simulated CPU devices.

    >>> report = analyze({"mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    ...                   "rules": [["batch", "data"], ["hidden", "model"]],
    ...                   "model": {"name": "mlp", "options": {"layers": 1, "depth": 64}}})
    >>> report.array("params/LogicalDotReluDot_0/W2").spec_text()
    "P('model', None)"
    """
    return NotebookReport.of(analyze_layout(_as_layout(layout)))


def _as_layout(layout: Any) -> Layout:
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, Mapping):
        return parse_layout(dict(layout))
    if isinstance(layout, (str, os.PathLike)):
        return load_layout_file(os.fspath(layout))
    raise ExplorerError(
        "layout", layout, "is not a layout: give a layout file's path, a dict in the layout file format or an explorer.layout.Layout"
    )


@dataclasses.dataclass(frozen=True, repr=False)
class NotebookReport(Report):
    """An analysis ``Report`` that shows itself in a notebook, turns into a DataFrame and draws device grids."""

    @classmethod
    def of(cls, report: Report) -> NotebookReport:
        return cls(**{field.name: getattr(report, field.name) for field in dataclasses.fields(report) if field.init})

    def __repr__(self) -> str:
        mesh = "×".join(map(str, self.mesh.shape))
        return (
            f"<NotebookReport {self.layout.name!r}: {len(self.arrays)} arrays on a {mesh} mesh {self.mesh.axes}, "
            f"{len(self.warnings)} finding(s)>"
        )

    def to_pandas(self) -> pd.DataFrame:
        """One row per array, in the report's order; columns named as in the JSON report (``analyze --json``).

        ``spec`` is JAX's ``PartitionSpec`` as it prints, ``shape`` and ``shard_shape`` are
        tuples, bytes are per device (``global_bytes``: the whole array).
        """
        import pandas as pd

        return pd.DataFrame([_row(info) for info in self.arrays], columns=list(FRAME_COLUMNS))

    def device_grid(self, path: str, dims: tuple[int, int] | None = None, blocks: Mapping[int, int] | None = None) -> go.Figure:
        """The Plotly figure of which devices hold which block of the array at ``path``.

        Any rank: ``dims`` are the (row, column) dimensions drawn (by default the two cut
        into the most blocks); every other dimension is cut at ``blocks[dim]`` (default 0).
        Replicas of a block are side-by-side stripes, one colour per device.
        """
        from explorer.plots.grid import sharding_grid

        info = self._array_named(path)
        ndim = len(info.shape)
        if dims is None:
            row_dim, col_dim = default_dims(info.shape, info.spec, self.mesh)
        elif ndim < 2 or not _two_dims(dims, ndim):
            raise ExplorerError("dims", dims, f"is not two different dimensions of the {ndim}-D array {info.path!r}, like (0, 1)")
        else:
            row_dim, col_dim = int(dims[0]), int(dims[1])
        cut = {} if blocks is None else blocks
        if not isinstance(cut, Mapping) or not all(
            _whole(d) and 0 <= d < ndim and d not in (row_dim, col_dim) and _whole(k) for d, k in cut.items()
        ):
            raise ExplorerError(
                "blocks",
                blocks,
                f"is not {{dimension: block}} for dimensions of the {ndim}-D array {info.path!r} other than the drawn {(row_dim, col_dim)}",
            )
        view = grid_view(info.shape, info.spec, self.mesh, row_dim, col_dim, {int(d): int(k) for d, k in cut.items()})
        itemsize = element_bytes(info.dtype)
        # Plotly renders a subset of HTML (<b>, <a href>, ...) in titles and axis labels: names are escaped there too.
        labels = [html.escape(label, quote=False) for label in _dim_labels(info)]
        return sharding_grid(view, self.mesh, itemsize, labels, title=html.escape(info.path, quote=False))

    def _array_named(self, path: str) -> ArrayInfo:
        try:
            return self.array(path)
        except KeyError:
            examples = [a.path for a in self.arrays if a.kind == "param"][:3]
            raise ExplorerError("path", path, f"is not an array of this layout; its parameters include {examples}") from None

    def _repr_html_(self) -> str:
        escape = _escape
        mesh, totals = self.mesh, self.totals
        mesh_kind = "planned: an AbstractMesh, device ids hypothetical" if mesh.abstract else "real devices"
        rules = ", ".join(f"{escape(r.logical)} → {escape(_axes_text(r.mesh_axes))}" for r in self.layout.rules) or "none"
        parts = [
            '<div class="partition-explorer-report">',
            f"<p><b>{escape(self.layout.name)}</b>: model <code>{escape(self.layout.model.name)}</code>, "
            f"mesh {escape(' × '.join(f'{a}={s}' for a, s in zip(mesh.axes, mesh.shape)))} ({counted(mesh.size, 'device')}, {mesh_kind}); "
            f"rules {rules} ({escape(self.resolution_order)})</p>",
            "<p>Per device: state (exact) "
            + escape(human_bytes(totals.state_bytes))
            + " = "
            + " + ".join(f"{escape(KIND_LABELS[k])} {escape(human_bytes(v))}" for k, v in totals.by_kind().items() if k != "activation")
            + f"; declared activations {escape(human_bytes(totals.activation_bytes))} (listed, not added). "
            f"{totals.param_count:,} parameters.</p>",
        ]
        if self.warnings:
            parts.append("<ul>" + "".join(f"<li><b>{escape(w.level)}</b> {escape(w.message)}</li>" for w in self.warnings) + "</ul>")
        header = ("path", "kind", "shape", "dtype", "spec", "shard shape", "per device", "replication")
        rows = [
            (
                a.path,
                a.kind,
                str(tuple(a.shape)),
                a.dtype,
                a.spec_text(),
                str(tuple(a.shard_shape)),
                human_bytes(a.bytes_per_device),
                str(a.replication),
            )
            for a in self.arrays[:HTML_ARRAY_ROWS]
        ]
        parts.append(_html_table(header, rows))
        if len(self.arrays) > HTML_ARRAY_ROWS:
            parts.append(f"<p>… and {len(self.arrays) - HTML_ARRAY_ROWS:,} more arrays: <code>to_pandas()</code> has them all.</p>")
        parts.append("</div>")
        return "\n".join(parts)


def plan(fn: Any, *args: Any, target: str, **kwargs: Any) -> NotebookCompile:
    """Your own jitted step compiled for ``target`` in this process, as a layout's compile is (``xla_compile``'s tail):
    XLA's verdict, memory, collectives by source line, the predicted step and its parts, the roofline.

    ``fn`` is a ``jax.jit``-ed function (or one to jit) and ``args``/``kwargs`` its arguments: ``jax.ShapeDtypeStruct``s
    or arrays, with ``NamedSharding``s over a mesh of yours (a CPU mesh of ``jax.make_mesh`` will do). The explorer
    builds a mesh of the same axis names and sizes over ``target``'s devices (a TPU slice from libtpu's description,
    a GPU cluster from XLA's target config: neither needed), gives every argument the same ``PartitionSpec`` on it and
    lowers ``fn`` under ``jax.set_mesh`` of it (``compile.jitted``: why, and what cannot move). libtpu loads in this
    process (``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` is set for it); its flags are this process's LIBTPU_INIT_ARGS and
    XLA_FLAGS, named in the result. Nothing is cached: a function has no key.
    """
    import math
    import time

    from explorer.compile.jitted import args_mesh, lower_on, name_of, on_mesh
    from explorer.compile.xla_compile import LoweredStep, compile_lowered, require_gpu_plugin
    from explorer.hardware import devices
    from explorer.hardware.placement import place_mesh, target_topology
    from explorer.hardware.targets import check_mesh_fits, parse_target, slice_split

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # before libtpu loads here, to describe the slice
    devices.configure()  # CPU stays JAX's backend where no accelerator is attached (libtpu only describes the slice)
    parsed = parse_target(target)
    require_gpu_plugin(parsed)
    found = args_mesh((args, kwargs))
    if found is None:
        raise ExplorerError("args", f"{len(args)} positional", "carry no NamedSharding: give them shardings over a mesh of yours")
    shape, axes, types = found
    check_mesh_fits(parsed, math.prod(shape))
    mesh, method = place_mesh(list(target_topology(parsed).devices), shape, axes, types, slice_split(parsed, shape, axes))
    started = time.perf_counter()
    lowered = lower_on(fn, on_mesh(args, mesh), on_mesh(kwargs, mesh), mesh)
    return NotebookCompile(compile_lowered(LoweredStep(lowered, mesh, method, f"your own step, {name_of(fn)}", started), parsed))


def compile_for(layout: str | os.PathLike | Mapping[str, Any] | Layout, target: str) -> NotebookCompile:
    """``layout``'s train step compiled for ``target`` (a TPU slice or a GPU cluster, as ``explorer compile --target``
    names it) in a child process, read from the compile cache where it holds the result: a ``NotebookCompile``."""
    from explorer.compile.target_compile import compile_target

    chosen = _as_layout(layout)
    result, cached = compile_target(chosen, target)
    return NotebookCompile(result, chosen, cached)


PEAK_COLUMNS = ("bytes", "unpadded_bytes", "kind", "shape", "name", "op_name", "file", "line", "function", "module", "layers")


@dataclasses.dataclass(frozen=True, repr=False)
class NotebookCompile:
    """A compile for a target in a notebook (``compile_for`` a layout, ``plan`` your own step): XLA's result
    (``result``, a ``TargetCompile``; its fields read on this object too: ``.fits``, ``.judged_peak_bytes``,
    ``.program``...) and what fills the memory at its peak. Shown as ``explorer compile`` prints it.

    - ``peak_buffers()``: a DataFrame, one row per buffer live at the peak (the largest the result keeps), largest first;
    - ``memory_figure()``: the bytes held over the program's order, the peak marked (Plotly);
    - ``levers()``: what to change (``advisor.levers.Lever``, the most freeing first), ``compile_levers()`` each compiled.
    """

    result: TargetCompile
    layout: Layout | None = None  # None for your own step (``plan``): no layout to change
    cached: bool = False

    def __getattr__(self, name: str) -> Any:  # the result's fields
        if name.startswith("__") or name in ("result", "layout", "cached"):
            raise AttributeError(name)
        return getattr(self.result, name)

    def __repr__(self) -> str:
        from explorer.target_text import compile_text

        return compile_text(self.result)

    def peak_buffers(self) -> pd.DataFrame:
        """One row per buffer live at the peak, largest first; bytes per device (``unpadded_bytes``: without tile
        padding); the rest of the peak's buffers are ``result.memory_breakdown.others_bytes``."""
        import pandas as pd

        breakdown = self._breakdown()
        return pd.DataFrame([{c: getattr(b, c) for c in PEAK_COLUMNS} for b in breakdown.buffers], columns=list(PEAK_COLUMNS))

    def memory_figure(self) -> go.Figure:
        from explorer.plots.peak import heap_figure

        limit = self.result.memory_limit
        return heap_figure(self._breakdown(), (limit.bytes, f"the limit {human_bytes(limit.bytes)}"))

    def levers(self) -> tuple:
        from explorer.advisor.levers import levers

        if self.layout is None:
            raise ExplorerError("levers", self.result.program, "need a layout to change: your own step's levers are yours to make")
        return levers(self.result, self.layout)

    def compile_levers(self) -> pd.DataFrame:
        """Each lever compiled for the target: its name, the estimate, XLA's new peak and whether it fits."""
        import pandas as pd

        from explorer.advisor.levers import compile_levers

        outcomes = compile_levers(self.levers(), self.result.target, "notebook")
        return pd.DataFrame([o.to_json() | {"layout": o.lever.layout.name if o.lever.layout else None} for o in outcomes])

    def _breakdown(self):
        if self.result.memory_breakdown is None:
            raise ExplorerError("result", self.result.target.name, "has no memory breakdown (compiled before it existed: compile it again)")
        return self.result.memory_breakdown

    def _repr_html_(self) -> str:
        from explorer.memory_text import buffer_rows, peak_headline

        verdict = "fits" if self.result.fits else "does NOT fit"
        name = self.layout.name if self.layout is not None else self.result.program
        parts = [
            f"<p><b>{_escape(name)}</b> on {_escape(self.result.target.name)}: XLA's peak "
            f"{_escape(human_bytes(self.result.judged_peak_bytes))}, {verdict} ({_escape(human_bytes(self.result.memory_limit.bytes))})</p>"
        ]
        if self.result.memory_breakdown is not None:
            parts.append(f"<p>{_escape(peak_headline(self.result.memory_breakdown))}</p>")
            rows = buffer_rows(self.result.memory_breakdown.buffers[:10])
            header = ("size", "unpadded", "kind", "shape", "line", "what")
            parts.append(_html_table(header, [[r[h] for h in header] for r in rows]))
        return "\n".join(parts)


def _html_table(header: tuple[str, ...], rows) -> str:
    """A plain HTML table of ``rows`` (each a sequence of cells, escaped here) under ``header``."""
    return (
        "<table><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{_escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
        + "</tbody></table>"
    )


def _escape(text: object) -> str:
    """Names come from other people's files and links: shown as typed, never as markup."""
    return html.escape(str(text), quote=True)


def _row(info: ArrayInfo) -> dict[str, Any]:
    return {
        "path": info.path,
        "kind": info.kind,
        "shape": tuple(info.shape),
        "dtype": info.dtype,
        "logical_axes": None if info.logical_axes is None else tuple(info.logical_axes),
        "spec": info.spec_text(),
        "shard_shape": tuple(info.shard_shape),
        "bytes_per_device": info.bytes_per_device,
        "global_bytes": info.global_bytes,
        "replication": info.replication,
        "runs_per_step": info.runs_per_step,
    }


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _two_dims(dims: Any, ndim: int) -> bool:
    return isinstance(dims, (tuple, list)) and len(dims) == 2 and all(_whole(d) and 0 <= d < ndim for d in dims) and dims[0] != dims[1]


def _axes_text(axes: tuple[str, ...]) -> str:
    return " × ".join(axes) if axes else "replicated"


def _dim_labels(info: ArrayInfo) -> list[str]:
    """``dim 1 'hidden' · 1024 → model``: each dimension's name, size and the mesh axes cutting it."""
    labels = []
    for dim, size in enumerate(info.shape):
        name = info.logical_axes[dim] if info.logical_axes and dim < len(info.logical_axes) else None
        axes = info.trace[dim].mesh_axes if dim < len(info.trace) else ()
        label = f" '{name}'" if isinstance(name, str) else " (fixed)" if name else ""
        labels.append(f"dim {dim}{label} · {size} → {_axes_text(tuple(axes))}")
    return labels
