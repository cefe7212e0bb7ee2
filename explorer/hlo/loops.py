"""How many times a loop of XLA's compiled program runs: its ``known_trip_count``, else read from its condition, the
counter's start and the step its body adds (``program`` counts each loop body's work that many times)."""

from __future__ import annotations

import re

from explorer.hlo.instructions import instructions, parse_instruction

_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"\}')


def trip_count(line: str, lines: list[str], computations: dict[str | None, list[str]]) -> int | None:
    """The loop's trip count: XLA's ``known_trip_count`` if present, else read from its condition.

    The TPU compiler drops ``known_trip_count``; the loops ``scan`` makes then keep a
    condition ``counter < N`` on a tuple element whose start is a constant in the
    caller (followed through copies), giving ``N - start`` iterations. The element is a
    ``get-tuple-element`` or, in the text XLA dumps for a program it refused
    (``xla_dump_to``), written inline as ``%param#0``.
    """
    known = _TRIP_COUNT.search(line)
    if known:
        return int(known["n"])
    loop = parse_instruction(line)
    condition = re.search(r"\bcondition=%?([\w.\-]+)", loop.attributes) if loop and loop.op == "while" else None
    if not condition or len(loop.operands) != 1 or condition[1] not in computations:
        return None
    symbols = instructions(computations[condition[1]])
    compare = next((i for i in map(parse_instruction, computations[condition[1]]) if i and i.root), None)
    if not compare or compare.op != "compare" or len(compare.operands) != 2 or not re.search(r"\bdirection=LT\b", compare.attributes):
        return None
    counter, _, element = compare.operands[0].partition("#")
    gte = parse_instruction(symbols.get(counter, ""))
    index = re.search(r"\bindex=(\d+)", gte.attributes) if gte and gte.op == "get-tuple-element" else None
    element = element or (index[1] if index else None)
    limit = _constant(symbols, compare.operands[1])
    if not element or limit is None:
        return None
    start = _tuple_element_constant(instructions(lines), loop.operands[0], int(element))
    step = _counter_step(loop.attributes, computations, int(element))
    if start is None or step is None:
        return None
    return max(-(-(limit - start) // step), 0)


def _counter_step(attributes: str, computations: dict[str | None, list[str]], element: int) -> int | None:
    """What the loop's body adds to its counter (tuple element ``element``) each iteration: the constant of its ROOT
    tuple's ``add(counter, constant)``. A scan's loop adds 1; the TPU compiler's windowed einsums (a collective matmul
    split into steps, ``windowed_dot_general_body``) add 2, two partial dots an iteration, one each way round the ring:
    counted as 1, such a loop ran twice its iterations. None when the body's update is not such an add."""
    body = re.search(r"\bbody=%?([\w.\-]+)", attributes)
    if not body or body[1] not in computations:
        return None
    lines = computations[body[1]]
    symbols = instructions(lines)
    root = next((i for i in map(parse_instruction, lines) if i and i.root), None)
    if root is None or root.op != "tuple" or element >= len(root.operands):
        return None
    update = _behind_copies(symbols, root.operands[element])
    if update is None or update.op != "add" or len(update.operands) != 2:
        return None
    steps = [_constant(symbols, operand) for operand in update.operands]
    step = next((value for value in steps if value is not None), None)
    return step if step is not None and step > 0 else None


def _behind_copies(symbols: dict[str, str], name: str):
    """The instruction ``name`` is, or the one it copies (through up to 8 copies); None if not found."""
    for _ in range(8):
        instruction = parse_instruction(symbols.get(name, ""))
        if instruction is None or instruction.op != "copy" or len(instruction.operands) != 1:
            return instruction
        name = instruction.operands[0]
    return None


def _constant(symbols: dict[str, str], name: str) -> int | None:
    """The integer value of ``name`` if it is a scalar constant, possibly behind copies."""
    instruction = _behind_copies(symbols, name)
    if instruction is None or instruction.op != "constant" or len(instruction.operands) != 1:
        return None
    value = instruction.operands[0]
    return int(value) if re.fullmatch(r"-?\d+", value) else None


def _tuple_element_constant(symbols: dict[str, str], name: str, index: int) -> int | None:
    instruction = parse_instruction(symbols.get(name, ""))
    if instruction is None or instruction.op != "tuple" or index >= len(instruction.operands):
        return None
    return _constant(symbols, instruction.operands[index])
