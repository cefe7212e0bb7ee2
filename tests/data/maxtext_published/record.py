"""Record MaxText's own program for a published row (``published.json``) compiled for its slice: the optimized HLO
text and the costed collectives the step model predicts from, and the compile's JSON result (MaxText only here).

    EXPLORER_CACHE_DIR=/tmp/x /work/venvs/<with maxtext>/bin/python -m tests.data.maxtext_published.record v5p-32b-1

writes ``tests/data/maxtext_published/v5p-32b-1.hlo.txt.gz``, ``.collectives.json`` and ``.result.json``: the row's
``maxtext`` keys through ``explorer compile --maxtext KEYS --target TARGET``'s path (``maxtext.layout_data``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).parent


def keys_of(row: dict) -> list[str]:
    """The row's MaxText keys as ``KEY=VALUE`` pairs (lists as MaxText's command line writes them: ``[relu]``)."""
    written = {True: "true", False: "false"}
    return [
        f"{key}={'[' + ','.join(value) + ']' if isinstance(value, list) else written.get(value, value)}"
        for key, value in row["maxtext"].items()
    ]


def main(name: str) -> None:
    row = next(row for row in json.loads((HERE / "published.json").read_text())["rows"] if row["name"] == name)
    if row.get("libtpu_init_args"):  # what the run gave libtpu and the compile needs (read when libtpu loads)
        os.environ["LIBTPU_INIT_ARGS"] = row["libtpu_init_args"]
    from explorer.compile.xla_compile import compile_for_target
    from explorer.hardware.targets import parse_target
    from explorer.layout import parse_layout
    from explorer.models import maxtext
    from explorer.predict import step_model

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


if __name__ == "__main__":
    main(sys.argv[1])
