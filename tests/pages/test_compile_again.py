"""AppTest: a compile read from the cache, not compiled in this session, says when and where, and compiles again on a
click (issue 45 item 11: it appeared unasked, from a shared cache, with no way to compile again)."""

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from tests.pages.test_app import plain
from tests.paths import APP


def compiled_at(cache: Path) -> list[str]:
    return sorted(json.loads(path.read_text())["compiled_at"] for path in (cache / "compiles").glob("*.json"))


LINK = {
    "name": "tiny",
    "mesh": "1",
    "axes": "data",
    "rules": "batch:data",
    "model": "mlp",
    "options": "layers:1;depth:64",
    "target": "v5litepod-1",
}


def test_a_cached_compile_says_when_and_where_and_compiles_again(tmp_path, monkeypatch):
    from explorer.sharing.share import params_to_layout
    from explorer.compile.target_compile import compile_target

    cache = tmp_path / "cache"
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(cache))
    compile_target(params_to_layout(LINK), "v5litepod-1")  # an earlier session's compile, or another server's
    [before] = compiled_at(cache)

    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update(LINK)
    at.run()
    assert not at.exception and [s for s in at.main.success if "Fits" in s.value]
    [said] = [plain(c.value) for c in at.main.caption if "Read from the compile cache" in c.value]
    assert str(cache / "compiles") in said and f"compiled on {before.replace('T', ' ').replace('+00:00', ' UTC')}" in said, said
    at.button(key="target_compile_again_button").click().run()
    assert not at.exception and [s for s in at.main.success if "Fits" in s.value]
    [after] = compiled_at(cache)
    assert after > before  # compiled anew, the cached result replaced
    assert not [c for c in at.main.caption if "Read from the compile cache" in c.value]  # compiled here, by this user
