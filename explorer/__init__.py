"""Partition Explorer's pure core: layouts in, sharding reports out. Never imports Streamlit.

The notebook API is ``explorer.analyze`` (docs/notebook.md's "In a notebook" section runs as a test)::

    import explorer
    report = explorer.analyze("layouts/seed-2x4.json")  # or a dict in the file format, or an explorer.layout.Layout
    report.to_pandas()                                  # one row per array
    report.device_grid("params/LogicalDotReluDot_0/W2") # a Plotly figure
    explorer.plan(train_step, state, batch, target="v5e-8")  # your own jitted step, compiled for a TPU slice (docs/step.md)

``import explorer`` keeps the process off libtpu's lock (``hardware.libtpu.share_libtpu``) and, in a child process
the explorer started, ties the child's life to its parent's (``children.follow_parent``). It stays light: JAX is
imported by the first analysis, pandas and plotly by the report methods that need them, Flax and optax only when a
model must be traced (not when the trace's disk cache has it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from explorer.children import follow_parent
from explorer.errors import ExplorerError
from explorer.hardware.libtpu import share_libtpu

share_libtpu()  # no process of the explorer takes libtpu's lock (explorer/hardware/libtpu.py)
follow_parent()  # a child the explorer started ends with the process that started it (explorer/children.py)

if TYPE_CHECKING:
    from explorer.layout import Layout
    from explorer.notebook import NotebookCompile, NotebookReport

__all__ = ["ExplorerError", "Layout", "NotebookCompile", "NotebookReport", "analyze", "compile_for", "plan"]


def analyze(layout: Any) -> NotebookReport:
    """The sharding of every array in ``layout``'s train step (a path, a dict in the file format or a ``Layout``).

    The report has ``to_pandas()`` (one row per array), an HTML summary for notebooks and
    ``device_grid(path)`` (a Plotly figure); see ``explorer.notebook.analyze``.
    """
    from explorer.notebook import analyze as analyze_any

    return analyze_any(layout)


def plan(fn: Any, *args: Any, target: str, **kwargs: Any) -> NotebookCompile:
    """Your own jitted step (``fn`` and its arguments, ``jax.ShapeDtypeStruct``s or arrays with shardings) compiled for
    ``target`` (a TPU slice or a GPU cluster, neither needed): what a layout's compile gives (XLA's verdict, memory,
    collectives by source line, the predicted step and its parts, the roofline); see ``explorer.notebook.plan``."""
    from explorer.notebook import plan as plan_step

    return plan_step(fn, *args, target=target, **kwargs)


def compile_for(layout: Any, target: str) -> NotebookCompile:
    """``layout``'s train step compiled for ``target`` (``"v5e-8"``, ``"h100:1x8"``): XLA's verdict and what fills the
    memory at the peak (``peak_buffers()``, ``memory_figure()``, ``levers()``); see ``explorer.notebook.compile_for``."""
    from explorer.notebook import compile_for as compile_any

    return compile_any(layout, target)


_LAZY = {"Layout": "explorer.layout", "NotebookReport": "explorer.notebook", "NotebookCompile": "explorer.notebook"}


def __getattr__(name: str) -> Any:
    """``explorer.Layout`` and ``explorer.NotebookReport``, imported on first use (they pull in pydantic and JAX)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")
