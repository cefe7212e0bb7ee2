"""Fixtures of the reading's tests: a fresh start (nothing traced, in memory or on disk), and the traces counted."""

import pytest

from explorer.reading import activations, constraints as program, trace as tracing


@pytest.fixture
def fresh(monkeypatch, cleared):
    """Nothing traced yet, in memory or on disk."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", "off")


@pytest.fixture
def traces(fresh, monkeypatch):
    """Each trace, as "init" (a Linen init), "forward" (the forward pass under the probe or the tagged layout) or
    "layout" (the forward pass under the layout's mesh and rules alone)."""
    calls = []
    real_init, real_read, real_layout = tracing._linen_state, program.constraints, activations.received_by_forward
    in_layout = []

    def init(*args):
        calls.append("init")
        return real_init(*args)

    def read(closed, input_invars, parameter_invars=()):
        if parameter_invars and not in_layout:
            calls.append("forward")
        return real_read(closed, input_invars, parameter_invars)

    def layout_trace(*args):
        calls.append("layout")
        in_layout.append(True)
        try:
            return real_layout(*args)
        finally:
            in_layout.pop()

    monkeypatch.setattr(tracing, "_linen_state", init)
    monkeypatch.setattr(program, "constraints", read)
    monkeypatch.setattr(activations, "received_by_forward", layout_trace)
    return calls
