"""The explorer's own code uses Flax's current spellings: no Flax deprecation warning while reading the built-in models.

pyproject.toml turns a DeprecationWarning attributed to an explorer module into an error in every
test (that catches ``rngs.fork(split=)``). Flax attributes its ``sharding=``/``sharding_names=``
warnings to its own ``variablelib``, so this test records every warning while the built-in models
are traced, in a fresh process with the trace cache off (an earlier test's trace would hide them),
and fails on any DeprecationWarning raised from Flax or from the explorer.
"""

import json
import os
import subprocess
import sys

from tests.paths import ROOT

# Every built-in model, in every form that builds different Flax code (scan, NNX's logical variant), small.
MODELS = [
    ("mlp", {"batch": 8, "layers": 2, "depth": 16, "scan": False}),
    ("mlp", {"batch": 8, "layers": 2, "depth": 16, "scan": True}),
    ("nnx-guide", {"batch": 8, "layers": 2, "depth": 16}),
    ("nnx-guide", {"batch": 8, "layers": 2, "depth": 16, "logical": True}),
    (
        "transformer",
        {
            "batch": 8,
            "seq_len": 8,
            "layers": 2,
            "d_model": 16,
            "heads": 2,
            "kv_heads": 1,
            "head_dim": 8,
            "mlp_dim": 32,
            "vocab": 32,
            "gated_mlp": True,
            "learned_positions": False,
            "scan": False,
        },
    ),
    (
        "transformer",
        {
            "batch": 8,
            "seq_len": 8,
            "layers": 2,
            "d_model": 16,
            "heads": 2,
            "kv_heads": 2,
            "head_dim": 8,
            "mlp_dim": 32,
            "vocab": 32,
            "scan": True,
        },
    ),
]

PROBE = """
import json, sys, warnings
from explorer.hardware import devices
devices.configure(8)
from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
seen = []
for name, options in json.loads(sys.argv[1]):
    layout = parse_layout({"mesh": {"shape": [2, 4], "axes": ["data", "model"]},
                           "rules": [["batch", "data"], ["hidden", "model"], ["embed", None]],
                           "model": {"name": name, "options": options}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analyze(layout)
    seen += [[name, w.category.__name__, w.filename, w.lineno, str(w.message)] for w in caught]
print(json.dumps(seen))
"""


def test_reading_the_built_in_models_raises_no_flax_deprecation_warning():
    env = {**os.environ, "EXPLORER_CACHE_DIR": "off", "EXPLORER_CPU_DEVICES": "8"}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(MODELS)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    warnings = json.loads(done.stdout.strip().splitlines()[-1])
    deprecations = [
        w for w in warnings if w[1] == "DeprecationWarning" and (f"{os.sep}flax{os.sep}" in w[2] or f"{os.sep}explorer{os.sep}" in w[2])
    ]
    assert deprecations == []
