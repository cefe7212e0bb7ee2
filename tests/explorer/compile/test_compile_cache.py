"""The disk cache of target compiles: a stored result is what a second request gets, without a compile; a corrupt file
is a miss, and is dropped."""

from __future__ import annotations

import os

import pytest

from explorer.compile.compile_cache import cache_key, cached, store
from explorer.layout import parse_layout
from explorer.reading.disk import cache_dir
from explorer.compile.target_compile import compile_target
from explorer.hardware.targets import parse_target
from explorer.compile.xla_results import with_verdict
from tests.explorer import COMPILE_TARGET as TARGET
from tests.explorer import compile_result

pytestmark = pytest.mark.usefixtures("own_compile_cache")


def test_a_second_request_is_a_cache_hit_and_a_corrupt_entry_is_a_miss(seed_dict):
    layout, target = parse_layout(seed_dict), parse_target(TARGET)
    first = compile_result(TARGET, compile_s=12.5)
    assert cached(layout, target) is None
    store(layout, target, first)
    second, hit = compile_target(layout, TARGET)  # no child process: the stored result, judged here
    assert hit and second == with_verdict(first, target) and second.compile_s == 12.5
    path = os.path.join(cache_dir(), "compiles", cache_key(layout, target) + ".json")
    with open(path, "w") as handle:
        handle.write('{"memory": ')  # a writer that died half-way
    assert cached(layout, target) is None and not os.path.exists(path)


def test_the_key_changes_with_the_layout_and_the_target():
    layout = parse_layout({"name": "a", "mesh": {"shape": [8], "axes": ["data"]}, "rules": [], "model": {"name": "mlp"}})
    other = parse_layout({"name": "a", "mesh": {"shape": [2, 4], "axes": ["data", "model"]}, "rules": [], "model": {"name": "mlp"}})
    keys = {cache_key(layout, parse_target(TARGET)), cache_key(other, parse_target(TARGET)), cache_key(layout, parse_target("v5p-16"))}
    assert len(keys) == 3


def test_two_compiles_that_differ_only_in_flags_are_two_entries(seed_dict, monkeypatch):
    """LIBTPU_INIT_ARGS change the program libtpu builds (a recipe's flags moved Llama 3.1 8B's predicted step on v6e-16
    from 3.43 s to 3.12 s), so they key the compile: a compile under other flags is not answered from the cache (it used
    to be: ``"cached": true`` with a result compiled under other flags), each result says the flags it ran under, and
    each is found again under its own."""
    layout, target = parse_layout(seed_dict), parse_target(TARGET)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536")
    first, hit = compile_target(layout, TARGET)
    assert not hit and dict(first.flags)["LIBTPU_INIT_ARGS"] == "--xla_tpu_scoped_vmem_limit_kib=65536"
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=32768")
    second, hit = compile_target(layout, TARGET)
    assert not hit and dict(second.flags)["LIBTPU_INIT_ARGS"] == "--xla_tpu_scoped_vmem_limit_kib=32768"
    assert len(os.listdir(os.path.join(cache_dir(), "compiles"))) == 2
    assert compile_target(layout, TARGET) == (second, True)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "  --xla_tpu_scoped_vmem_limit_kib=65536 ")  # the same flags, spaced otherwise
    assert cached(layout, target) == first


def test_a_step_whose_code_was_edited_is_another_entry(tmp_path, monkeypatch):
    """A user edits their step and compiles again: the key holds the factory's file (its SHA-256), so the edit is
    compiled, not answered with the program of the code before it."""
    module = tmp_path / "my_step_module.py"
    module.write_text("def make_step(mesh):\n    raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EXPLORER_ALLOWED_FACTORIES", "my_step_module:make_step")
    from explorer.models.steps import step_layout_data

    layout, target = parse_layout(step_layout_data("my_step_module:make_step", parse_target(TARGET))), parse_target(TARGET)
    before = cache_key(layout, target)
    assert cache_key(layout, target) == before
    module.write_text("def make_step(mesh):\n    raise NotImplementedError('edited')\n")
    assert cache_key(layout, target) != before
