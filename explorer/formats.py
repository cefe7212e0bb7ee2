"""Numbers and names in words, the same everywhere (the command line, the pages, the plots, the advisor's table):
bytes, FLOPs, durations, shares, long array paths, plain aligned tables, counted nouns ("1 GPU", "8 GPUs", "2 torus
axes"; never "1 GPUs" or "axises"), and text fitted to a terminal's width. Nothing here imports JAX.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Mapping, Sequence


def human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    return str(count)


def human_flops(count: float) -> str:
    """A FLOP count in the largest SI unit that keeps it at 1 or more, about three significant digits.

    >>> human_flops(2.5e15), human_flops(1.234e10), human_flops(120), human_flops(4.0e9)
    ('2.50 PFLOP', '12.3 GFLOP', '120 FLOP', '4.00 GFLOP')
    """
    value, unit = float(count), "FLOP"
    for name, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(count) >= scale:
            value, unit = count / scale, name
            break
    decimals = 0 if abs(value) >= 100 or unit == "FLOP" else 1 if abs(value) >= 10 else 2
    return f"{value:,.{decimals}f} {unit}"


def short_path(path: str, limit: int = 40) -> str:
    """``path`` in at most ``limit`` characters, its leaf whole: long middle parts elided inside (their numbered
    ends kept, which tell layers apart), then whole middle parts from the left; the first part stays.

    >>> short_path("opt_state/0/mu/LogicalDotReluDot_0/Dense_0/kernel")
    'opt_state/0/mu/Logi…Dot_0/Dense_0/kernel'
    >>> short_path("params/Dense_0/kernel"), short_path("a/b/c/d/e/f/g/h/i/j/kernel", 16), short_path("a/" + "x" * 20, 12)
    ('params/Dense_0/kernel', 'a/…/h/i/j/kernel', '…xxxxxxxxxxx')
    """
    if len(path) <= limit:
        return path
    parts = path.split("/")
    middle = range(1, len(parts) - 1)
    for index in sorted(middle, key=lambda i: -len(parts[i])):  # the longest first
        if len("/".join(parts)) <= limit:
            return "/".join(parts)
        if len(parts[index]) > 10:
            parts[index] = f"{parts[index][:4]}…{parts[index][-5:]}"
    while len(parts) > 2 and len("/".join(parts)) > limit:  # drop middle parts, nearest the first, behind one "…"
        parts = [parts[0], "…", *parts[2:]] if parts[1] != "…" else [parts[0], "…", *parts[3:]] if len(parts) > 3 else parts[:1] + parts[2:]
    text = "/".join(parts)
    return text if len(text) <= limit else "…" + parts[-1][-(limit - 1) :]


def human_seconds(seconds: float) -> str:
    """A duration with three significant digits in the unit that keeps it at 1 or more: never rounded to zero.

    >>> human_seconds(6.32e-5), human_seconds(1.5e-3), human_seconds(159.74e-3), human_seconds(2.5), human_seconds(0.0)
    ('63.2 µs', '1.50 ms', '160 ms', '2.50 s', '0 s')
    """
    if seconds == 0:
        return "0 s"
    unit, scale = seconds_unit(seconds)
    value = seconds / scale
    return f"{value:.{0 if abs(value) >= 99.95 else 1 if abs(value) >= 9.995 else 2}f} {unit}"


def clock(seconds: float) -> str:
    """A wall-clock duration as a person reads it on a progress line: seconds under a minute, then minutes and seconds,
    then hours and minutes.

    >>> clock(4.26), clock(59.6), clock(65), clock(130), clock(3725)
    ('4.3 s', '60 s', '1 min 05 s', '2 min 10 s', '1 h 02 min')
    """
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole <= 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def seconds_unit(seconds: float) -> tuple[str, float]:
    """The unit (and its size in seconds) that human_seconds writes a duration in: a chart's axis uses its largest value's.

    >>> seconds_unit(6.32e-5), seconds_unit(2.5), seconds_unit(0.0)
    (('µs', 1e-06), ('s', 1.0), ('s', 1.0))
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale * 0.9995:
            return unit, scale
    return ("ns", 1e-9) if seconds else ("s", 1.0)


def share(fraction: float) -> str:
    """A fraction as a percentage that a small share does not round to 0%.

    >>> share(0.42), share(0.0015), share(0.00002), share(0.0), share(1e-9)
    ('42%', '0.15%', '0.002%', '0%', 'under 0.0001%')
    """
    if fraction == 0 or abs(fraction) >= 0.01:
        return f"{fraction:.0%}"
    percent = fraction * 100
    return "under 0.0001%" if abs(percent) < 1e-4 else f"{percent:.2g}%"


def plain_number(value: float, digits: int = 3) -> str:
    """A number with ``digits`` significant digits as a person reads it: never in exponent notation (``2.4e-07``,
    ``1.05e+03``), thousands separated.

    >>> plain_number(2.37e-7), plain_number(1050.2), plain_number(6.25), plain_number(0.2143), plain_number(0.0)
    ('0.000000237', '1,050', '6.25', '0.214', '0')
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"  # 0, inf, nan
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def plain_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Rows as an aligned plain-text table: the column names, a rule of dashes, a line per row (no pandas).

    >>> print(plain_table([{"rank": 1, "layout": "fsdp8"}, {"rank": 10, "layout": "data8"}], ("rank", "layout")))
    rank  layout
    ----  ------
    1     fsdp8
    10    data8
    """
    cells = [[str(c) for c in columns]] + [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


WIDTH = 120  # the command line's text fits this many columns

IRREGULAR = {
    "microbatch": "microbatches",
    "entry": "entries",
    "axis": "axes",
    "torus axis": "torus axes",
    "mesh axis": "mesh axes",
    "process": "processes",
}


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
