"""Counts and their nouns agree in every message (issue 45 item 13: "axises", "1 GPUs", "1 devices", "1 names")."""

import pytest

from explorer.errors import ExplorerError
from explorer.layout import parse_layout
from explorer.hardware.placement import mesh_links
from explorer.hardware.targets import check_mesh_fits, parse_target
from explorer.formats import counted, plural


@pytest.mark.parametrize(
    "count, noun, text",
    [(1, "GPU", "1 GPU"), (2, "GPU", "2 GPUs"), (0, "device", "0 devices"), (1, "axis", "1 axis"), (3, "axis", "3 axes")],
)
def test_a_count_and_its_noun_agree(count, noun, text):
    assert counted(count, noun) == text and plural(noun, count) == text.split(" ", 1)[1]


def test_one_mesh_axis_name_is_one_name(seed_dict):
    seed_dict["mesh"]["axes"] = ["data"]
    with pytest.raises(ExplorerError) as error:
        parse_layout(seed_dict)
    assert "has 1 name but mesh.shape [2, 4] has 2 axes" in str(error.value)


def test_one_gpu_is_one_gpu():
    with pytest.raises(ExplorerError) as error:
        check_mesh_fits(parse_target("h100:1x1"), 8)
    message = str(error.value)
    assert "has 1 GPU (1 host of 1) but the mesh needs 8 devices" in message and "1 GPUs" not in message


def test_a_mesh_axis_on_one_torus_axis_is_along_one_axis_and_on_two_along_axes():
    """The Advisor's and the Layout page's placement line said "along torus axises x, y"."""
    target = parse_target("v5e:4x4")
    (both,) = mesh_links(target, (16,), ("data",))
    one, _ = mesh_links(target, (4, 4), ("data", "model"))
    assert "along torus axes" in both.text and "axises" not in both.text, both.text
    assert "along torus axis " in one.text, one.text
