"""What ``analyze`` gives: a layout's report (every array, the totals per device, the findings), as frozen data.

The vocabulary the analysis stage speaks: ``analyzer`` builds a ``Report``, ``findings`` says what to watch out
for in it, and every interface (the command line, the notebook, the pages, the plots) reads it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from jax.sharding import PartitionSpec

from explorer import reading
from explorer import tiles as tiles_lib
from explorer.layout import Layout
from explorer.rules import RESOLUTION_ORDERS, DimTrace
from explorer.tiles import MeshInfo, Tile

ERROR_CODES = frozenset({"indivisible", "unknown-mesh-axis", "mesh-axis-twice"})  # JAX refuses these layouts
INFO_CODES = frozenset({"semantics-differ"})  # worth knowing, nothing wrong with this layout


@dataclasses.dataclass(frozen=True)
class Finding:
    """Something about a layout worth a person's attention: a ``code``, a sentence, and the array concerned.

    ``items``: where one finding says many things of one kind (68 of MaxText's base.yml rules a dense model never uses),
    each of them, for whoever asks (the app's expander, ``--json``).

    ``level`` is ``"error"`` for what JAX would refuse (a dimension of a step argument the mesh does not
    divide, a mesh axis the mesh lacks or used twice in one array) and ``"warning"`` for the rest (a rule that never applies, a name no rule
    covers, a large replicated array); ``"info"`` says where Flax Linen and NNX would
    read the rules differently, which matters only to someone moving between them.
    """

    code: str
    message: str
    path: str | None = None
    items: tuple[str, ...] = ()  # a finding that stands for many (rules a config cannot use): each one, shown on demand

    @property
    def level(self) -> str:
        return "error" if self.code in ERROR_CODES else "info" if self.code in INFO_CODES else "warning"


KIND_LABELS = {"param": "parameters", "opt_state": "optimizer state", "input": "inputs", "activation": "declared activations"}
KINDS = tuple(KIND_LABELS)


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """One array under one layout."""

    path: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | None, ...] | None
    spec: tuple[Any, ...]
    shard_shape: tuple[int, ...]
    bytes_per_device: int
    replication: int
    trace: tuple[DimTrace, ...]
    note: str = ""
    module: str = ""
    runs_per_step: int = 1
    semantics: str = "linen"  # the rule semantics Flax applies to this array: its call's (Linen or NNX)

    @property
    def global_bytes(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)

    def spec_text(self) -> str:
        """``P(None, 'model')``, as JAX prints it."""
        return repr(PartitionSpec(*self.spec))


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype as an array records it: NumPy's, or a JAX PRNG key's (``key<fry>``: two uint32, the
    key an NNX model keeps in its ``nnx.Rngs`` state, as MaxText's layers do), which NumPy cannot name."""
    if str(dtype).startswith("key<"):
        import jax

        impl = str(dtype)[4:-1]
        return jax.eval_shape(
            lambda: jax.random.key(0, impl={"fry": "threefry2x32", "rbg": "rbg", "urbg": "unsafe_rbg"}.get(impl, impl))
        ).dtype.itemsize
    return np.dtype(dtype).itemsize


@dataclasses.dataclass(frozen=True)
class Totals:
    """Bytes each device holds, by kind (every device holds the same amount under NamedSharding)."""

    param_bytes: int
    opt_state_bytes: int
    input_bytes: int
    activation_bytes: int
    global_param_bytes: int
    param_count: int

    @property
    def state_bytes(self) -> int:
        """Parameters, optimizer state and inputs: exactly what the step's arguments hold (before TPU padding)."""
        return self.param_bytes + self.opt_state_bytes + self.input_bytes

    @property
    def total_bytes(self) -> int:
        """State plus declared activations: not a peak (XLA keeps other temporaries and reuses buffers)."""
        return self.state_bytes + self.activation_bytes

    def by_kind(self) -> dict[str, int]:
        """Bytes per device keyed by array kind, in KINDS order."""
        return {
            "param": self.param_bytes,
            "opt_state": self.opt_state_bytes,
            "input": self.input_bytes,
            "activation": self.activation_bytes,
        }

    def as_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "state_bytes": self.state_bytes, "total_bytes": self.total_bytes}


@dataclasses.dataclass(frozen=True)
class Report:
    layout: Layout
    mesh: MeshInfo
    arrays: tuple[ArrayInfo, ...]
    totals: Totals
    warnings: tuple[Finding, ...]
    framework: str = "linen"
    values: tuple[reading.TypedValue, ...] = ()  # Explicit axes: every forward value with its type's sharding

    @property
    def typed(self) -> bool:
        """The layout's mesh has Explicit axes: every spec shown is the one in its value's type."""
        return self.layout.mesh.explicit

    @property
    def resolution_order(self) -> str:
        return RESOLUTION_ORDERS[self.framework]

    def array(self, path: str) -> ArrayInfo:
        for info in self.arrays:
            if info.path == path:
                return info
        raise KeyError(path)

    def tiles(self, path: str) -> tuple[Tile, ...]:
        info = self.array(path)
        return tiles_lib.tiles(info.shape, info.spec, self.mesh)
