"""The files XLA dumps for a compile (``xla_dump_to``): finding one, and the buffer assignment and memory-usage report
read into the figures ``memory_analysis()`` would have given (for a program XLA refused)."""

from __future__ import annotations

import os
import re


_ALLOCATION = re.compile(r"^allocation \d+: size (?P<size>\d+),(?: color (?P<color>\d+),)? (?P<rest>.*)$", re.M)
_USAGE_TOTAL = re.compile(r"^Memory Space: default \(color=0\)\s*\nTotal bytes: (?P<total>\d+)", re.M)


def read_dump(folder: str, suffix: str, program: str = "") -> str:
    """The text of the file of ``folder`` whose name holds ``program`` (any module by default: the folder holds one
    compile's, and a user's step is named after its function) and ends with ``suffix`` (the largest where several
    match: XLA names a module's files ``module_0004.jit_train_step.cl_123.after_optimizations...``, a CPU or
    GPU compile ``...cpu_after_optimizations...``/``...sm_9.0a_gpu_after_optimizations...``). OSError where there is
    none."""
    names = [n for n in os.listdir(folder) if program in n and n.endswith(suffix)]
    if not names:
        raise FileNotFoundError(os.path.join(folder, f"*{program}*{suffix}"))
    name = max(names, key=lambda n: os.path.getsize(os.path.join(folder, n)))
    with open(os.path.join(folder, name)) as handle:
        return handle.read()


def dumped_memory(buffer_assignment: str, usage_report: str) -> dict[str, int]:
    """Per-device memory from XLA's dump of a compile (``xla_dump_to``), in ``memory_analysis()``'s terms.

    The TPU compiler writes its buffer assignment and memory-usage report before it refuses a
    program that does not fit (``RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom``), so this is how
    such a program's figures are read. In HBM (color 0): arguments are the allocations of entry
    parameters, outputs those that may be live out, aliased those that are both, temporaries the
    preallocated temporary buffer; the peak is the report's total for HBM. On a program that fits,
    arguments, outputs and aliased bytes equal ``memory_analysis()``'s to the byte and the peak and
    temporaries agree within 16 MiB (``memory_analysis()`` counts a few MiB of buffers outside the
    HBM heap; ``tests/explorer/compile/test_xla_results.py``).
    """
    memory = {"argument_bytes": 0, "output_bytes": 0, "alias_bytes": 0, "temp_bytes": 0}
    for allocation in _ALLOCATION.finditer(buffer_assignment):
        if allocation["color"] not in (None, "0"):
            continue
        size, rest = int(allocation["size"]), allocation["rest"]
        parameter = re.search(r"\bparameter \d+", rest) is not None
        out = "maybe-live-out" in rest
        memory["argument_bytes"] += size if parameter else 0
        memory["output_bytes"] += size if out else 0
        memory["alias_bytes"] += size if parameter and out else 0
        memory["temp_bytes"] += size if "preallocated-temp" in rest else 0
    total = _USAGE_TOTAL.search(usage_report)
    if total is None:
        raise ValueError("no HBM total in XLA's memory-usage report")
    memory["peak_bytes"] = int(total["total"])
    return memory
