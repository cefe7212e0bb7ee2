"""Record MaxText's own program for a published row (``published.json``) compiled for its slice: the optimized HLO
text and the costed collectives the step model predicts from, and the compile's JSON result (MaxText only here).

    EXPLORER_CACHE_DIR=/tmp/x .venv/bin/python -m tests.data.maxtext_published.record v5p-32b-1

writes ``tests/data/maxtext_published/v5p-32b-1.hlo.txt.gz``, ``.collectives.json`` and ``.result.json``: the row's
``maxtext`` keys through ``explorer compile --maxtext KEYS --target TARGET``'s path (``maxtext.layout_data``, then
``xla_compile.compile_for_target``: MaxText's own train step), under the row's ``libtpu_init_args`` as the run's
LIBTPU_INIT_ARGS. As ``compile_target`` does, a flag libtpu 0.0.50.1 refuses (``target_compile.refused_flag``) is left
out and the row compiled again without it, each attempt in a child process of its own (libtpu reads its flags once, as
it loads); the result names the flags left out (``refused_flags``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent


def keys_of(row: dict) -> list[str]:
    """The row's MaxText keys as ``KEY=VALUE`` pairs (lists as MaxText's command line writes them: ``[relu]``)."""
    written = {True: "true", False: "false"}
    return [
        f"{key}={'[' + ','.join(value) + ']' if isinstance(value, list) else written.get(value, value)}"
        for key, value in row["maxtext"].items()
    ]


def row_of(name: str) -> dict:
    return next(row for row in json.loads((HERE / "published.json").read_text())["rows"] if row["name"] == name)


def compile_row(name: str) -> None:
    """In the child: compile the row under this process's LIBTPU_INIT_ARGS, keeping its program as it is predicted."""
    from explorer.compile.xla_compile import compile_for_target
    from explorer.hardware.targets import parse_target
    from explorer.layout import parse_layout
    from explorer.models import maxtext
    from explorer.predict import step_model

    row = row_of(name)
    stem = HERE / name
    with_prediction = step_model.with_prediction

    def keep(estimate, text, chip, collectives=()):
        with gzip.open(f"{stem}.hlo.txt.gz", "wt") as handle:  # kept before predicting: the compile took minutes
            handle.write(text)
        pathlib.Path(f"{stem}.collectives.json").write_text(json.dumps([dataclasses.asdict(c) for c in collectives]))
        return with_prediction(estimate, text, chip, collectives)

    step_model.with_prediction = keep
    layout = parse_layout(maxtext.layout_data(keys_of(row), row["target"]))
    result = compile_for_target(layout, parse_target(row["target"]))
    pathlib.Path(f"{stem}.result.json").write_text(json.dumps(result.to_json(), indent=1))


def main(name: str) -> None:
    """Compile the row in a child, leaving out each flag libtpu refuses, then name them in its result."""
    from explorer.compile.target_compile import left_out, refused_flag
    from explorer.hardware.devices import child_environment
    from explorer.hardware.targets import parse_target

    row = row_of(name)
    flags, refused = {"LIBTPU_INIT_ARGS": row.get("libtpu_init_args", "")}, []
    while True:
        env = child_environment(parse_target(row["target"]), flags) | {"PYTHONPATH": str(HERE.parents[2])}
        done = subprocess.run(
            [sys.executable, "-m", "tests.data.maxtext_published.record", name, "--child"], env=env, capture_output=True, text=True
        )
        lines = done.stderr.splitlines()
        if done.returncode == 0:
            break
        found = refused_flag(lines[-50:], flags)
        if found is None or not set(found.value.split()) <= set(flags[found.field].split()):
            sys.exit("\n".join(lines[-40:]))
        print(f"left out: {found}", file=sys.stderr, flush=True)
        flags = {found.field: " ".join(w for w in flags[found.field].split() if w not in found.value.split())}
        refused.append(left_out(found))
    path = HERE / f"{name}.result.json"
    result = json.loads(path.read_text())
    path.write_text(json.dumps(result | {"refused_flags": refused}, indent=1))


if __name__ == "__main__":
    if sys.argv[2:] == ["--child"]:
        compile_row(sys.argv[1])
    else:
        main(sys.argv[1])
