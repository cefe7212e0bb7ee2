"""One instruction of XLA's HLO text as a record (``Instruction``: name, shape, opcode, operands, attributes), and
an instruction's name read off its line: what every reader of a program (loops, collectives, sources, MegaScale
sends, the step model) parses a line with.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable

_INSTRUCTION_HEAD = re.compile(r"\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*")
_PARENTHESES = re.compile(r"[()]")
_SEPARATORS = re.compile(r"[()\[\]{},]")
_COMMENT = re.compile(r"/\*.*?\*/")  # XLA writes /*index=5*/ before every fifth operand, with or without a shape


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: its name, result shape, opcode, operand names and the rest of its line."""

    name: str
    shape: str
    op: str
    operands: tuple[str, ...]
    attributes: str
    root: bool = False


def parse_instruction(line: str) -> Instruction | None:
    """The instruction a line of HLO text holds, or None (a header, a closing brace, a blank).

    >>> parse_instruction("  %d = (f32[2]{0}, s32[]) fusion(%a, %b), kind=kLoop, calls=%f").operands
    ('a', 'b')
    >>> parse_instruction("  %t = (s32[], s32[]) tuple(s32[] %a, %b, %c, %d, %e, /*index=5*/s32[] %f)").operands
    ('a', 'b', 'c', 'd', 'e', 'f')
    """
    head = _INSTRUCTION_HEAD.match(line)
    if not head:
        return None
    position = head.end()
    shape, position = _balanced(line, position) if line[position : position + 1] == "(" else _token(line, position)
    opcode = re.match(r"\s*([\w\-]+)\(", line[position:])
    if not opcode:
        return None
    arguments, end = _balanced(line, position + opcode.end() - 1)
    operands = tuple(operand_name(part) for part in _top_level_split(arguments[1:-1]) if _COMMENT.sub("", part).strip())
    return Instruction(head["name"], shape, opcode[1], operands, line[end:], head["root"] is not None)


def operand_name(text: str) -> str:
    """The name in one operand as XLA prints it: ``%x``, ``f32[2]{0} %x``, ``(f32[2], s32[]) %x``, ``/*index=5*/%x``.

    >>> operand_name("/*index=5*/bf16[8]{0} %param.3")
    'param.3'
    """
    return _COMMENT.sub(" ", text).split()[-1].lstrip("%")


def _balanced(text: str, start: int) -> tuple[str, int]:
    depth = 0
    for bracket in _PARENTHESES.finditer(text, start):  # only the brackets: a line of XLA's can run to 100k characters
        depth += 1 if bracket[0] == "(" else -1
        if depth == 0:
            return text[start : bracket.end()], bracket.end()
    return text[start:], len(text)


def _token(text: str, start: int) -> tuple[str, int]:
    end = text.find(" ", start)
    end = len(text) if end < 0 else end
    return text[start:end], end


def _top_level_split(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for mark in _SEPARATORS.finditer(text):
        char = mark[0]
        if char == "," and depth == 0:
            parts.append(text[start : mark.start()])
            start = mark.end()
        elif char != ",":
            depth += 1 if char in "([{" else -1
    parts.append(text[start:])
    return parts


def tuple_element(shape: str, index: int) -> str:
    """Element ``index`` of a tuple shape (the shape itself when it is not a tuple)."""
    if not shape.startswith("("):
        return shape
    parts = _top_level_split(shape[1:-1])
    return parts[index].strip() if index < len(parts) else ""


def instruction_name(line: str) -> str:
    """The name of the instruction a line of HLO text defines (``all-reduce.3``), or "" for any other line."""
    match = _INSTRUCTION_HEAD.match(line)
    return match["name"] if match else ""


def instructions(lines: Iterable[str]) -> dict[str, str]:
    """Instruction name -> its line (names are unique in a module: one computation's lines, or the whole text's)."""
    return {name: line for line in lines if (name := instruction_name(line))}
