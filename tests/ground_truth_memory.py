"""Ground truth for the memory breakdown: XProf's Memory Viewer and XLA's own memory-usage report, on a program XLA
dumped (``xla_dump_to`` with ``xla_dump_hlo_as_proto``). Imports no explorer code.

XProf (the ``xprof`` package, openxla/xprof) converts an ``HloProto`` with its buffer assignment into the Memory
Viewer's data (``hlo_proto_to_memory_visualization_utils.cc``: the heap simulator's trace replayed). Its tool reads
the module's proto from the session's folder (``<module>.hlo_proto.pb`` beside the profile's ``.xplane.pb``), so an
empty profile and the dumped proto under that name are a session it serves without any run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile


def dumped(folder: str, suffix: str) -> str:
    """The path of the dump's file ending with ``suffix`` (``.after_optimizations.hlo.pb``): the largest of several."""
    names = [n for n in os.listdir(folder) if n.endswith(suffix)]
    if not names:
        raise FileNotFoundError(os.path.join(folder, "*" + suffix))
    return os.path.join(folder, max(names, key=lambda n: os.path.getsize(os.path.join(folder, n))))


def report_total(folder: str, color: int = 0) -> int:
    """XLA's memory-usage report's total for one memory space (``Total bytes``)."""
    with open(dumped(folder, "after_optimizations-memory-usage-report.txt")) as handle:
        text = handle.read()
    found = re.search(r"^Memory Space: \S+ \(color=" + str(color) + r"\)\s*\nTotal bytes: (\d+)", text, re.M)
    if found is None:
        raise ValueError(f"no total for color {color}")
    return int(found[1])


def memory_viewer(folder: str, memory_space: int = 0) -> dict:
    """XProf's Memory Viewer data (its ``PreprocessResult`` as JSON) for the program XLA dumped in ``folder``."""
    from xprof.convert import raw_to_tool_data

    proto = dumped(folder, "after_optimizations.hlo.pb")
    session = tempfile.mkdtemp(prefix="xprof-session-")
    try:
        shutil.copy(proto, os.path.join(session, "program.hlo_proto.pb"))
        open(os.path.join(session, "host.xplane.pb"), "wb").close()  # an empty profile: nothing ran
        data, _ = raw_to_tool_data.xspace_to_tool_data(
            [os.path.join(session, "host.xplane.pb")], "memory_viewer", {"module_name": "program", "memory_space": str(memory_space)}
        )
    finally:
        shutil.rmtree(session, ignore_errors=True)
    return json.loads(data)


def mib_to_bytes(mib: float) -> int:
    return round(mib * 2**20)


def peak_objects(viewer: dict, at_least: int = 1) -> list[tuple[str, int]]:
    """XProf's buffers at its peak (not its "small" remainder), as (instruction with shape index, bytes), the shape
    index written as the live-range file writes it (``{}`` for none)."""
    found = []
    for item in viewer.get("maxHeap", []):
        name = item.get("instructionName")
        size = mib_to_bytes(item.get("logicalBufferSizeMib", 0))
        if name and size >= at_least:
            found.append((name if "{" in name else name + "{}", size))
    return found
