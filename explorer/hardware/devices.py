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
from explorer.hardware import libtpu_log
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


# The environment variables whose flags reach a target's compiler: libtpu reads LIBTPU_INIT_ARGS when it loads (TPU
# targets only), and XLA_FLAGS becomes the DebugOptions every compile is given (the TPU and GPU compilers read them too).
FLAG_VARIABLES = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")


def child_environment(target: Target | None = None, flags: dict[str, str] | None = None) -> dict[str, str]:
    """CPU as JAX's backend (libtpu or the CUDA plugin is only asked for a topology), and libtpu's lock not held against us.

    For a GPU target, ``XLA_FLAGS`` gains ``--xla_gpu_experimental_use_collective_kernels=`` (see
    ``xla_compile``'s docstring), and XLA's warnings are logged (``TF_CPP_MIN_LOG_LEVEL=1`` unless the user chose):
    its rematerialization lines say when a program does not fit the GPU. ``flags`` (``compile_flags``' form): the
    flag variables to compile under in place of this process's (a cluster node compiles under the server's).
    """
    env = dict(os.environ)
    if flags is not None:
        for name in FLAG_VARIABLES:
            env.pop(name, None)
        env.update({name: value for name, value in flags.items() if name in FLAG_VARIABLES})
    env["JAX_PLATFORMS"] = "cpu"
    env.update([LIBTPU_SHARED])
    env[libtpu_log.READ_BY_PARENT] = "1"  # the parent drops libtpu's noise from what it reads (libtpu_log.quiet)
    if target is not None and target.is_gpu:
        flags = env.get("XLA_FLAGS", "")
        if "xla_gpu_experimental_use_collective_kernels" not in flags:
            env["XLA_FLAGS"] = f"{flags} {GPU_FLAG}".strip()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def compile_flags(target: Target, env: dict[str, str] | None = None) -> dict[str, str]:
    """The flags a compile for ``target`` runs under: each of ``FLAG_VARIABLES`` that reaches its compiler (libtpu's
    ``LIBTPU_INIT_ARGS`` for a TPU slice; ``XLA_FLAGS`` for both), as the compile child gets it (``child_environment``;
    ``env``: an environment already made, such as the child's own), its words joined by one space; unset or empty
    variables left out. A compile's identity (``compile_cache.cache_key``) and part of its result.

    >>> from explorer.hardware.targets import parse_target
    >>> compile_flags(parse_target("v5e-8"), {"LIBTPU_INIT_ARGS": " --a=1   --b=2 ", "XLA_FLAGS": ""})
    {'LIBTPU_INIT_ARGS': '--a=1 --b=2'}
    >>> compile_flags(parse_target("h100:1x8"), {"LIBTPU_INIT_ARGS": "--a=1"})
    {'XLA_FLAGS': '--xla_gpu_experimental_use_collective_kernels='}
    """
    env = child_environment(target) if env is None else (child_environment(target, {n: env.get(n, "") for n in FLAG_VARIABLES}))
    reaching = ("XLA_FLAGS",) if target.is_gpu else FLAG_VARIABLES
    return {name: " ".join(env[name].split()) for name in reaching if env.get(name, "").strip()}
