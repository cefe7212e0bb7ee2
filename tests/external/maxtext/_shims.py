"""Stand-ins for the MaxText modules the vendored layers import but these tests do not need.

Written for Partition Explorer's tests (not MaxText code): ``max_logging`` (logging only), ``max_utils.device_space``
(used only when parameters are offloaded to host memory, off here), and ``quantizations`` (only its type name and
``in_serve_mode``; quantization is off: ``quant=None``), whose real module needs aqt and qwix.
"""

import logging
import types

max_logging = types.SimpleNamespace(
    log=lambda *a, **k: logging.getLogger("maxtext").info(*a),
    info=lambda *a, **k: logging.getLogger("maxtext").info(*a),
)


def _device_space():
  raise NotImplementedError("parameter offloading is not part of these tests")


max_utils = types.SimpleNamespace(device_space=_device_space)


class AqtQuantization:  # only a type name for annotations; quantization is off (quant=None)
  pass


def in_serve_mode(quant) -> bool:
  return False


quantizations = types.SimpleNamespace(AqtQuantization=AqtQuantization, in_serve_mode=in_serve_mode)
