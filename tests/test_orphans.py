"""``explorer compile`` and ``explorer advise`` ended by SIGTERM (a CI job's timeout, a closed terminal, a service
manager) or SIGKILL during a compile leave no process of theirs running 5 s later, for a built-in model (each command
by each signal) and a MaxText config (each command and each signal once).

Each command runs with a mark of its own in its environment (``tests.procfs.MARK``), which every process it starts
inherits, and a compile cache and temporary folder of its own (so that it really compiles); it is ended as soon as XLA
begins to compile for it (its dump of the program appears in that folder), and 5 s later no process of the mark may
run (read from /proc; a zombie does not run). The compiles are long enough that a compile child left behind would
still be compiling then (it would end later, at its next word to the parent it lost: a broken pipe).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.maxtext_tiny import TINY, needs_maxtext
from tests.paths import ROOT
from tests.procfs import MARK, command_line, linux, marked

# A compile long enough that its child would still be compiling 5 s after its parent's end (the built-in transformer,
# 8 blocks of width 1024: about 25 s of XLA here; MaxText's tiny config: about 25 s, most of it MaxText's own kernels)
TRANSFORMER = {
    "name": "orphans",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["mlp", "model"], ["heads", "model"], ["kv_heads", "model"], ["vocab", "model"]],
    "model": {"name": "transformer", "options": {"layers": 8, "d_model": 1024}},
}
COMMANDS = {
    "built-in": {
        "compile": ["compile", "LAYOUT", "--target", "v5litepod-8"],
        "advise": ["advise", "LAYOUT", "--target", "v5litepod-8", "--compiles", "1"],
    },
    "maxtext": {
        "compile": ["compile", "--maxtext", *TINY, "ici_fsdp_parallelism=8", "--target", "v5e-8"],
        "advise": ["advise", "--maxtext", *TINY, "--target", "v5e-8", "--compiles", "1"],
    },
}
# Which signal ends which command: the built-in model every pair; a MaxText config (each command ~15 CPU-s of MaxText
# before its compile starts) each command once and each signal once, the same ways of ending on its own paths
SIGNALS = {
    "built-in": {"compile": (signal.SIGTERM, signal.SIGKILL), "advise": (signal.SIGTERM, signal.SIGKILL)},
    "maxtext": {"compile": (signal.SIGTERM,), "advise": (signal.SIGKILL,)},
}
GONE_WITHIN_S = 5.0


def compiling(folder: Path) -> bool:
    """XLA is compiling for the command whose temporary folder is ``folder``: it has begun its dump of the program there
    (``explorer-xla-dump-*``, made as the compile starts)."""
    return any(folder.glob("explorer-xla-dump-*"))


@linux
@pytest.mark.parametrize("model", [pytest.param("built-in"), pytest.param("maxtext", marks=needs_maxtext)])
def test_commands_ended_during_a_compile_leave_no_process_behind(model, tmp_path):
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(TRANSFORMER))
    runs = []
    for command, arguments in COMMANDS[model].items():
        for sig in SIGNALS[model][command]:
            mark = uuid.uuid4().hex
            folder = tmp_path / mark  # its compile cache (so that it compiles) and its temporary files
            (folder / "tmp").mkdir(parents=True)
            env = dict(os.environ, **{MARK: mark, "EXPLORER_CACHE_DIR": str(folder / "cache"), "TMPDIR": str(folder / "tmp")})
            argv = [sys.executable, "-m", "explorer", *(str(layout) if a == "LAYOUT" else a for a in arguments)]
            with open(folder / "log", "w") as log:
                process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=log)
            runs.append((f"{command} ({model}) ended by {sig.name}", sig, mark, folder, process))
    ended = []
    try:
        pending, deadline = list(runs), time.monotonic() + 600
        while pending:  # all four run at once: each is ended as soon as its compile runs
            assert time.monotonic() < deadline, f"no compile child within 600 s: {[run[0] for run in pending]}"
            for run in list(pending):
                what, sig, mark, folder, process = run
                assert process.poll() is None, f"{what} ended before its compile: {(folder / 'log').read_text()[-2000:]}"
                if compiling(folder / "tmp"):
                    os.kill(process.pid, sig)
                    ended.append((what, mark, time.monotonic()))
                    pending.remove(run)
            time.sleep(0.1)
        for what, mark, when in ended:
            time.sleep(max(0.0, when + GONE_WITHIN_S - time.monotonic()))
            left = {pid: " ".join(command_line(pid))[:200] for pid in marked(mark)}
            assert left == {}, f"{what}: still running {GONE_WITHIN_S:.0f} s later"
    finally:
        for _, _, mark, _, process in runs:
            process.kill()
            process.wait()
            for pid in marked(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
