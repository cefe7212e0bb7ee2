"""Code blocks on the pages wrap their lines: an unwrapped share link or snippet ran off the page at 1024 px."""

from __future__ import annotations

import ast

from tests.paths import ROOT


def unwrapped_code_blocks(source: str) -> list[int]:
    """The lines of each ``st.code(...)`` call in ``source`` that does not pass ``wrap_lines=True``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "code":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "st":
                wrap = [k.value for k in node.keywords if k.arg == "wrap_lines"]
                if not (wrap and isinstance(wrap[0], ast.Constant) and wrap[0].value is True):
                    lines.append(node.lineno)
    return lines


def test_every_code_block_on_the_pages_wraps_its_lines():
    sources = [*sorted((ROOT / "ui").rglob("*.py")), *sorted((ROOT / "views").rglob("*.py")), ROOT / "app.py"]
    found = {p.relative_to(ROOT).as_posix(): unwrapped_code_blocks(p.read_text(encoding="utf-8")) for p in sources}
    assert {path: lines for path, lines in found.items() if lines} == {}
    assert sum("st.code(" in p.read_text(encoding="utf-8") for p in sources) >= 3  # the share panel, Advisor, communication


def test_the_checker_finds_a_code_block_without_wrapping():
    source = 'st.code("a")\nst.code("b", wrap_lines=True)\nst.code("c", wrap_lines=False)\nother.code("d")\n'
    assert unwrapped_code_blocks(source) == [1, 3]
