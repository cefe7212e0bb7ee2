"""Record the built-in transformer at MaxText's v5e shapes compiled for v5e-256 slices: the optimized HLO text and the
costed collectives the step model predicts from, and the compile's JSON result.

    EXPLORER_CACHE_DIR=/tmp/x .venv/bin/python -m tests.data.maxtext_v5e.record 16b 1

writes ``tests/data/maxtext_v5e/16b-1.hlo.txt.gz``, ``16b-1.collectives.json`` and ``16b-1.result.json``. The layout is
``layout(model, slices)``: the shapes of ``/work/shared/measurements/maxtext-v5e-published.json``'s ``model_shapes``
(MaxText's ``global_parameter_scale``), FSDP over a slice's 256 chips, data parallel across slices.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).parent
# global_parameter_scale 16, 32, 64, 128: width, layers, per-device batch, heads, MLP (MaxText's get_individual_scales)
SHAPES = {
    "16b": dict(d_model=4096, layers=32, batch=6, heads=64, mlp_dim=28672),
    "32b": dict(d_model=8192, layers=32, batch=4, heads=64, mlp_dim=28672),
    "64b": dict(d_model=8192, layers=64, batch=2, heads=64, mlp_dim=28672),
    "128b": dict(d_model=8192, layers=64, batch=1, heads=128, mlp_dim=57344),
}


def layout(model: str, slices: int) -> dict:
    s = SHAPES[model]
    options = dict(
        batch=s["batch"] * 256 * slices,
        seq_len=2048,
        layers=s["layers"],
        d_model=s["d_model"],
        heads=s["heads"],
        kv_heads=s["heads"],
        head_dim=128,
        mlp_dim=s["mlp_dim"],
        vocab=32000,
        gated_mlp=True,
        learned_positions=False,
        scan=True,
        dtype="bfloat16",
        remat="full",
    )
    if slices == 1:
        mesh, rules = {"shape": [256], "axes": ["fsdp"]}, [["batch", "fsdp"], ["embed", "fsdp"]]
    else:
        mesh, rules = {"shape": [slices, 256], "axes": ["data", "fsdp"]}, [["batch", ["data", "fsdp"]], ["embed", "fsdp"]]
    return {"name": f"maxtext-{model}-{slices}x", "mesh": mesh, "rules": rules, "model": {"name": "transformer", "options": options}}


def main(model: str, slices: int) -> None:
    from explorer.predict import step_model
    from explorer.layout import parse_layout
    from explorer.hardware.targets import parse_target
    from explorer.compile.xla_compile import compile_for_target

    seen = {}
    stem = HERE / f"{model}-{slices}"
    with_prediction = step_model.with_prediction

    def keep(estimate, text, chip, collectives=()):
        seen["text"], seen["collectives"] = text, [dataclasses.asdict(c) for c in collectives]
        with gzip.open(f"{stem}.hlo.txt.gz", "wt") as handle:  # kept before predicting: the compile took minutes
            handle.write(text)
        pathlib.Path(f"{stem}.collectives.json").write_text(json.dumps(seen["collectives"]))
        return with_prediction(estimate, text, chip, collectives)

    step_model.with_prediction = keep
    target = parse_target("v5e-256" if slices == 1 else f"{slices}xv5e-256")
    result = compile_for_target(parse_layout(layout(model, slices)), target)
    pathlib.Path(f"{stem}.result.json").write_text(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
