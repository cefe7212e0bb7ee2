"""Stage 1 (``explorer/reading/build.py``): the model of a key built by the registry, nothing traced."""

import pytest

from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, parse_layout
from explorer.reading import build


def test_a_linen_model_is_built_with_its_inputs():
    built = build.build(parse_layout(SEED_LAYOUT).model.key())
    assert built.framework == "linen" and [i.name for i in built.inputs] == ["x"]


def test_an_nnx_builder_is_handed_over_not_called(monkeypatch):
    """Building traces nothing: an NNX model's builder runs later, under ``nnx.eval_shape`` (stage 2)."""
    from tests import explicit_models

    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "tests.explicit_models:make_type_over_metadata")
    monkeypatch.setattr(explicit_models.TypeOverMetadata, "__init__", lambda *a: pytest.fail("the builder ran"))
    spec = parse_layout({**SEED_LAYOUT, "model": {"name": "tests.explicit_models:make_type_over_metadata", "options": {}}}).model
    built = build.build(spec.key())
    assert built.framework == "nnx" and callable(built.module)


def test_a_factory_outside_the_allow_list_is_refused(monkeypatch):
    monkeypatch.delenv("EXPLORER_ALLOWED_FACTORIES", raising=False)
    with pytest.raises(ExplorerError, match="tests.explicit_models:make_type_over_metadata"):
        build.build(("tests.explicit_models:make_type_over_metadata", "{}"))
