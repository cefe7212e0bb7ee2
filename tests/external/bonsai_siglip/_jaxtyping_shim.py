"""Local stand-in for `jaxtyping.Array` (not part of the upstream repository).

jaxtyping is not installed in this project; the model only uses `Array` as a type annotation, so `jax.Array`
serves.
"""

from jax import Array

__all__ = ["Array"]
