"""Simulated CPU devices. Import and call ``configure`` before anything touches a JAX backend.

On a machine without accelerators JAX sees one CPU device; the explorer asks XLA for
several (8 by default, ``EXPLORER_CPU_DEVICES`` or ``--devices`` to change) so that
real multi-device meshes can be built and timed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.errors import ExplorerError
from explorer.hardware.libtpu import LIBTPU_SHARED

if TYPE_CHECKING:
    from explorer.hardware.targets import Target

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout: where a child process runs, and the team library's default
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
    it to look for TPUs, which logs errors.
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


GPU_FLAG = "--xla_gpu_experimental_use_collective_kernels="  # NCCL for every collective (see explorer/compile/xla_compile.py's docstring)


def child_environment(target: Target | None = None) -> dict[str, str]:
    """CPU as JAX's backend (libtpu or the CUDA plugin is only asked for a topology), and libtpu's lock not held against us.

    For a GPU target, ``XLA_FLAGS`` gains ``--xla_gpu_experimental_use_collective_kernels=`` (see
    ``xla_compile``'s docstring), and XLA's warnings are logged (``TF_CPP_MIN_LOG_LEVEL=1`` unless the user chose):
    its rematerialization lines say when a program does not fit the GPU.
    """
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env.update([LIBTPU_SHARED])
    if target is not None and target.is_gpu:
        flags = env.get("XLA_FLAGS", "")
        if "xla_gpu_experimental_use_collective_kernels" not in flags:
            env["XLA_FLAGS"] = f"{flags} {GPU_FLAG}".strip()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env
