"""``compile --memory``'s text: the peak's headline adding up to XLA's total, by kind, the largest buffers, by line."""

import copy
import re

from explorer.compile.compiled import compile_step
from explorer.formats import human_bytes
from explorer.layout import SEED_LAYOUT, parse_layout
from explorer.memory_text import memory_text


def test_the_text_adds_the_peak_up_and_names_lines_as_the_other_tables_do():
    """The seed's step on this process's 8 CPU devices: the headline's figures are the breakdown's, each kind's bytes
    are printed, and a line of the model's code is ``mlp.py:N`` (the whole path only in --json), never an exponent."""
    compiled, _ = compile_step(parse_layout(copy.deepcopy(SEED_LAYOUT)))
    breakdown = compiled.memory_breakdown
    text = memory_text(breakdown)
    assert f"peak: {human_bytes(breakdown.peak_bytes)} live at program point" in text
    assert f"= {human_bytes(breakdown.allocated_bytes)}, XLA's total for the device's memory" in text
    for group in breakdown.by_kind:
        if group.bytes:
            assert group.name in text
    lined = [line for line in text.splitlines() if re.search(r"\bmlp\.py:\d+", line)]
    assert lined and not any("/" in line.split("mlp.py")[0].split()[-1] for line in lined if "mlp.py" in line), lined
    assert not re.search(r"\d[eE][+-]\d", text)
