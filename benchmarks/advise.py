"""The layout advisor on Llama-2-7B shapes for a v5p-128 (64 chips), against three hand-written expert layouts.

Prints stage 1's time for every candidate (goal: under 10 s), the whole search's wall time and
number of compiles (goal: under 15 minutes on a 2-core machine), the ranked table, and the three
expert layouts compiled with ``python -m explorer compile`` (FSDP over all 64 chips; FSDP 16 x
tensor 4; data 4 x FSDP 16), so the advice's XLA-verified step bound can be set beside theirs.

The model: Llama-2-7B's dimensions (32 scanned layers, d_model 4096, 32 heads, MLP 11008 gated,
vocab 32000), bf16, batch 64 (so that an FSDP axis of 64 divides it) of 2048 tokens. The disk
cache is a fresh folder unless ``--cache`` names one.

    python benchmarks/advise.py [--compiles 4] [--cache DIR] [--target v5p-128]
    python benchmarks/advise.py --case t5 [--compiles 4]   # T5X's T5 (tests/external) on a v5litepod-8
    python benchmarks/advise.py --case llama-v5e [--compiles 4]   # Llama-2-7B shapes on a v5litepod-64 (remat needed)
    python benchmarks/advise.py --case llama13b-remat [--compiles 4]   # Llama-2-13B shapes on a v5litepod-256 (remat needed)
    python benchmarks/advise.py --target h100:8x8 [--compiles 4]   # the same Llama-2-7B shapes on 64 H100s (8 hosts of 8)

``--target h100:8x8`` (or ``--case gpu``, the same): the Llama-2-7B shapes on an NVIDIA GPU cluster of 8
hosts of 8 H100s (JAX's CUDA plugin, no GPU), against three layouts written for it: FSDP over all 64
GPUs; FSDP 8 over the hosts x tensor 8 inside each (NVLink), the user's own layout; data 8 over the
hosts x FSDP 8 inside each. A GPU's memory is judged as ``explorer compile`` judges it (JAX's 75%).

``--case maxtext-moe``: MaxText's Mixtral decoder layer (``tests/external/maxtext``: ``moe.RoutedMoE``'s dense path, 32
experts, top-2, capacity factor 1.25, scanned) scaled so the search runs here: 8 layers, d_model 2048, expert MLP 4096
(SwiGLU), 16 query / 8 kv heads of 128, bf16, batch 256 x 256 tokens (a short sequence: the dense dispatch and combine
cost grows with the sequence, ``2 x tokens x d_model x capacity x experts``, 2% of the experts' flops at 256), on a
v5p-64 (32 chips) with MaxText's base.yml rules on its 12-axis mesh (the layers take the layout's mesh:
``mesh_shape="context"``). Experts: FSDP 32 (base.yml's default ``ici_fsdp_parallelism=-1``, also the user's layout
the search starts from), FSDP 4 x expert 8 (expert parallelism, FSDP within an expert), FSDP 8 x tensor 4 (Megatron
within the experts' MLP: a quarter of each expert's weights per chip without the expert all-to-all).

``--case llama-v5e``: the same Llama-2-7B shapes (batch 64 x 2048) on a **v5litepod-64** (64 v5e chips of 16 GiB, a
16x4 slice, 197 TFLOP/s and 819 GB/s each, against v5p's 95 GiB, 459 TFLOP/s and 2.8 TB/s). Nothing fits there
without remat (on v5p the smallest peak of the three experts without it was 41.7 GiB), so the experts write remat:
FSDP 64 with full remat (MaxText's default on v5e); FSDP 64 with ``dots_with_no_batch_dims_saveable`` (keep every
projection's output, about 5.9 GB over 32 layers at 2048 tokens per chip, recompute only attention: less recompute
where it fits); FSDP 16 x tensor 4 with full remat (the v5p case's own layout, remat added; the user's own here).

``--case llama13b-remat``: Llama-2-13B shapes (40 scanned layers, d_model 5120, 40 heads of 128, MLP 13824 gated,
vocab 32000, bf16), global batch 256 x 2048 tokens on a **v5litepod-256** (a 16x16 slice of 16 GiB chips): the
memory-bound case, where no layout fits without remat (one sequence per chip keeps about 1 GB of attention scores a
layer). Experts, each with remat as one would write it: FSDP 256 with full remat (MaxText's v5e default); FSDP 256 with
``dots_with_no_batch_dims_saveable`` (projections kept, about 8.7 GB over 40 layers at 2048 tokens per chip); FSDP 64
x tensor 4 with full remat (Megatron within 4 chips; the user's own). Not ``dots_saveable`` with tensor 4: it keeps the
attention scores as well (10 heads x 2048² x 2 B x 4 sequences = 335 MB a layer, 13 GB over 40: over 16 GiB).

``--case multislice``: the same Llama-2-7B shapes, batch 128 x 2048, on **2xv5p-128** (two v5p slices of 64 chips
joined by the data-center network; docs/multislice.md), against three layouts written for it: data 2 across the slices x
FSDP 64 inside each (MaxText's default split: data parallelism over the DCN); FSDP 128 across everything (the FSDP
axis spans both slices, ``mesh.dcn``); data 2 across the slices x FSDP 16 x tensor 4 inside (the user's own).

``--case t5``: T5X's T5 network from ``tests/external/t5x_t5`` (a production codebase's model,
T5.1.1-style, 4+4 layers, d_model 512, 8 heads, MLP 1024, vocab 32128, batch 32 x 128 tokens) on
an 8-chip v5e slice, with T5X's own rules as the user's layout and three hand-written layouts
(FSDP 8; FSDP 4 x tensor 2; data 2 x FSDP 4).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.models.options import SIZE_PRESETS  # noqa: E402  (the Llama-2-7B shapes: one home)
from explorer.models.maxtext import MESH_AXES  # noqa: E402  (base.yml's mesh_axes: one home; MaxText itself not needed)

OPTIONS = {**SIZE_PRESETS["llama2-7b"], "batch": 64, "seq_len": 2048, "scan": True, "dtype": "bfloat16"}
TENSOR = [["mlp", "tensor"], ["heads", "tensor"], ["kv_heads", "tensor"], ["vocab", "tensor"]]
EXPERTS = {
    "expert-fsdp64": {"mesh": {"shape": [64], "axes": ["fsdp"]}, "rules": [["batch", "fsdp"], ["embed", "fsdp"], ["layer", None]]},
    "expert-fsdp16-tensor4": {
        "mesh": {"shape": [16, 4], "axes": ["fsdp", "tensor"]},
        "rules": [["batch", "fsdp"], ["embed", "fsdp"], *TENSOR, ["layer", None]],
    },
    "expert-data4-fsdp16": {
        "mesh": {"shape": [4, 16], "axes": ["data", "fsdp"]},
        "rules": [["batch", ["data", "fsdp"]], ["embed", "fsdp"], ["layer", None]],
    },
}

V5E_EXPERTS = {  # Llama-2-7B shapes on v5litepod-64: nothing fits without remat
    "expert-fsdp64-full": {"mesh": {"shape": [64], "axes": ["fsdp"]}, "rules": EXPERTS["expert-fsdp64"]["rules"], "remat": "full"},
    "expert-fsdp64-dots-no-batch": {
        "mesh": {"shape": [64], "axes": ["fsdp"]},
        "rules": EXPERTS["expert-fsdp64"]["rules"],
        "remat": "dots_with_no_batch_dims_saveable",
    },
    "expert-fsdp16-tensor4-full": {**EXPERTS["expert-fsdp16-tensor4"], "remat": "full"},
}
L13_OPTIONS = {**OPTIONS, "batch": 256, "layers": 40, "d_model": 5120, "heads": 40, "kv_heads": 40, "mlp_dim": 13824}
L13_EXPERTS = {  # Llama-2-13B shapes, batch 256, on v5litepod-256: nothing fits without remat
    "expert-fsdp256-full": {"mesh": {"shape": [256], "axes": ["fsdp"]}, "rules": EXPERTS["expert-fsdp64"]["rules"], "remat": "full"},
    "expert-fsdp256-dots-no-batch": {
        "mesh": {"shape": [256], "axes": ["fsdp"]},
        "rules": EXPERTS["expert-fsdp64"]["rules"],
        "remat": "dots_with_no_batch_dims_saveable",
    },
    "expert-fsdp64-tensor4-full": {
        **EXPERTS["expert-fsdp16-tensor4"],
        "mesh": {"shape": [64, 4], "axes": ["fsdp", "tensor"]},
        "remat": "full",
    },
}

T5_FACTORY = "tests.external.factories:make_t5x_t5"
T5_OPTIONS = {
    "num_encoder_layers": 4,
    "num_decoder_layers": 4,
    "emb_dim": 512,
    "num_heads": 8,
    "head_dim": 64,
    "mlp_dim": 1024,
    "vocab_size": 32128,
    "batch": 32,
    "encoder_length": 128,
    "decoder_length": 128,
}
T5_TENSOR = [["mlp", "tensor"], ["heads", "tensor"], ["joined_kv", "tensor"], ["vocab", "tensor"]]
T5_EXPERTS = {
    "t5x-own-rules": {
        "mesh": {"shape": [4, 2], "axes": ["data", "model"]},  # T5X's standard_logical_axis_rules
        "rules": [
            ["batch", "data"],
            ["vocab", "model"],
            ["mlp", "model"],
            ["heads", "model"],
            ["joined_kv", "model"],
            ["kv", None],
            ["embed", None],
            ["length", None],
        ],
    },
    "expert-fsdp8": {"mesh": {"shape": [8], "axes": ["fsdp"]}, "rules": [["batch", "fsdp"], ["embed", "fsdp"]]},
    "expert-fsdp4-tensor2": {
        "mesh": {"shape": [4, 2], "axes": ["fsdp", "tensor"]},
        "rules": [["batch", "fsdp"], ["embed", "fsdp"], *T5_TENSOR],
    },
    "expert-data2-fsdp4": {"mesh": {"shape": [2, 4], "axes": ["data", "fsdp"]}, "rules": [["batch", ["data", "fsdp"]], ["embed", "fsdp"]]},
}
MULTISLICE_OPTIONS = {**OPTIONS, "batch": 128}
MULTISLICE_EXPERTS = {  # two v5p slices of 64 chips: which axis spans the slices is mesh.dcn (default: the outermost)
    "expert-data2-fsdp64": {
        "mesh": {"shape": [2, 64], "axes": ["data", "fsdp"], "dcn": [2, 1]},
        "rules": [["batch", ["data", "fsdp"]], ["embed", "fsdp"], ["layer", None]],
    },
    "expert-fsdp128": {"mesh": {"shape": [128], "axes": ["fsdp"], "dcn": [2]}, "rules": EXPERTS["expert-fsdp64"]["rules"]},
    "expert-data2-fsdp16-tensor4": {
        "mesh": {"shape": [2, 16, 4], "axes": ["data", "fsdp", "tensor"], "dcn": [2, 1, 1]},
        "rules": [["batch", ["data", "fsdp"]], ["embed", "fsdp"], *TENSOR, ["layer", None]],
    },
}
GPU_TARGET = "h100:8x8"
GPU_EXPERTS = {  # 8 hosts of 8 GPUs: the device order is host-major, so the first mesh axis spans the hosts
    "expert-fsdp64": EXPERTS["expert-fsdp64"],
    "expert-fsdp8-tensor8": {
        "mesh": {"shape": [8, 8], "axes": ["fsdp", "tensor"]},  # FSDP over hosts, tensor inside (NVLink)
        "rules": [["batch", "fsdp"], ["embed", "fsdp"], *TENSOR, ["layer", None]],
    },
    "expert-data8-fsdp8": {
        "mesh": {"shape": [8, 8], "axes": ["data", "fsdp"]},  # data over hosts, FSDP inside
        "rules": [["batch", ["data", "fsdp"]], ["embed", "fsdp"], ["layer", None]],
    },
}
MOE_FACTORY = "tests.external.factories:make_maxtext_moe"
MOE_OPTIONS = {
    "num_experts": 32,
    "num_experts_per_tok": 2,
    "capacity_factor": 1.25,
    "scan_layers": True,
    "num_decoder_layers": 8,
    "emb_dim": 2048,
    "mlp_dim": 4096,
    "num_heads": 16,
    "num_kv_heads": 8,
    "head_dim": 128,
    "batch": 256,
    "length": 256,
    "dtype": "bfloat16",
    "remat_policy": "none",
    "mesh_shape": "context",
}


def maxtext_mesh(**sizes: int) -> dict:
    return {"shape": [sizes.get(axis, 1) for axis in MESH_AXES], "axes": list(MESH_AXES)}


MOE_EXPERTS = {
    "maxtext-fsdp32": {"mesh": maxtext_mesh(fsdp=32)},
    "maxtext-fsdp4-expert8": {"mesh": maxtext_mesh(fsdp=4, expert=8)},
    "maxtext-fsdp8-tensor4": {"mesh": maxtext_mesh(fsdp=8, tensor=4)},
}
CASE = "llama"


def layout(name: str) -> dict:
    if CASE == "t5":
        return {"name": name, **T5_EXPERTS[name], "model": {"name": T5_FACTORY, "options": dict(T5_OPTIONS)}}
    if CASE == "maxtext-moe":
        from tests.external.factories import maxtext_rules

        return {"name": name, **MOE_EXPERTS[name], "rules": maxtext_rules(), "model": {"name": MOE_FACTORY, "options": dict(MOE_OPTIONS)}}
    expert = dict(experts()[name])
    options = {**{"llama13b-remat": L13_OPTIONS, "multislice": MULTISLICE_OPTIONS}.get(CASE, OPTIONS)}
    if "remat" in expert:
        options["remat"] = expert.pop("remat")
    return {"name": name, **expert, "model": {"name": "transformer", "options": options}}


def experts() -> dict:
    return {
        "t5": T5_EXPERTS,
        "gpu": GPU_EXPERTS,
        "maxtext-moe": MOE_EXPERTS,
        "llama-v5e": V5E_EXPERTS,
        "llama13b-remat": L13_EXPERTS,
        "multislice": MULTISLICE_EXPERTS,
    }.get(CASE, EXPERTS)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiles", type=int, default=4, help="as the CLI's advise (default 4)")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--target", default=None)
    parser.add_argument(
        "--case", choices=("llama", "t5", "gpu", "maxtext-moe", "llama-v5e", "llama13b-remat", "multislice"), default="llama"
    )
    parser.add_argument("--shortcut", choices=("auto", "on", "off"), default="auto", help="the depth shortcut (advise --depth-shortcut)")
    args = parser.parse_args()
    global CASE
    from explorer.hardware.targets import parse_target

    CASE = "gpu" if args.case == "gpu" or (args.case == "llama" and args.target and parse_target(args.target).is_gpu) else args.case
    args.target = args.target or {
        "t5": "v5litepod-8",
        "gpu": GPU_TARGET,
        "maxtext-moe": "v5p-64",
        "llama-v5e": "v5litepod-64",
        "llama13b-remat": "v5litepod-256",
        "multislice": "2xv5p-128",
    }.get(CASE, "v5p-128")
    if CASE in ("t5", "maxtext-moe"):
        os.environ["EXPLORER_ALLOWED_FACTORIES"] = T5_FACTORY if CASE == "t5" else MOE_FACTORY
    os.environ["EXPLORER_CACHE_DIR"] = args.cache or tempfile.mkdtemp(prefix="explorer-advise-bench-")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from explorer.hardware import devices

    devices.configure(8)
    from explorer import advisor
    from explorer.layout import parse_layout
    from explorer.formats import human_bytes, plain_table

    own = parse_layout(
        layout(
            {
                "t5": "t5x-own-rules",
                "gpu": "expert-fsdp8-tensor8",
                "maxtext-moe": "maxtext-fsdp32",
                "llama-v5e": "expert-fsdp16-tensor4-full",
                "llama13b-remat": "expert-fsdp64-tensor4-full",
                "multislice": "expert-data2-fsdp16-tensor4",
            }.get(CASE, "expert-fsdp16-tensor4")
        )
    )
    start = time.perf_counter()
    search = advisor.stage1(own, args.target)
    print(f"stage 1: {len(search.candidates)} candidates analyzed, {search.refused} refused, in {search.stage1_s:.2f} s (goal < 10 s)")
    again = advisor.stage1(own, args.target)
    print(f"stage 1 again (model traced, in memory): {again.stage1_s:.2f} s (not counted in the whole search below)")
    shown = [None]

    def progress(stage: str, elapsed: float) -> None:
        if stage != shown[0]:
            print(f"  {stage} ({elapsed:.0f} s)", file=sys.stderr, flush=True)
            shown[0] = stage

    advisor.stage2(search, args.compiles, on_progress=progress, shortcut={"auto": None, "on": True, "off": False}[args.shortcut])
    whole = time.perf_counter() - start - again.stage1_s
    print(
        f"whole search: {whole:.0f} s, {search.compiles} compiles ({search.cached_compiles} cached, {search.full_compiles} full after "
        f"extrapolation) (goal < 900 s)"
    )
    unfit = [c.layout.name for c in search.candidates if c.verified and not c.extrapolated and c.fits is False]
    print(f"compiles spent on layouts that did not fit: {len(unfit)}" + (f" ({', '.join(unfit)})" if unfit else ""))
    if search.depth is not None:
        print(
            "depth shortcut:",
            "used, options " + ", ".join(search.depth.options) if search.depth.usable else f"not used: {search.depth.why}",
        )
    print(advisor.verdict_text(search))
    print(advisor.target_text(search.target))
    print(
        plain_table(
            advisor.table_rows(search)[:12],
            (
                "rank",
                "layout",
                "predicted step",
                "mesh",
                "rules",
                "remat",
                "microbatches",
                "state / device",
                "XLA peak / device",
                "fits",
                "step ≥",
                "bound",
                "MFU ceiling",
                "placement",
                "largest collective",
                "extrapolated figures",
            ),
        )
    )
    print("\nstage 1's estimate beside XLA's roofline, for the compiled candidates (ratio = estimate / XLA):")
    rows = []
    for c in search.ranked():
        if not c.verified or not c.compiled.estimate:
            continue
        x, e = c.compiled.estimate, c.estimate
        ratio = lambda a, b: f"{a / b:.2f}" if b else "-"
        rows.append(
            {
                "layout": c.layout.name + (" (extrapolated)" if c.extrapolated else ""),
                "estimate c/m/k ms": f"{e.compute_s * 1e3:.3g} / {e.memory_s * 1e3:.3g} / {e.collective_s * 1e3:.3g}",
                "XLA c/m/k ms": f"{x.compute_s * 1e3:.3g} / {x.memory_s * 1e3:.3g} / {x.collective_s * 1e3:.3g}",
                "step est / XLA": f"{e.step_s * 1e3:.3g} / {x.step_s * 1e3:.3g} ms = {e.step_s / x.step_s:.2f}",
                "ratios c/m/k": f"{ratio(e.compute_s, x.compute_s)} / {ratio(e.memory_s, x.memory_s)} / {ratio(e.collective_s, x.collective_s)}",
                "est. state + acts / XLA peak": f"{human_bytes(c.state_bytes + c.activation_bytes)} / {human_bytes(c.peak_bytes or 0)}"
                + ("" if c.fits else " (does not fit)"),
            }
        )
    print(
        plain_table(rows, ("layout", "estimate c/m/k ms", "XLA c/m/k ms", "step est / XLA", "ratios c/m/k", "est. state + acts / XLA peak"))
    )
    refused = [c for c in search.candidates if c.refused]
    for c in refused:
        print(
            f"XLA refused {c.layout.name} (E1000): peak {human_bytes(c.peak_bytes or 0)}, "
            f"stage 1 had state {human_bytes(c.state_bytes)} + activations {human_bytes(c.activation_bytes)}"
        )
    print("calibration after the search (XLA / stage 1 per term):", {k: round(v, 2) for k, v in search.calibration.items()})
    print(advisor.agreement_text(search) or "no compile: no agreement to say")
    for c in search.ranked():
        if c.extrapolation_error:
            print(
                f"extrapolation error for {c.layout.name} (extrapolated / full):",
                {k: round(v, 5) for k, v in c.extrapolation_error.items() if v},
            )
    print("\nexpert layouts, each compiled with `python -m explorer compile`:")
    rows = []
    for name in experts():
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(layout(name), handle)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "explorer", "compile", handle.name, "--target", args.target, "--json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=dict(os.environ),
        )
        if done.returncode:
            print(f"  {name}: {done.stderr.strip().splitlines()[-1]}")
            continue
        result = json.loads(done.stdout)
        estimate = result["estimate"] or {}
        rows.append(
            {
                "layout": name,
                "XLA peak / device": human_bytes(result["memory"]["peak_bytes"]),
                "fits": "yes" if result["fits"] else "NO",
                "predicted step": f"{(estimate.get('predicted_s') or float('nan')) * 1e3:.4g} ms",
                "step ≥": f"{estimate.get('step_s', float('nan')) * 1e3:.4g} ms",
                "bound": estimate.get("bound", "-"),
                "MFU ceiling": f"{estimate.get('mfu_ceiling', 0):.0%}",
                "compile": f"{time.perf_counter() - began:.0f} s" + (" (cached)" if result["cached"] else ""),
            }
        )
    print(plain_table(rows, ("layout", "XLA peak / device", "fits", "predicted step", "step ≥", "bound", "MFU ceiling", "compile")))


if __name__ == "__main__":
    main()
