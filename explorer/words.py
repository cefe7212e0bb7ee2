"""Counted nouns in messages: "1 GPU", "8 GPUs", "1 torus axis", "2 torus axes" (never "1 GPUs" or "axises")."""

from __future__ import annotations

IRREGULAR = {"entry": "entries", "axis": "axes", "torus axis": "torus axes", "mesh axis": "mesh axes", "process": "processes"}


def plural(noun: str, count: int) -> str:
    """``noun`` as ``count`` of it is written: the singular for exactly one, else its plural.

    >>> plural("GPU", 1), plural("GPU", 8), plural("axis", 2), plural("device", 0)
    ('GPU', 'GPUs', 'axes', 'devices')
    """
    if count == 1:
        return noun
    return IRREGULAR.get(noun, noun + "s")


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` agreeing, the count with thousands separators.

    >>> counted(1, "device"), counted(4096, "chip"), counted(1, "name"), counted(3, "mesh axis")
    ('1 device', '4,096 chips', '1 name', '3 mesh axes')
    """
    return f"{count:,} {plural(noun, count)}"
