"""Every test and doctest runs on 8 simulated CPU devices, configured here before JAX starts a backend."""

import os
import tempfile

import pytest

os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")
# XLA's CPU code generation at its lowest effort: the suite's CPU compiles take about a third of the time (a test of
# eight small train-step compiles: 28 s -> 11 s). These flags reach only LLVM's passes after XLA's own: the sharding
# propagation, SPMD partitioning, fusion and buffer assignment every test reads are the same; the steps run slower,
# which no test asserts. Set before JAX starts, so that every child process (compiles, timing workers, the browser
# tests' servers) inherits it.
os.environ["XLA_FLAGS"] = (
    f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true".strip()
)
# The traced-model disk cache goes to a fresh folder per test session, never the user's ~/.cache.
os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="explorer-trace-cache-")

from explorer.hardware import devices  # noqa: E402

devices.configure(8)

# The browser tests' helpers (tests/browser/__init__.py; their fixtures are in tests/browser/conftest.py):
# registered before anything imports them, so that pytest rewrites their asserts (a plain import would not).
pytest.register_assert_rewrite("tests.browser")
