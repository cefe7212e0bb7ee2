"""Many users on one machine: MaxText commands and the app's server, each of which loads libtpu itself (MaxText's mesh is
built over libtpu's description of the slice), run at once and all answer; none of them holds libtpu's lock.

libtpu's lock: a process that loads libtpu without ``ALLOW_MULTIPLE_LIBTPU_LOAD=1`` holds a lock file for its life, and
another such process on the machine is then refused. Each process here is held (SIGSTOP) once it has loaded libtpu
(/proc/PID/maps) and checked not to hold the lock (/proc/locks), then let go.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.maxtext_tiny import TINY, needs_maxtext
from tests.paths import ROOT
from tests.procfs import holds_libtpu_lock, linux, loaded, wait_for

KEYS = [*TINY, "ici_fsdp_parallelism=8"]
# The app's server in a process of its own (app.py run by Streamlit's AppTest): a MaxText config opened as a user opens
# it (the Model selector's maxtext kind, the keys, "Use MaxText's mesh and rules for these keys"), then kept open until
# told, then the page run again.
APP = """
import json, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=600)
at.run()
at.selectbox(key="model_name").select("maxtext").run()
at.text_area(key="maxtext_keys_text").input(sys.argv[1]).run()
at.button(key="maxtext_apply").click().run()
def seen():
    return {"exception": [str(e.value) for e in at.exception], "errors": [e.value for e in at.error],
            "axes": at.text_input(key="mesh_axes_text").value}
print(json.dumps(seen()), flush=True)
sys.stdin.readline()
at.run()
print(json.dumps(seen()), flush=True)
"""


def explorer(*arguments: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "explorer", *arguments], cwd=ROOT, text=True, **popen)


def held(process: subprocess.Popen, what: str, log, go_on: bool = True) -> None:
    """Stop ``process`` (SIGSTOP) once it has loaded libtpu, check that it does not hold libtpu's lock, and (``go_on``)
    let it go on."""
    wait_for(lambda: loaded(process.pid, "libtpu.so") or process.poll() is not None, 600, f"{what} loading libtpu")
    os.kill(process.pid, signal.SIGSTOP)
    assert process.poll() is None, log.read_text()[-3000:]
    assert not holds_libtpu_lock(process.pid), f"{what} holds libtpu's lock"
    if go_on:
        os.kill(process.pid, signal.SIGCONT)


@linux
@needs_maxtext
def test_maxtext_commands_and_the_app_at_once_all_answer(tmp_path):
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "cache"))
    app = subprocess.Popen(
        [sys.executable, "-c", APP, "\n".join([*KEYS, "compile_topology=v5e-8"])],
        cwd=ROOT,
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    compiling = analyzing = None
    try:
        opened = json.loads(app.stdout.readline() or "{}")
        assert opened.get("exception") == [] and opened["errors"] == [], opened
        axes = opened["axes"].replace(" ", "").split(",")
        assert len(axes) == 12 and "fsdp" in axes, axes  # MaxText's mesh
        assert loaded(app.pid, "libtpu.so") and not holds_libtpu_lock(app.pid)
        # explorer compile --maxtext beside the app, held (SIGSTOP) once its own process has loaded libtpu
        with open(tmp_path / "compile.json", "w") as out, open(tmp_path / "compile.log", "w") as log:
            compiling = explorer("compile", "--maxtext", *KEYS, "--target", "v5e-8", "--json", env=env, stdout=out, stderr=log)
        held(compiling, "compile --maxtext", tmp_path / "compile.log", go_on=False)
        # a second MaxText command while both have libtpu loaded: held too once it has, and checked
        with open(tmp_path / "analyze.json", "w") as out, open(tmp_path / "analyze.log", "w") as log:
            analyzing = explorer("analyze", "--maxtext", *KEYS, "compile_topology=v5e-8", "--json", env=env, stdout=out, stderr=log)
        held(analyzing, "analyze --maxtext", tmp_path / "analyze.log")
        assert analyzing.wait(timeout=600) == 0, (tmp_path / "analyze.log").read_text()[-3000:]
        assert json.loads((tmp_path / "analyze.json").read_text())["layout"]["model"]["name"] == "maxtext"
        os.kill(compiling.pid, signal.SIGCONT)
        assert compiling.wait(timeout=900) == 0, (tmp_path / "compile.log").read_text()[-3000:]
        result = json.loads((tmp_path / "compile.json").read_text())
        assert result["mesh"]["shape"] == [1, 1, 1, 8, 1, 1, 1, 1, 1, 1, 1, 1] and result["fits"] is True
        app.stdin.write("\n")
        app.stdin.flush()
        again = json.loads(app.stdout.readline() or "{}")
        assert again.get("exception") == [] and again["errors"] == [], again
    finally:
        for process in (app, compiling, analyzing):
            if process is not None:
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait()
