"""The seconds per byte of a program's collectives: inside a slice (or a GPU cluster) per op, and across TPU slices
over the data-center network per MegaScale send (the step model's collective kernels are costed at these rates)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from explorer.hlo import program as hlo
from explorer.hlo.megascale import MegascaleOp, megascale_ops
from explorer.predict.step_rates import Rates


@functools.lru_cache(maxsize=2)
def dcn_sends(hlo_text: str) -> dict[str, MegascaleOp]:
    """The program's collectives across TPU slices (a MegaScale ``send`` each), by the send's name."""
    return {op.name: op for op in megascale_ops(hlo_text)}


def collective_seconds_per_byte(collectives: Iterable, program: hlo.Program | None = None, device: Rates | None = None) -> dict[str, float]:
    """Seconds per byte of each collective op, from costed collectives (``op``, ``bytes``, ``seconds``, ``link`` each).

    Collectives that cross the data-center network between TPU slices (link ``dcn``) are apart: XLA compiles their
    part across slices as MegaScale ``send``s, so ``"dcn:" + op`` is their seconds over the bytes the ``program``'s
    sends of that op carry per step, at ``device.dcn_efficiency`` of the DCN figure (``step_rates.DCN_EVIDENCE``).
    The rest, per op, is the seconds per result byte of the collectives inside a slice (or a GPU cluster's)."""
    seconds: dict[str, float] = {}
    moved: dict[str, float] = {}
    for c in collectives:
        key = f"dcn:{c.op}" if getattr(c, "link", "") == "dcn" else c.op
        seconds[key] = seconds.get(key, 0.0) + c.seconds
        moved[key] = moved.get(key, 0.0) + (0 if key.startswith("dcn:") else c.bytes)
    if program is not None:
        for send in dcn_sends(program.text).values():
            key = f"dcn:{send.op}"
            moved[key] = moved.get(key, 0.0) + send.bytes * send.runs
    efficiency = device.dcn_efficiency if device is not None else 1.0
    return {key: seconds[key] / moved[key] / (efficiency if key.startswith("dcn:") else 1.0) for key in seconds if moved.get(key)}
