"""Ground truth for where a mesh's axes fall on a TPU slice's torus, with no explorer code at all.

In a child process (libtpu is loaded once per process tree here, and the caller may be one that must not
load it): libtpu's devices for the slice (``topologies.get_topology_desc``), laid out as the logical mesh
by ``mesh_utils.create_device_mesh`` (and, where it refuses a shape, with ``allow_split_physical_axes=True``,
then in device order), and per mesh axis the torus axes (x, y, z) its groups run along, whether every
group covers each of them whole, and each one's extent in the slice.

Whether an axis has wraparound links is the book's rule ("How to Scale Your Model", part 2,
https://jax-ml.github.io/scaling-book/tpus/: a 3-D slice made of whole 4x4x4 cubes wraps every axis;
on v5e/v6e an axis wraps when it is 16 long): ``wraps``. A group around a whole axis with wraparound is
a ring (both directions of the links: one axis of the book's bidirectional bandwidth), any other a line
(one direction: half): ``ring_axes``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, sys
import numpy as np
from jax.experimental import mesh_utils, topologies

found = {}
for name, shapes in json.loads(sys.argv[1]).items():
    devices = list(topologies.get_topology_desc(topology_name=name, platform="tpu").devices)
    out = found[name] = []
    for shape in shapes:
        for attempt in (lambda: mesh_utils.create_device_mesh(shape, devices),
                        lambda: mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True),
                        lambda: np.array(devices, dtype=object).reshape(shape)):
            try:
                grid = attempt()
                break
            except Exception:
                continue
        coords = np.array([list(d.coords) for d in grid.flat]).reshape(tuple(shape) + (3,))
        extent = [len(set(coords[..., d].ravel().tolist())) for d in range(3)]
        axes = []
        for axis, size in enumerate(shape):
            groups = np.moveaxis(coords, axis, -2).reshape(-1, size, 3)
            spans = [d for d in range(3) if any(len(set(g[:, d].tolist())) > 1 for g in groups)]
            whole = [all(len(set(g[:, d].tolist())) == extent[d] for g in groups) for d in spans]
            axes.append({"spans": ["xyz"[d] for d in spans], "whole": whole, "extent": [extent[d] for d in spans]})
        out.append(axes)
print(json.dumps(found))
"""


def placements(shapes: dict[str, list[tuple[int, ...]]]) -> dict[str, dict[tuple[int, ...], list[dict]]]:
    """Per topology (``v5p:4x4x4``) and mesh shape, per mesh axis: ``spans`` (torus axes), ``whole``, ``extent``."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(shapes)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {topology: dict(zip(map(tuple, shapes[topology]), found[topology])) for topology in shapes}


def wraps(topology: str, extent: int) -> bool:
    """The book's rule, from the slice's shape (``v5p:4x4x4``) and the extent of the torus axis in question."""
    shape = [int(s) for s in topology.split(":")[1].split("x")]
    return all(s % 4 == 0 for s in shape) if len(shape) == 3 else extent == 16


def ring_axes(topology: str, axis: dict) -> float:
    """The book's bandwidth of one mesh axis in torus axes' worth: 1 per ring, 0.5 per line."""
    return sum(1.0 if whole and wraps(topology, extent) else 0.5 for whole, extent in zip(axis["whole"], axis["extent"]))
