"""Server time of one Layout page rerun on the largest planned mesh (256 x 256), with Streamlit's AppTest.

The layout: the Flax guide's MLP (batch 256, depth 1024) with ``embed`` on ``data`` and
``hidden`` on ``model``, so the drawn kernel is cut into 256 x 256 = 65,536 blocks,
the most a device grid has to draw. Three kinds of sample, each a full script run of
app.py (analysis, tables, every Plotly figure built and serialised; browser painting
not included):

- first: the run that sets the layout up (cold caches: grid view, figures);
- rerun: a run with nothing changed (what every widget interaction costs);
- new rule: a run after adding a rule that no array uses, so the analysis reruns but
  the figures' inputs (the drawn array's tiles, the mesh) are unchanged.

    python benchmarks/huge_mesh.py [--rounds 5]

Goal: a rerun <= 3 s.
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

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"  # (embed, hidden) -> (data, model): 65,536 blocks
RULES = [["batch", ["data"]], ["embed", ["data"]], ["hidden", ["model"]]]


def _timed_run(at: AppTest) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    assert not at.exception, at.exception
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    at.session_state["mesh_shape_text"] = "256, 256"
    at.session_state["option::mlp::batch"] = 256
    at.session_state["rules_base"] = RULES
    at.session_state["rules_version"] = at.session_state["rules_version"] + 1
    at.session_state["selected_path"] = KERNEL
    first = _timed_run(at)
    assert "65,536 devices" in at.markdown[0].value, at.markdown[0].value
    reruns = [_timed_run(at) for _ in range(args.rounds)]
    edits = []
    for index in range(args.rounds):
        at.session_state["rules_base"] = RULES + [[f"unused_{index}", []]]
        at.session_state["rules_version"] = at.session_state["rules_version"] + 1
        edits.append(_timed_run(at))
    print(f"first run (cold caches)   {first:.2f} s")
    print(
        f"rerun, nothing changed    median {statistics.median(reruns):.2f} s (min {min(reruns):.2f}, max {max(reruns):.2f}, n={len(reruns)})"
    )
    print(f"rerun after a rule edit   median {statistics.median(edits):.2f} s (min {min(edits):.2f}, max {max(edits):.2f}, n={len(edits)})")
    print(f"goal: a rerun <= 3 s: {'met' if statistics.median(reruns) <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
