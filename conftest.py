"""Every test and doctest runs on 8 simulated CPU devices, configured here before JAX starts a backend."""

import functools
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
# The disk caches (traced models, compiles) go to a fresh folder per test run, never the user's ~/.cache: one folder
# for all of a run's pytest-xdist workers (their run's id names it), so that a model one file traced or a layout it
# compiled is read back by another (a test that means to trace or compile fresh takes a folder of its own:
# ``own_compile_cache``). Both caches write whole files only (a temporary file, then os.replace).
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in each worker before this file is read
if _RUN:
    os.environ["EXPLORER_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"explorer-test-cache-{_RUN}")
    os.makedirs(os.environ["EXPLORER_CACHE_DIR"], exist_ok=True)
else:
    os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="explorer-test-cache-")

from explorer.hardware import devices  # noqa: E402

devices.configure(8)

# Each new AppTest scans every installed distribution's metadata for Streamlit components (Streamlit 1.67's
# ``BidiComponentManager.discover_and_register_components``, on an AppTest's first run): about 1.2 CPU-s here, a fifth of
# tests/pages/test_compare.py. The installed packages do not change during a run, so each worker scans once; a
# server (``streamlit run``) scans once at its start, as before.
from streamlit.components.v2 import manifest_scanner  # noqa: E402

manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)

# The browser tests' helpers (tests/browser/__init__.py; their fixtures are in tests/browser/conftest.py):
# registered before anything imports them, so that pytest rewrites their asserts (a plain import would not).
pytest.register_assert_rewrite("tests.browser")
