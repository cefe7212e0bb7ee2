"""A pipelined layout's stages as plain data, for the Layout page's stage picture: which decoder blocks each stage
holds, which devices hold it, the stacked block weights each of those devices keeps, and the bubble.

Devices come from the stacked weights' tiles (``Report.tiles``: the blocks of each array and the devices holding them,
checked against JAX's own placement by tests/ground_truth.py), so the picture shows where JAX puts each stage, not
where the rule was meant to.
"""

from __future__ import annotations

import dataclasses

from explorer.models.schedule import blocks_of, bubble_fraction, iterations

PIPELINE_PREFIX = "params/pipeline/"


@dataclasses.dataclass(frozen=True)
class Stage:
    index: int
    blocks: tuple[int, ...]  # the decoder blocks it runs, every repeat's
    devices: tuple[int, ...]  # the devices that hold its weights
    weight_bytes_per_device: int  # the stacked block weights (every stage's slice) on one of those devices


@dataclasses.dataclass(frozen=True)
class StagePlan:
    stages: int
    microbatches: int
    repeats: int
    iterations: int  # the loop's trip count: microbatches * repeats + stages - 1 (MaxText's)
    bubble: float  # (stages - 1) / iterations: the share of each stage's iterations spent idle
    placed: bool  # the stage dimension is sharded over a mesh axis (else every device holds every stage)
    rows: tuple[Stage, ...]


def pipeline_of(layout) -> tuple[int, int] | None:
    """A pipelined built-in transformer's (stages, the loop's trip count); None for any other layout."""
    options = layout.model.options if layout.model.name == "transformer" else {}
    stages = options.get("pipeline_stages", 1)
    if stages <= 1:
        return None
    return stages, iterations(stages, options.get("pipeline_microbatches", 1), options.get("pipeline_repeats", 1))


def stage_mesh_axes(layout) -> tuple[str, ...]:
    """The mesh axes the layout's rules give the logical name ``stage`` (Linen's first matching rule: a lone name
    always finds its axes free); () when no rule places it on the mesh."""
    for rule in layout.rules:
        if rule.logical == "stage":
            axes = tuple(a for a in (rule.mesh_axes or ()) if a in layout.mesh.axes)
            return axes
    return ()


def stage_plan(options: dict, report) -> StagePlan | None:
    """The stages of a pipelined built-in transformer (``options`` its validated options; ``report`` the layout's
    ``analysis.Report``); None when it is not pipelined."""
    stages = options.get("pipeline_stages", 1)
    if stages <= 1:
        return None
    microbatches, repeats = options.get("pipeline_microbatches", 1), options.get("pipeline_repeats", 1)
    stacked = [a for a in report.arrays if a.kind == "param" and a.path.startswith(PIPELINE_PREFIX)]
    weight_bytes = sum(a.bytes_per_device for a in stacked)
    stage_dim = 1 if repeats > 1 else 0
    holders: list[set[int]] = [set() for _ in range(stages)]
    for tile in report.tiles(stacked[0].path):
        start, stop = tile.index[stage_dim]
        for s in range(start, stop):
            holders[s].update(tile.devices)
    blocks = blocks_of(options["layers"], stages, repeats)
    rows = tuple(Stage(s, tuple(blocks[s]), tuple(sorted(holders[s])), weight_bytes) for s in range(stages))
    placed = len({r.devices for r in rows}) > 1
    return StagePlan(
        stages,
        microbatches,
        repeats,
        iterations(stages, microbatches, repeats),
        bubble_fraction(stages, microbatches, repeats),
        placed,
        rows,
    )
