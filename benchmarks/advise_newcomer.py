"""The newcomer's 7B on a v5e-8 (issue 56): ``python -m explorer advise`` as a person runs it, timed end to end.

The model: the built-in transformer at Llama-2-7B's sizes (the ``llama2-7b`` preset: 32 layers of width 4096, 32 heads,
MLP 11008 gated, vocabulary 32000, 16 sequences of 4096 tokens), as the preset gives it (float32, layers not scanned,
no remat, no microbatches), written data parallel only (mesh ``data 8``, rules ``batch: data``): its state alone is
75 GiB a chip, nothing as written fits the 15.75 GiB XLA lets a v5e program use. Before issue 56 the command ran 28
minutes and headed its answer with a layout it never compiled.

Each run is the whole command in a fresh process with an empty compile cache (a new folder), the default settings (4
compiles, the memory search's 4, larger slices), as the issue's newcomer ran it. Printed per run: the wall time, the
compiles, the advice (the verdict's first line) and the longest the progress on stderr stayed silent; then the median
wall time over the runs (goal: under 600 s on this 2-core machine). ``--experts`` also compiles the layouts an
engineer would write for it (``explorer compile``, each its own process), to set the advice's predicted step beside.

    python benchmarks/advise_newcomer.py [--runs 2] [--target v5e-8] [--experts]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.models.options import SIZE_PRESETS  # noqa: E402  (the Llama-2-7B sizes: one home)

OPTIONS = {k: v for k, v in SIZE_PRESETS["llama2-7b"].items()}  # float32, not scanned: the preset as it is
LAYOUT = {
    "name": "mine",
    "mesh": {"shape": [8], "axes": ["data"]},
    "rules": [["batch", "data"]],
    "model": {"name": "transformer", "options": OPTIONS},
}
EXPERTS = {  # what a person would try for a 7B that does not fit: ZeRO-3 with full remat, and Megatron inside
    "expert-fsdp8-full-mb2": (
        {"shape": [8], "axes": ["fsdp"]},
        [["batch", "fsdp"], ["embed", "fsdp"]],
        {"remat": "full", "microbatches": 2},
    ),
    "expert-tensor8-full-mb16": (
        {"shape": [8], "axes": ["tensor"]},
        [["heads", "tensor"], ["kv_heads", "tensor"], ["mlp", "tensor"], ["vocab", "tensor"]],
        {"remat": "full", "microbatches": 16},
    ),
}


def run_once(path: str, target: str) -> dict:
    """One ``advise`` in a fresh process and cache: wall time, its JSON and the longest silence of its progress."""
    env = dict(os.environ, EXPLORER_CACHE_DIR=tempfile.mkdtemp(prefix="explorer-newcomer-"))
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "explorer", "advise", path, "--target", target],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    last, silence, lines = start, 0.0, []
    for line in child.stderr:  # the progress, as the person sees it
        now = time.perf_counter()
        silence, last = max(silence, now - last), now
        lines.append(line.rstrip())
    out = child.stdout.read()
    child.wait()
    wall = time.perf_counter() - start
    return {"wall_s": wall, "text": out, "silence_s": max(silence, time.perf_counter() - last), "progress": lines, "rc": child.returncode}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--target", default="v5e-8")
    parser.add_argument("--experts", action="store_true", help="compile the expert layouts too (minutes each)")
    args = parser.parse_args()
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(LAYOUT, handle)
    walls = []
    for number in range(1, args.runs + 1):
        found = run_once(handle.name, args.target)
        walls.append(found["wall_s"])
        lines = found["text"].splitlines()
        print(f"run {number}: {found['wall_s']:.0f} s (exit {found['rc']}), progress silent at most {found['silence_s']:.0f} s")
        print("  " + "\n  ".join(lines[:4] + [line for line in lines if line.startswith(("memory search", "compile failed"))]))
        print("  progress:\n    " + "\n    ".join(found["progress"][-40:]))
    print(
        f"median wall time over {len(walls)} run(s): {statistics.median(walls):.0f} s (goal < 600 s); each: {', '.join(f'{w:.0f} s' for w in walls)}"
    )
    if not args.experts:
        return
    for name, (mesh, rules, memory) in EXPERTS.items():
        expert = {"name": name, "mesh": mesh, "rules": rules, "model": {"name": "transformer", "options": {**OPTIONS, **memory}}}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
            json.dump(expert, file)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "explorer", "compile", file.name, "--target", args.target, "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=dict(os.environ, EXPLORER_CACHE_DIR=tempfile.mkdtemp(prefix="explorer-newcomer-expert-")),
        )
        if done.returncode:
            print(f"{name}: {done.stderr.strip().splitlines()[-1]}")
            continue
        result = json.loads(done.stdout)
        predicted = (result["estimate"] or {}).get("predicted_s")
        print(
            f"{name}: fits {result['fits']}, XLA's peak {result['judged_peak_bytes'] / 2**30:.1f} GiB, "
            f"predicted {predicted:.3f} s, compile {time.perf_counter() - began:.0f} s"
        )


if __name__ == "__main__":
    main()
