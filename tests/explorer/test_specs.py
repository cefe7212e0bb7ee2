"""The spec vocabulary's one home (``explorer/specs.py``; its doctests run too): every spelling of an entry means
the same mesh axes, and a spec prints as JAX prints it."""

from jax.sharding import PartitionSpec

from explorer.specs import entry_json, normal_spec, spec_axes, spec_entry, spec_json, spec_text


def test_every_spelling_of_an_entry_has_one_meaning():
    for written, axes in (
        (None, ()),
        ("model", ("model",)),
        (["data", "model"], ("data", "model")),
        (("data", "model"), ("data", "model")),
        ([], ()),
    ):
        assert spec_axes(written) == axes
        assert spec_axes(spec_entry(written)) == axes  # the canonical spelling keeps the meaning
    assert spec_entry(["model"]) == "model" and spec_entry([]) is None


def test_a_partition_spec_is_normalised_padded_and_unconstrained_reads_as_replicated():
    assert normal_spec(PartitionSpec("data", ("x", "y")), 3) == ("data", ("x", "y"), None)
    assert normal_spec(PartitionSpec(PartitionSpec.UNCONSTRAINED, "model"), 2) == (None, "model")


def test_json_writes_tuples_as_lists_and_text_is_jaxs_own_print():
    assert spec_json(("data", ("x", "y"), None)) == ["data", ["x", "y"], None]
    assert entry_json(("x",)) == ["x"] and entry_json(None) is None
    assert spec_text(("data", None)) == repr(PartitionSpec("data", None))
    assert spec_text(None) == "—"
    assert spec_text(("data",), unreduced=("model",)) == repr(PartitionSpec("data", unreduced={"model"}))
