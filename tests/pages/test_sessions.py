"""Eight sessions of one server compiling at once (AppTest, one thread each, one process as a server's): each gets the
verdict of its own layout, while the server's compile pool runs them N at once and none is lost.
"""

from __future__ import annotations

import sys
import threading

from streamlit.testing.v1 import AppTest

from explorer.compile.compile_pool import POOL
from explorer.layout import parse_layout
from explorer.sharing.share import layout_to_params
from explorer.compile.target_compile import compile_target
from ui.target_view import verdict
from tests.paths import APP

SESSIONS = 8
TARGET = "v5litepod-8"


def layout_of(seed_dict, index: int):
    data = {**seed_dict, "name": f"session{index}", "target": TARGET}
    data["model"] = {**seed_dict["model"], "options": {**seed_dict["model"]["options"], "layers": 1, "depth": 128 * (index + 1)}}
    return parse_layout(data)


def test_eight_sessions_compiling_at_once_each_get_their_own_layouts_verdict(seed_dict, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    layouts = [layout_of(seed_dict, i) for i in range(SESSIONS)]
    pages = []
    for layout in layouts:
        at = AppTest.from_file(APP, default_timeout=300)
        for key, value in layout_to_params(layout).items():
            at.query_params[key] = value
        pages.append(at.run())
        assert not at.exception and at.session_state["layout_name"] == layout.name
    most = [0]
    watching = threading.Event()

    def watch() -> None:  # the pool's concurrency while the sessions compile
        while not watching.is_set():
            most[0] = max(most[0], POOL.running())
            watching.wait(0.05)

    clicks = [threading.Thread(target=lambda at=at: at.button(key="target_compile_button").click().run()) for at in pages]
    watcher = threading.Thread(target=watch)
    watcher.start()
    for click in clicks:
        click.start()
    for click in clicks:
        click.join(timeout=600)
    watching.set()
    watcher.join()
    assert 1 <= most[0] <= POOL.workers
    for at, layout in zip(pages, layouts):
        assert not at.exception and not at.error, [e.value for e in at.error]
        result, cached = compile_target(layout, TARGET)
        assert cached  # the session's compile, kept on disk
        shown = [s.value for s in at.success] + [e.value for e in at.error]
        assert verdict(result) in shown, (layout.name, shown)  # its own layout's verdict, not another session's
    assert len({verdict(compile_target(layout, TARGET)[0]) for layout in layouts}) > 1  # the layouts' verdicts differ


def test_a_cluster_the_server_cannot_join_is_one_warning_and_compiles_stay_on_this_machine(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    monkeypatch.setenv("EXPLORER_CLUSTER", "10.0.0.7:6379")
    at = AppTest.from_file(APP, default_timeout=300).run()
    assert not at.exception
    assert [w.value.replace("\\", "") for w in at.sidebar.warning] == [  # the message escaped (literal), unescaped here
        "Compiles run on this machine: --cluster: '10.0.0.7:6379' needs Ray, an optional extra that is not installed here: "
        "pip install -r requirements-ray.txt (docs/cluster.md)"
    ]
    assert POOL.cluster is None
