"""A pipeline's schedule as MaxText runs it (``layers/pipeline.py``): the loop's trip count, the bubble, which decoder
blocks each stage holds. Plain arithmetic, no Flax: the model, the stage plan and the prediction share this one home."""

from __future__ import annotations


def bubble_fraction(stages: int, microbatches: int, repeats: int = 1) -> float:
    """``(stages - 1) / (microbatches * repeats + stages - 1)``: MaxText's loop runs ``microbatches * repeats +
    stages - 1`` iterations and each stage works in ``microbatches * repeats`` of them."""
    return (stages - 1) / iterations(stages, microbatches, repeats)


def iterations(stages: int, microbatches: int, repeats: int = 1) -> int:
    """The pipeline loop's trip count."""
    return microbatches * repeats + stages - 1


def blocks_of(layers: int, stages: int, repeats: int = 1) -> list[list[int]]:
    """The decoder blocks each stage holds: block ``r * stages * per + s * per + i`` at repeat ``r``, stage ``s``
    (``per = layers / (stages * repeats)``): with repeats, non-adjacent groups."""
    per = layers // (stages * repeats)
    return [[r * stages * per + s * per + i for r in range(repeats) for i in range(per)] for s in range(stages)]
