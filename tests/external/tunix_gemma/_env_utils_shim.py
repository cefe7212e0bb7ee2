"""Local stand-in for `tunix.utils.env_utils` (not part of upstream).

Upstream ``setup_sharding_environment()``, which ``model.py`` calls at import time, runs
``flax.config.update('flax_always_shard_variable', False)``: importing the model would switch Flax's eager
sharding off for the whole process (every other model too). Here it does nothing, so eager sharding stays as the
caller set it; the factory's model is checked with it on.
"""


def setup_sharding_environment():
    """No-op (upstream turns ``flax_always_shard_variable`` off process-wide)."""
