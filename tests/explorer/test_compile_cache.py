"""The disk cache of target compiles: a second request is read back, a corrupt file is a miss."""

from __future__ import annotations

import os

import pytest

from explorer.compile_cache import cache_key
from explorer.reading.disk import cache_dir
from explorer.target_compile import compile_target
from explorer.targets import parse_target
from tests.explorer import COMPILE_TARGET as TARGET
from tests.explorer import compile_seed

pytestmark = pytest.mark.usefixtures("own_compile_cache")


@pytest.fixture(scope="module")
def seed_compile(tmp_path_factory):
    """The guide's MLP compiled once: (layout, result, its cache folder)."""
    folder = tmp_path_factory.mktemp("seed-cache")
    return (*compile_seed(folder), folder)


def test_a_second_request_is_a_cache_hit_and_a_corrupt_entry_is_a_miss(seed_compile, monkeypatch):
    layout, first, folder = seed_compile
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(folder))  # the folder the first compile wrote
    second, cached = compile_target(layout, parse_target(TARGET))
    assert cached and second == first
    path = os.path.join(cache_dir(), "compiles", cache_key(layout, parse_target(TARGET)) + ".json")
    with open(path, "w") as handle:
        handle.write('{"memory": ')  # a writer that died half-way
    third, cached = compile_target(layout, TARGET)
    assert not cached and third.memory == first.memory
