"""The collector's pause (``explorer/reading/collector.py``): nested sections, the user's own setting, and where
what was made while paused goes when the collector comes back."""

import gc
import weakref

from explorer.reading import collector
from tests.paths import ROOT


def test_the_collector_pause_nests_and_leaves_the_collector_as_the_user_had_it():
    import gc

    from explorer.reading import collector

    assert gc.isenabled()
    with collector.paused():
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer section is still tracing
    assert gc.isenabled()
    gc.disable()  # a user who runs with the collector off keeps it off
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Node:
    def __init__(self):
        self.me = self  # a cycle: only the cyclic collector frees it


def test_what_was_made_while_paused_joins_the_oldest_generation_and_its_cycles_are_still_freed():
    """The first young collection after a trace would walk everything the trace made; the pause hands it to the oldest
    generation instead, unscanned, and a full collection still frees the trace's cycles."""
    assert gc.isenabled()
    with collector.paused():
        kept = [_Node() for _ in range(1000)]
        dropped = weakref.ref(_Node())  # garbage in a cycle: alive until a full collection
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert not young & {id(o) for o in kept}, "objects made while paused were left in the youngest generation"
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert {id(o) for o in kept} <= oldest
    assert gc.get_freeze_count() == 0  # nothing stays frozen: the oldest generation is collected as usual
    assert dropped() is not None
    gc.collect()
    assert dropped() is None


def test_importing_the_tracing_code_runs_the_collector_once_and_leaves_it_on():
    """Importing Flax and optax makes tens of thousands of objects: with the collector on it runs about a hundred
    times; paused, once, when it comes back on (the collection that fell due meanwhile)."""
    import subprocess
    import sys

    code = (
        "import gc, sys\n"
        "from explorer import reading\n"
        "runs = []  # collections once the tracing module's import has begun\n"
        "gc.callbacks.append(lambda phase, info: runs.append(phase)\n"
        "                    if phase == 'start' and 'explorer.reading.trace' in sys.modules else None)\n"
        "reading._stage_modules()\n"
        "assert 'flax' in sys.modules and 'optax' in sys.modules\n"
        "print(len(runs), gc.isenabled())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    collections, enabled = out.stdout.split()
    assert int(collections) <= 1 and enabled == "True"
