"""The advisor on a model that does not fit one slice's memory, on several TPU slices (issue 43's held-out check):
its pick against the best of hand-written layouts, FSDP across the slices and pipelines across the slices, each by
the tool's own compiled prediction (``compile_target``'s ``predicted_s``: XLA's program, kernel by kernel).

The model: the built-in transformer with Llama-2-70B's widths (d_model 8192, 64 query heads and 8 key/value heads of
128, MLP 28672 gated, vocab 32000), 16 scanned layers (14.2 B parameters), bf16, batch 16 x 128 tokens (few tokens:
the activations small beside the state). Its state (parameters and Adam's two moments) is about 79 GiB: over the
64 GiB of one 4-chip v5e slice (16 GiB a chip), so the state must span the slices. The target: ``4xv5e:2x2`` (four
slices of 2x2 v5e chips joined by the data-center network). Not two slices: a training step's peak is about 2.5x its
state per device (gradients, the optimizer's update), so a state over one slice's memory spread over two slices
cannot fit under any layout. The layouts written by hand, each with full remat as MaxText writes it on v5e:

- ``fsdp16-across-slices``: FSDP over all 16 chips, the axis spanning the slices (``mesh.dcn``): every layer's
  parameters all-gathered over the DCN, forward and backward;
- ``stage4-fsdp4-across-slices``: four pipeline stages, one per slice (the stage axis over the DCN), FSDP 4 inside
  each slice, 4 microbatches (a bubble of 3/7 by MaxText's formula): only activations cross the DCN;
- ``stage4-tensor4-across-slices``: the same stages, tensor parallelism 4 inside each slice.

    python benchmarks/advise_pipeline.py [--compiles 4] [--cache DIR] [--target 4xv5e:2x2]

Prints the advisor's table, stage 1's agreement with the compiled predictions, the explanation, the hand-written
layouts' compiled predictions and the pick over the best of them (the check: at most 1.05). About 40 minutes on two
heavily loaded cores (each 16-chip compile of this model takes minutes).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OPTIONS = {
    "batch": 16,
    "seq_len": 128,
    "layers": 16,
    "d_model": 8192,
    "heads": 64,
    "kv_heads": 8,
    "head_dim": 128,
    "mlp_dim": 28672,
    "vocab": 32000,
    "scan": True,
    "dtype": "bfloat16",
}
FSDP_RULES = [["batch", "fsdp"], ["embed", "fsdp"], ["layer", None]]
TENSOR_RULES = [["heads", "tensor"], ["kv_heads", "tensor"], ["mlp", "tensor"], ["vocab", "tensor"], ["layer", None]]
HAND_WRITTEN = {  # remat as an expert writes it where the state leaves little room (MaxText's default on v5e: full)
    "fsdp16-across-slices": {"mesh": {"shape": [16], "axes": ["fsdp"], "dcn": [4]}, "rules": FSDP_RULES, "options": {"remat": "full"}},
    "stage4-fsdp4-across-slices": {
        "mesh": {"shape": [4, 4], "axes": ["stage", "fsdp"], "dcn": [4, 1]},
        "rules": [["stage", "stage"], *FSDP_RULES],
        "options": {"pipeline_stages": 4, "pipeline_microbatches": 4, "remat": "full"},
    },
    "stage4-tensor4-across-slices": {
        "mesh": {"shape": [4, 4], "axes": ["stage", "tensor"], "dcn": [4, 1]},
        "rules": [["stage", "stage"], *TENSOR_RULES],
        "options": {"pipeline_stages": 4, "pipeline_microbatches": 4, "remat": "full"},
    },
}
OWN = "fsdp16-across-slices"  # the layout the search starts from (one candidate among the others)


def hand_written(name: str, options: dict | None = None) -> dict:
    """One hand-written layout in the file format (``options``: the model's, default ``OPTIONS``)."""
    spec = HAND_WRITTEN[name]
    model = {"name": "transformer", "options": {**(options or OPTIONS), **spec["options"]}}
    return {"name": name, "mesh": spec["mesh"], "rules": spec["rules"], "model": model}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiles", type=int, default=4, help="as the CLI's advise (default 4)")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--target", default="4xv5e:2x2")
    args = parser.parse_args()
    os.environ["EXPLORER_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="explorer-advise-pipeline-")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from explorer.hardware import devices

    devices.configure(16)
    from explorer import advisor
    from explorer.compile.target_compile import compile_target
    from explorer.formats import human_bytes, plain_table
    from explorer.layout import parse_layout

    start = time.perf_counter()
    search = advisor.stage1(parse_layout(hand_written(OWN)), args.target)
    pipelined = sum(1 for c in search.candidates if "stage" in c.layout.mesh.axes)
    print(f"stage 1: {len(search.candidates)} candidates ({pipelined} pipelined), {search.refused} refused, {search.stage1_s:.1f} s")
    advisor.stage2(search, args.compiles, on_progress=lambda stage, s: print(f"  {stage} ({s:.0f} s)", file=sys.stderr, flush=True))
    print(f"whole search: {time.perf_counter() - start:.0f} s, {search.compiles} compiles")
    print(advisor.search_text(search))
    print("\nthe hand-written layouts, each compiled for the target:")
    rows, best = [], None
    for name in HAND_WRITTEN:
        result, cached = compile_target(parse_layout(hand_written(name)), args.target)
        predicted = result.estimate.predicted_s if result.estimate else None
        if result.fits and predicted and (best is None or predicted < best[1]):
            best = (name, predicted)
        bubble = result.bubble
        rows.append(
            {
                "layout": name,
                "XLA peak / device": human_bytes(result.memory.peak_bytes),
                "fits": "yes" if result.fits else "NO",
                "predicted step": f"{predicted * 1e3:.4g} ms" if predicted else "-",
                "bubble (estimate)": f"{bubble.bubble_s * 1e3:.3g} ms, {bubble.share:.0%}" if bubble else "-",
                "cached": "yes" if cached else "no",
            }
        )
    print(plain_table(rows, ("layout", "XLA peak / device", "fits", "predicted step", "bubble (estimate)", "cached")))
    pick = search.ranked()[0]
    print(f"\nthe advisor's pick: {pick.layout.name}, {'compiled' if pick.verified else 'NOT compiled'}, {pick.predicted_s * 1e3:.4g} ms")
    if best:
        print(f"best hand-written: {best[0]}, {best[1] * 1e3:.4g} ms; pick / best = {pick.predicted_s / best[1]:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
