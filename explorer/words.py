"""Wording shared by every message and terminal text: counted nouns ("1 GPU", "8 GPUs", "2 torus axes"; never
"1 GPUs" or "axises"), and text fitted to a terminal's width (the command line's lines ran to 216 characters)."""

from __future__ import annotations

import textwrap

WIDTH = 120  # the command line's text fits this many columns

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


def fit(text: str, width: int = WIDTH) -> str:
    """Each line of ``text`` longer than ``width`` wrapped at spaces, its continuations indented 4 more than it.

    >>> print(fit("  rules: " + ", ".join(["batch:data"] * 4), width=30))
      rules: batch:data,
          batch:data, batch:data,
          batch:data
    """
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(
            line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ", break_long_words=False, break_on_hyphens=False
        )
    return "\n".join(out)
