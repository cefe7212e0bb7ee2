"""Record the optimized HLO text of a layout's train step compiled deviceless for a target (gzip).

The step model's tests (tests/explorer/predict/test_step_model.py) predict from these recorded texts: compiling the
1.7B-parameter layouts takes minutes on a 2-core machine. Recipe: the layouts of
tests/data/h200-2026-11-27.json, each compiled as ``explorer compile LAYOUT --target h200:1x1`` does it
(``xla_compile.compile_for_target``), the text of ``compiled.as_text()`` written gzipped.

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_gpu_experimental_use_collective_kernels= \
        .venv/bin/python scripts/record_hlo.py tests/data/h200-2026-11-27.json h200:1x1 tests/data/hlo
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time


def main(measurements: str, target_name: str, folder: str) -> None:
    import jax

    from explorer.compile import xla_compile
    from explorer.layout import parse_layout
    from explorer.hardware.targets import parse_target

    target = parse_target(target_name)
    texts: dict[str, str] = {}
    real = xla_compile.analyze_compiled

    def keep_text(compiled, *args, **kwargs):
        texts["text"] = compiled.as_text()
        return real(compiled, *args, **kwargs)

    xla_compile.analyze_compiled = keep_text
    with open(measurements) as handle:
        layouts = json.load(handle)["layouts"]
    os.makedirs(folder, exist_ok=True)
    for key in sys.argv[4:] or layouts:
        start = time.perf_counter()
        result = xla_compile.compile_for_target(parse_layout(layouts[key]["layout"]), target)
        path = os.path.join(folder, f"{key}.{target_name.replace(':', '_')}.hlo.txt.gz")
        with gzip.open(path, "wt") as handle:
            handle.write(texts["text"])
        took = time.perf_counter() - start
        print(f"{key}: {took:.1f} s, jax {jax.__version__}, step bound {result.estimate.step_s:.4f} s -> {path}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
