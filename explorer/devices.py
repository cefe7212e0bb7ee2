"""Simulated CPU devices. Import and call ``configure`` before anything touches a JAX backend.

On a machine without accelerators JAX sees one CPU device; the explorer asks XLA for
several (8 by default, ``EXPLORER_CPU_DEVICES`` or ``--devices`` to change) so that
real multi-device meshes can be built and timed.
"""

from __future__ import annotations

import os

from explorer.errors import ExplorerError

DEVICES_ENV = "EXPLORER_CPU_DEVICES"
DEFAULT_CPU_DEVICES = 8


MAX_CPU_DEVICES = 512


def requested_cpu_devices() -> int:
    raw = os.environ.get(DEVICES_ENV, str(DEFAULT_CPU_DEVICES))
    try:
        count = int(raw)
    except ValueError:
        raise ExplorerError(DEVICES_ENV, raw, "is not a whole number of CPU devices") from None
    return _checked(DEVICES_ENV, count)


def _checked(field: str, count: int) -> int:
    if not 1 <= count <= MAX_CPU_DEVICES:
        raise ExplorerError(field, count, f"must be between 1 and {MAX_CPU_DEVICES} CPU devices")
    return count


def configure(count: int | None = None) -> None:
    """Ask XLA for ``count`` CPU devices (else the environment's, else 8); harmless once a backend has started."""
    import jax

    count = requested_cpu_devices() if count is None else _checked("--devices", count)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        pass  # the backend is already up (a second page load): keep the devices it has


def describe() -> dict:
    """Platform and device count of this process."""
    import jax

    devices = jax.devices()
    return {"platform": devices[0].platform, "count": len(devices), "kind": devices[0].device_kind}
