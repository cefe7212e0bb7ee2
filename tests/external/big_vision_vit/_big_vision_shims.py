"""Stand-ins for the two big_vision helper modules `vit.py` imports (not part of the upstream repository).

`vit.py` uses `big_vision.utils.load_params` and `big_vision.models.common.merge_params` only in `load()`, which
restores checkpoints; the model itself does not need them. Importing the whole big_vision package would pull in
TensorFlow and other dependencies that are not installed here, so these stand-ins refuse to load checkpoints.
"""

import types


def _no_checkpoints(*args, **kwargs):
    raise NotImplementedError("checkpoint loading is not available in this vendored copy of big_vision's ViT")


utils = types.SimpleNamespace(load_params=_no_checkpoints)
common = types.SimpleNamespace(merge_params=_no_checkpoints)
