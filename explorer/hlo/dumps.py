"""The files XLA dumps for a program it refused (``xla_dump_to``): the buffer assignment and the memory usage report,
read into the figures ``memory_analysis()`` would have given."""

from __future__ import annotations

import re


_ALLOCATION = re.compile(r"^allocation \d+: size (?P<size>\d+),(?: color (?P<color>\d+),)? (?P<rest>.*)$", re.M)
_USAGE_TOTAL = re.compile(r"^Memory Space: default \(color=0\)\s*\nTotal bytes: (?P<total>\d+)", re.M)


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
