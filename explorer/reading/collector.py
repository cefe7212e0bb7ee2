"""Python's cyclic garbage collector paused while the explorer traces or imports what traces.

A trace makes a few hundred thousand short-lived objects, and importing Flax and optax
tens of thousands of long-lived ones; the collector's passes over them, and over every
object JAX and Flax already hold, cost about 6% of a trace and a quarter of that import.
Reference counting still frees everything that is not in a cycle; the collector runs
again, as it was, when the last paused section (in any thread) ends.

When it resumes, the objects made while it was paused (the traced program, the model's
state, the caches that hold them, and the trace's own cycles) join the oldest generation
directly (``gc.freeze()`` then ``gc.unfreeze()``, two list moves) rather than waiting in the
youngest: the first young collection after a trace would otherwise walk all of them, about
60 ms after a Gemma-7B trace, most of them long-lived. The trace's cycles are freed by the
next full collection, as any long-lived garbage is.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_pause = {"sections": 0, "resume": False}
_pause_lock = threading.Lock()


@contextlib.contextmanager
def paused():
    """The collector off for the ``with`` block (nesting and threads counted), then as it was before the first."""
    with _pause_lock:
        if _pause["sections"] == 0:
            _pause["resume"] = gc.isenabled()
            gc.disable()
        _pause["sections"] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause["sections"] -= 1
            if _pause["sections"] == 0 and _pause["resume"]:
                gc.freeze()  # everything made while paused ...
                gc.unfreeze()  # ... now in the oldest generation, unscanned
                gc.enable()
