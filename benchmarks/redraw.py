"""How fast the Layout page redraws after a rule edit, measured with Streamlit's AppTest.

Each sample is one full script run of app.py after the rules change (analysis,
tables, every Plotly figure built and serialised), alternating two rule sets plus
a never-seen-before dummy rule so no cache answers for free. Browser painting is
not included. Compared with the bare Flax recipe (eval_shape + get_partition_spec +
logical_to_mesh_sharding + shard_shape) for the same model, in the same process.

    python benchmarks/redraw.py [--rounds 7]

Goals: <= 1 s for the Flax guide's MLP (2x4), <= 2 s for Llama-2-7B shapes on a planned 16x16 mesh.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from streamlit.testing.v1 import AppTest  # noqa: E402

from benchmarks.analyze import LLAMA_7B, bare_recipe  # noqa: E402


BIG_KERNEL = "params/block_0/mlp/wi_0/kernel"  # 4096 x 11008


def _edit(at: AppTest, rules: list) -> float:
    at.session_state["rules_base"] = rules
    at.session_state["rules_version"] = at.session_state["rules_version"] + 1
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    assert not at.exception, at.exception
    return elapsed


def _setup_llama(at: AppTest) -> None:
    at.text_input(key="mesh_shape_text").input("16, 16").run()
    at.selectbox(key="model_name").select("transformer").run()
    for field, value in LLAMA_7B["model"]["options"].items():
        at.session_state[f"option::transformer::{field}"] = value
    at.run()
    assert "6,738" in at.markdown[0].value and "256 devices" in at.markdown[0].value, at.markdown[0].value
    # The drawn array is the biggest MLP kernel: under both rule sets it is cut into many blocks
    # (16 x 16 = 256 under the first), the most the device grid has to draw.
    at.selectbox(key="selected_path").select(BIG_KERNEL).run()


def _measure(name: str, rule_sets: list[list], rounds: int, setup=None) -> list[float]:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    if setup:
        setup(at)
    samples = []
    for index in range(rounds):
        rules = rule_sets[index % 2] + [[f"unused_{index}", []]]
        samples.append(_edit(at, rules))
    print(f"{name:<36} median {statistics.median(samples):.3f} s (min {min(samples):.3f}, max {max(samples):.3f}, n={rounds})")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    mlp = _measure(
        "MLP 2x4, rule edit -> redraw",
        [[["batch", ["data"]], ["hidden", ["model"]]], [["batch", ["data"]], ["hidden", ["data"]]]],
        args.rounds,
    )
    llama_rules = [[[logical, [] if mesh is None else [mesh]] for logical, mesh in LLAMA_7B["rules"]]]
    llama_rules.append([["batch", ["data"]], ["embed", ["model"]], ["mlp", ["data"]], ["layer", []]])
    llama = _measure("Llama-2-7B 16x16 planned, rule edit", llama_rules, args.rounds, setup=_setup_llama)
    bare = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        bare_recipe()
        bare.append(time.perf_counter() - start)
    print(f"{'bare Flax recipe, Llama-2-7B':<36} median {statistics.median(bare):.3f} s")
    print(f"MLP redraw median {statistics.median(mlp):.3f} s (goal <= 1 s)")
    print(
        f"Llama redraw median {statistics.median(llama):.3f} s (goal <= 2 s); "
        f"ratio to the bare recipe's analysis alone: {statistics.median(llama) / statistics.median(bare):.2f}x"
    )


if __name__ == "__main__":
    main()
