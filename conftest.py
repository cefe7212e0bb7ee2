"""Every test and doctest runs on 8 simulated CPU devices, configured here before JAX starts a backend."""

import os
import tempfile

import pytest

os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")
# The traced-model disk cache goes to a fresh folder per test session, never the user's ~/.cache.
os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="explorer-trace-cache-")

from explorer.hardware import devices  # noqa: E402

devices.configure(8)

# The browser tests' helpers (tests/browser/__init__.py; their fixtures are in tests/browser/conftest.py):
# registered before anything imports them, so that pytest rewrites their asserts (a plain import would not).
pytest.register_assert_rewrite("tests.browser")
