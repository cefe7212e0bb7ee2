"""Local stand-in for the `jaxtyping` names bonsai's qwen3 model uses (not part of upstream).

jaxtyping is not installed in this project; the model only uses `jaxtyping.Array` and `jaxtyping.ArrayLike` as type
annotations, so JAX's own types serve.
"""

from jax import Array
from jax.typing import ArrayLike

__all__ = ["Array", "ArrayLike"]
