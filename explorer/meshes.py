"""The layout's mesh, built in one place: as JAX builds it (``jax_mesh``, ``layout_mesh``) and as plain data
(``mesh_info``). The reading, the analysis, the compile and the ops all call down to here.

A mesh needing more devices than this process has is a *planned* mesh: JAX's ``AbstractMesh`` stands in, and
device ids are 0..N-1 in mesh order.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh

from explorer import caches
from explorer.layout import MeshSpec
from explorer.tiles import MeshInfo


def mesh_info(spec: MeshSpec) -> MeshInfo:
    """The mesh as plain data: real devices when this process has enough, else planned."""
    return _mesh_info_cached(tuple(spec.shape), tuple(spec.axes), jax.device_count())


@caches.register
@functools.lru_cache(maxsize=64)
def _mesh_info_cached(shape: tuple[int, ...], axes: tuple[str, ...], device_count: int) -> MeshInfo:
    size = math.prod(shape)
    if size > device_count:
        ids = np.arange(size).reshape(shape)
        return MeshInfo(shape, axes, _nested(ids), abstract=True)
    return MeshInfo(shape, axes, _nested(jax_mesh(shape, axes).device_ids), abstract=False)


def _nested(ids: np.ndarray) -> tuple:
    return tuple(_nested(row) for row in ids) if ids.ndim > 1 else tuple(int(i) for i in ids)


@caches.register
@functools.lru_cache(maxsize=64)
def jax_mesh(shape: tuple[int, ...], axes: tuple[str, ...], types: tuple[str, ...] | None = None) -> Mesh | AbstractMesh:
    """A Mesh with the given axis types (default Auto, what Flax's logical constraints want), or an AbstractMesh if
    too big. ``types`` as a layout spells them (``MeshSpec.types``: ``"auto"``/``"explicit"`` per axis)."""
    axis_types = axis_types_of(types or ("auto",) * len(axes))
    size = math.prod(shape)
    if size > jax.device_count():
        return AbstractMesh(shape, axes, axis_types=axis_types)
    return jax.make_mesh(shape, axes, axis_types=axis_types, devices=jax.devices()[:size])


def axis_types_of(types: Sequence[str]) -> tuple[AxisType, ...]:
    """JAX's axis types for a layout's spelling (``"auto"``/``"explicit"``)."""
    return tuple(AxisType.Explicit if kind == "explicit" else AxisType.Auto for kind in types)


def layout_mesh(spec: MeshSpec) -> Mesh | AbstractMesh:
    """The layout's mesh as JAX builds it, with its axis types (``jax_mesh``)."""
    return jax_mesh(tuple(spec.shape), tuple(spec.axes), spec.axis_types)
