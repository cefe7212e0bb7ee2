"""Every test and doctest runs on 8 simulated CPU devices, configured here before JAX starts a backend."""

import os
import tempfile

os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")
# The traced-model disk cache goes to a fresh folder per test session, never the user's ~/.cache.
os.environ["EXPLORER_CACHE_DIR"] = tempfile.mkdtemp(prefix="explorer-trace-cache-")

from explorer import devices  # noqa: E402

devices.configure(8)

# The browser tests' fixtures. Loaded as a plugin, after the devices are configured above,
# so that pytest rewrites the asserts of its helpers (a plain import would not).
pytest_plugins = ["tests.browser"]
