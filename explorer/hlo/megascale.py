"""The collectives across TPU slices of a program compiled for several slices: XLA's MegaScale transfers.

This module's one job is reading them from the optimized program's text (``hlo`` reads the in-slice collectives);
``xla_results`` places their groups on the mesh and the roofline costs them over the DCN (docs/multislice.md).
"""

from __future__ import annotations

import dataclasses
import re

from explorer.hlo import program as hlo
from explorer.hlo.instructions import parse_instruction, tuple_element

_SEND = re.compile(r"\ssend\(")  # which lines to parse at all
_TARGET = re.compile(r"_xla_megascale_target=(?P<target>\"[^\"]*\"|\{(?:\{[\d,\s>-]*\},?\s*)*\})")
_TRANSFER_TYPE = re.compile(r"_xla_megascale_transfer_type=\"(?P<kind>\w+)\"")


@dataclasses.dataclass(frozen=True)
class MegascaleOp:
    """One collective across TPU slices, as XLA compiles it for several slices: a host transfer over the DCN.

    XLA compiles one program per slice; a collective over devices of several slices becomes (beside any in-slice
    part, an ordinary collective) a ``send`` to the MegaScale runtime whose ``_xla_megascale_transfer_type`` names
    the collective (``ALL_REDUCE``, ``ALL_GATHER``, ``REDUCE_SCATTER``, ...) and whose ``_xla_megascale_target``
    names who takes part: groups of global device ids (``{{100000,300000},...}``; a collective-permute's part across
    slices is ``ONE_TO_ONE`` with source -> target pairs, ``{{200000->100000},...}``: a pipeline's send between stages
    on different slices), or ``"{1,2}x{0:3}"`` (slices 1
    and 2, counted from 1, each of the slice's devices 0 to 3 with its peers; ``{0}``, ``{0:3,5}`` alike). ``bytes`` is what one device sends
    per run (the collective's input); ``groups`` global device ids, or None for the compact form, whose slices
    (from 0) are ``slices`` and its in-slice devices ``devices``.
    """

    op: str
    runs: int
    bytes: int
    groups: tuple[tuple[int, ...], ...] | None
    slices: tuple[int, ...] = ()
    devices: tuple[int, ...] = ()
    name: str = ""  # the send's name in the module: where ``explorer.hlo.sources`` finds the line that asked for it

    @property
    def group_size(self) -> int:
        return max(len(g) for g in self.groups) if self.groups else len(self.slices)


def _id_range(part: str) -> range:
    """``3`` or ``0:3`` (both ends included) of a MegaScale target's device list."""
    low, _, high = part.partition(":")
    return range(int(low), int(high or low) + 1)


def megascale_ops(hlo_text: str) -> list[MegascaleOp]:
    """Every collective across slices (``MegascaleOp``) with its runs per call, loop trip counts included.

    >>> line = ('%send = (f32[8,128]{1,0}, u32[], token[]) send(%x, %a), is_host_transfer=true, frontend_attributes='
    ...         '{_xla_megascale_target="{1,2}x{0:3}",_xla_megascale_transfer_type="ALL_REDUCE"}')
    >>> megascale_ops("ENTRY %main () -> f32[] {\\n  " + line + "\\n}\\n")
    [MegascaleOp(op='all-reduce', runs=1, bytes=4096, groups=None, slices=(0, 1), devices=(0, 1, 2, 3), name='send')]
    """
    computations, _, runs, _, _ = hlo.parsed(hlo_text)
    found = []
    for name, lines in computations.items():
        for send in (parse_instruction(line) for line in lines if _SEND.search(line)):
            found_target = _TARGET.search(send.attributes) if send and send.op == "send" else None
            found_kind = _TRANSFER_TYPE.search(send.attributes) if found_target else None
            if not found_kind:
                continue
            kind, target, moved = found_kind["kind"], found_target["target"], hlo.shape_bytes(tuple_element(send.shape, 0))
            op = "collective-permute" if kind == "ONE_TO_ONE" else kind.lower().replace("_", "-")
            instruction = send.name
            compact = re.fullmatch(r'"\{(?P<slices>[\d,]+)\}x\{(?P<devices>[\d:,]+)\}"', target)
            if compact:
                slices = tuple(int(s) - 1 for s in compact["slices"].split(","))
                devices = tuple(d for part in compact["devices"].split(",") for d in _id_range(part))
                found.append(MegascaleOp(op, runs[name], moved, None, slices, devices, instruction))
            else:
                groups = tuple(tuple(int(i) for i in re.split(r",|->", g) if i.strip()) for g in re.findall(r"\{([\d,\s>-]*)\}", target))
                found.append(MegascaleOp(op, runs[name], moved, groups or None, name=instruction))
    return found
