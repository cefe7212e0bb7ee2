"""The Flax NNX guide's model (explorer/models/nnx_guide.py) on a mesh of Explicit axes: the guide's code is written
for Auto axes, so it is refused there with one line saying why and the fix (its Auto path: tests/test_frameworks.py)."""

import pytest

from explorer.analysis.analyzer import analyze
from explorer.errors import ExplorerError
from explorer.layout import parse_layout


@pytest.mark.parametrize("logical", [False, True])
def test_on_explicit_axes_the_guides_model_is_refused_with_the_reason_and_the_fix(logical):
    layout = parse_layout(
        {
            "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
            "rules": [["batch", "data"], ["hidden", "model"], ["embed", None]],
            "model": {"name": "nnx-guide", "options": {"depth": 64, "logical": logical}},
        }
    )
    with pytest.raises(ExplorerError) as caught:
        analyze(layout)
    message = str(caught.value)
    assert caught.value.field == "model" and "\n" not in message
    assert message.startswith("model: 'nnx-guide' is the Flax NNX guide's code, written for Auto axes")
    assert "Fix: make every mesh axis Auto" in message and "JAX" in message
