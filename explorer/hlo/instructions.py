"""One instruction of XLA's HLO text as a record (``Instruction``: name, shape, opcode, operands, attributes), and
an instruction's name read off its line: what every reader of a program (loops, collectives, sources, MegaScale
sends, the step model) parses a line with; and a convolution's flops from its attributes (its window).
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
    operands = tuple(operand_name(part) for part in _top_level_split(arguments[1:-1]) if _uncommented(part).strip())
    return Instruction(head["name"], shape, opcode[1], operands, line[end:], head["root"] is not None)


def operand_name(text: str) -> str:
    """The name in one operand as XLA prints it: ``%x``, ``f32[2]{0} %x``, ``(f32[2], s32[]) %x``, ``/*index=5*/%x``.

    >>> operand_name("/*index=5*/bf16[8]{0} %param.3")
    'param.3'
    """
    return _uncommented(text, " ").split()[-1].lstrip("%")


def _uncommented(text: str, instead: str = "") -> str:
    return _COMMENT.sub(instead, text) if "/*" in text else text  # most operands have no comment: no regex pass


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


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def program_lines(hlo_text: str) -> list[str]:
    """The module's lines, one per instruction: an instruction whose braces are still open at the end of its line
    (a Pallas kernel's ``frontend_attributes={kernel_metadata={`` continues on the next lines: splash attention's
    ``"xprof_metadata"``, then ``}}, metadata=...``) is joined with the lines that close them. Splitting on every
    newline cut such a call in two, and its closing ``}}`` read as the end of its computation: the rest of a
    scanned MaxText layer's body then counted once, not once per layer.

    >>> program_lines('%b (p: f32[]) -> f32[] {\\n  %c = f32[] custom-call(%p), a={k={\\n"x":"}"\\n}}, m={}\\n}')
    ['%b (p: f32[]) -> f32[] {', '  %c = f32[] custom-call(%p), a={k={ "x":"}" }}, m={}', '}']
    """
    lines: list[str] = []
    depth = 0
    for line in hlo_text.splitlines():
        if depth > 0:
            lines[-1] += " " + line
        else:
            lines.append(line)
        if depth > 0 or line[:1].isspace():  # an instruction's line (computation headers and their "}" are not indented)
            bare = _STRING.sub("", line) if '"' in line else line
            depth = max(depth + bare.count("{") - bare.count("}"), 0)
    return lines


def instructions(lines: Iterable[str]) -> dict[str, str]:
    """Instruction name -> its line (names are unique in a module: one computation's lines, or the whole text's)."""
    return {name: line for line in lines if (name := instruction_name(line))}


_WINDOW = re.compile(r"window=\{([^}]*)\}")


def convolution_flops(attributes: str, lhs: list[int], rhs: list[int], out: list[int]) -> float:
    """A convolution's flops as XLA's cost analysis counts them (``HloCostAnalysis::GetConvolutionFlops``): 2 x the
    output's batch x its features x the kernel's input features x, per spatial dimension, the (output, window)
    position pairs that land on the input (padding, strides and dilations taken into account).

    The TPU compiler writes many of a program's dots as convolutions with windows: a weight gradient contracting two
    sequences as a window of 2, an FSDP layer's dot as a window of 64 over a padded dimension of 1 (one valid position
    of the 64 for each output). Counting only the input features missed the first kind's windows: a scanned MaxText
    64B's loop bodies came to a tenth of their dots' flops.

    >>> convolution_flops("window={size=3 pad=1_1} dim_labels=b0f_0io->b0f", [1, 5, 2], [3, 2, 4], [1, 5, 4])
    208.0
    """
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", attributes)
    if not labels:
        return 0.0
    lhs_labels, rhs_labels, out_labels = labels.groups()
    if len(lhs_labels) != len(lhs) or len(rhs_labels) != len(rhs) or len(out_labels) != len(out):
        return 0.0
    window = _WINDOW.search(attributes)
    fields = dict(f.split("=", 1) for f in window[1].split()) if window else {}

    def per_dim(name: str) -> list[int]:
        return [int(v) for v in fields[name].split("x")] if name in fields else []

    pads = [tuple(int(v) for v in p.split("_")) for p in fields["pad"].split("x")] if "pad" in fields else []
    strides, lhs_dilation, rhs_dilation = per_dim("stride"), per_dim("lhs_dilate"), per_dim("rhs_dilate")
    count = out[out_labels.index("b")] * out[out_labels.index("f")] * rhs[rhs_labels.index("i")]
    for k in range(len(lhs_labels) - 2):  # the spatial dimensions, labelled 0, 1, ...
        digit = str(k)
        size_in, size_out, window = lhs[lhs_labels.index(digit)], out[out_labels.index(digit)], rhs[rhs_labels.index(digit)]
        low = pads[k][0] if k < len(pads) else 0
        stride = strides[k] if k < len(strides) else 1
        base = lhs_dilation[k] if k < len(lhs_dilation) else 1
        dilation = rhs_dilation[k] if k < len(rhs_dilation) else 1
        valid = 0
        for tap in range(window):
            for position in range(size_out):
                at = position * stride - low + tap * dilation
                valid += at % base == 0 and 0 <= at // base < size_in
        count *= valid
    return 2.0 * count
