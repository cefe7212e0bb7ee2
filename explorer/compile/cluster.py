"""Compiles as Ray tasks on a cluster's nodes: Ray is an optional extra (``pip install -r requirements-ray.txt``).

``connect(address)`` joins a running Ray cluster (``ray start --head`` on one machine, ``ray start --address``
on the others: docs/cluster.md) and gives a ``Cluster`` whose ``run`` is the compile pool's runner
(``compile_pool.CompilePool.connect``): each compile is one task (one CPU, and its expected host memory as Ray's
``memory`` resource, so Ray never puts more compiles on a node than its memory holds) that runs the same compile
child process as on this machine (``target_compile.child_command``) on whichever node Ray picks. What travels: the
layout (its JSON, the model's name and options inside), the target's name and the flags its compiler runs under here
(LIBTPU_INIT_ARGS, XLA_FLAGS: the node compiles under the server's, which key the result); the explorer package itself travels
as the task's ``py_modules``, so the nodes need only the pinned requirements installed (the models the explorer
ships travel with it; a user's own model module must be importable on every node). The result comes back as the
child's JSON and goes into this server's disk cache as a local compile's does.

- A node that dies mid-compile: Ray runs the task again on another node (``MAX_RETRIES`` times); when none is
  left, one ExplorerError names the node (as Ray reports it) and the layout.
- Stop: ``ray.cancel(force=True)`` ends the task's worker, and the compile child with it (started by
  ``children.run``, it cannot outlive the worker that started it).
- A node whose jax, jaxlib or libtpu differ from this server's is refused with one message: its results would be
  cached under this server's versions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from explorer import children
from explorer.compile.compile_cache import cached, store, versions
from explorer.compile.compile_result import TargetCompile
from explorer.errors import ExplorerError
from explorer.compile.target_compile import STAGE_PREFIX, Stopped, child_command, child_error
from explorer.hardware.devices import child_environment, compile_flags
from explorer.hardware.libtpu_log import drop_noise
from explorer.hardware.targets import parse_target
from explorer.compile.xla_results import with_verdict

INSTALL = "pip install -r requirements-ray.txt"  # the pinned extra (docs/cluster.md)
MAX_RETRIES = 2  # a task whose node died runs again elsewhere this many times
POLL_S = 0.2
PACKAGE = Path(__file__).resolve().parents[1]  # explorer/, above compile/


def require_ray(address: str):
    """The ``ray`` module, or ExplorerError naming the address and the install line."""
    try:
        import ray
    except ImportError:
        raise ExplorerError("--cluster", address, f"needs Ray, an optional extra that is not installed here: {INSTALL} (docs/cluster.md)")
    return ray


@dataclasses.dataclass
class Cluster:
    """A joined Ray cluster: its address and its CPUs (the compiles run at once on it by default)."""

    address: str
    cpus: int

    def run(self, job) -> tuple[TargetCompile, bool, str]:
        """The compile pool's runner: ``job`` compiled as a Ray task; (result, from the cache, the node's id)."""
        import ray

        hit = None if job.fresh else cached(job.layout, job.target)  # another session may have compiled it while this one waited
        if hit is not None:
            return hit, True, "cache"
        job.stage = "queued on the cluster"
        reference = (
            remote_compile()
            .options(memory=job.need_bytes)
            .remote(json.dumps(job.layout.to_dict()), job.target.topology, compile_flags(job.target))
        )
        try:
            while not ray.wait([reference], timeout=POLL_S)[0]:
                if job.stop.is_set():
                    ray.cancel(reference, force=True)
                    raise Stopped("stopped on the cluster")
                job.stage = "compiling on the cluster"
            answer = ray.get(reference)
        except ray.exceptions.RayError as error:
            if isinstance(error, ray.exceptions.TaskCancelledError):
                raise Stopped("stopped on the cluster") from None
            raise ExplorerError(
                "cluster node",
                _node_of(error),
                f"failed while compiling {job.layout.name} for {job.target.name}, after {MAX_RETRIES} retries on other "
                f"nodes: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            ) from None
        node = answer["node"]
        if answer["versions"] != versions():
            differ = {k: v for k, v in answer["versions"].items() if versions().get(k) != v}
            raise ExplorerError("cluster node", node, f"has {differ}; this server has {versions()}: install the same (requirements.txt)")
        if answer["returncode"] != 0:
            raise ExplorerError(
                "target", job.target.name, f"compile failed on node {node}: {child_error(answer['errors'], answer['returncode'])}"
            )
        result = with_verdict(TargetCompile.from_json(json.loads(answer["output"])), job.target)
        store(job.layout, job.target, result)
        return result, False, node


def _node_of(error: BaseException) -> str:
    """The node Ray names in a task's failure (its id), else "unknown"."""
    text = str(error)
    for word in ("node_id=", "node ID ", "NodeID(", "node "):
        if word in text:
            return text.split(word, 1)[1].split()[0].strip(",.)'\"")[:56] or "unknown"
    return "unknown"


def connect(address: str) -> Cluster:
    """Join the Ray cluster at ``address`` (``HOST:PORT`` of its head, or ``auto``), shipping the explorer package."""
    ray = require_ray(address)
    if ray.is_initialized():
        ray.shutdown()
    try:
        ray.init(
            address=address,
            runtime_env={"py_modules": [str(PACKAGE)], "excludes": ["__pycache__"]},
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as error:  # noqa: BLE001 (Ray raises ConnectionError, RuntimeError, ValueError ...)
        raise ExplorerError("--cluster", address, f"could not be joined: {type(error).__name__}: {error}") from None
    return Cluster(address, max(1, int(ray.cluster_resources().get("CPU", 1))))


def disconnect() -> None:
    """Leave the cluster this process joined (nothing when none)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


_REMOTE = []


def remote_compile():
    """The task (defined once, where Ray is installed): one CPU, retried on another node when its node dies."""
    if not _REMOTE:
        import ray

        _REMOTE.append(ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(compile_on_node))
    return _REMOTE[0]


def compile_on_node(layout_json: str, topology: str, flags: dict[str, str] | None = None) -> dict:
    """On the node: run the compile child for the layout and target under the server's ``flags`` (the cache keys the
    result by them), and hand back its output, stderr lines and node."""
    import ray

    target = parse_target(topology)
    env = child_environment(target, flags)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="explorer-ray-") as folder:
        path = os.path.join(folder, "layout.json")
        Path(path).write_text(layout_json)
        child = children.run(child_command(path, target), env=env, cwd=folder)
    errors = drop_noise(line for line in child.stderr.splitlines() if line.strip() and not line.startswith(STAGE_PREFIX))[-50:]
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "versions": versions(),
        "returncode": child.returncode,
        "output": child.stdout,
        "errors": errors,
        "python": sys.version.split()[0],
        "at": time.time(),
    }
