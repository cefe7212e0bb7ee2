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
    _keep_libtpu_unloaded(jax)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        pass  # the backend is already up (a second page load): keep the devices it has


def _keep_libtpu_unloaded(jax) -> None:
    """Without an attached TPU, make CPU JAX's only backend unless the user chose (``JAX_PLATFORMS``).

    With ``libtpu`` installed (for compiling for TPU slices), JAX would otherwise load
    it to look for TPUs: that logs errors, and a process that has loaded libtpu holds
    its lock, which makes the compile child processes fail.
    """
    if os.environ.get("JAX_PLATFORMS"):
        return
    from jax._src import hardware_utils

    if hardware_utils.num_available_tpu_chips_and_device_id()[0] or hardware_utils.has_visible_nvidia_gpu():
        return
    try:
        jax.config.update("jax_platforms", "cpu")
    except RuntimeError:
        pass


def describe() -> dict:
    """Platform and device count of this process."""
    import jax

    devices = jax.devices()
    return {"platform": devices[0].platform, "count": len(devices), "kind": devices[0].device_kind}
