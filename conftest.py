"""Every test and doctest runs on 8 simulated CPU devices, configured here before JAX starts a backend."""

import os

os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from explorer import devices  # noqa: E402

devices.configure(8)

# The browser tests' fixtures. Loaded as a plugin, after the devices are configured above,
# so that pytest rewrites the asserts of its helpers (a plain import would not).
pytest_plugins = ["tests.browser"]
