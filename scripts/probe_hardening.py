"""Probe the explorer as a careless user and an attacker would (issue 10), and print what held.

    python scripts/probe_hardening.py [--seed 0]

Classes: malformed layout files through the command line, fuzzed links, hostile
library names, concurrent library operations from 4 processes, indivisible layouts
timed from the command line, hostile names in the generated code. Each outcome is
counted: a layout, a message (ExplorerError / exit 2), or anything else (a failure).
Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import io
import json
import multiprocessing
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("EXPLORER_CPU_DEVICES", "8")

from explorer.hardware import devices  # noqa: E402

devices.configure()

import yaml  # noqa: E402

from explorer.sharing import library  # noqa: E402
from explorer.__main__ import main as cli  # noqa: E402
from explorer.errors import ExplorerError  # noqa: E402
from explorer.layout import SEED_LAYOUT, parse_layout  # noqa: E402
from explorer.sharing.share import layout_to_params, layout_to_query, params_to_layout
from explorer.sharing.exports import maxtext_yaml, python_snippet  # noqa: E402
from explorer.text import markdown_literal  # noqa: E402

SEED_TEXT = json.dumps(SEED_LAYOUT)
ROWS: list[tuple[str, int, str, str]] = []  # class, tried, outcomes, held


def row(name: str, outcomes: Counter, held: bool, slowest: float | None = None) -> None:
    text = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    if slowest is not None:
        text += f"; slowest {slowest:.2f} s"
    ROWS.append((name, sum(outcomes.values()), text, "yes" if held else "NO"))


def run_cli(*args: str) -> tuple[int | str, float]:
    err = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli(list(args))
    except BaseException as error:  # noqa: BLE001 - counting everything that is not a message
        return f"raised {type(error).__name__}", time.perf_counter() - start
    if code == 2 and (len(err.getvalue().strip().splitlines()) != 1 or "Traceback" in err.getvalue()):
        return "exit 2 but not one line", time.perf_counter() - start
    return code, time.perf_counter() - start


def with_raw(path: tuple, raw: str) -> str:
    data = copy.deepcopy(SEED_LAYOUT)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "\x00RAW\x00"
    return json.dumps(data).replace(json.dumps("\x00RAW\x00"), raw)


PATHS = [
    ("name",),
    ("mesh", "shape"),
    ("mesh", "axes"),
    ("rules",),
    ("model", "name"),
    ("model", "options", "batch"),
    ("model", "options", "depth"),
    ("model", "options", "scan"),
    ("mesh", "shape", 0),
    ("rules", 0),
]


def malformed_files(rng: random.Random) -> dict[str, list[bytes]]:
    def mutate() -> bytes:
        data = bytearray(SEED_TEXT.encode())
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            data[at : at + rng.randint(0, 6)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))
        return bytes(data)

    def value(depth=0):
        kind = rng.randrange(7 if depth < 3 else 5)
        if kind == 5:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if kind == 6:
            return {str(rng.randint(0, 9)): value(depth + 1) for _ in range(rng.randint(0, 3))}
        return [
            None,
            True,
            rng.randint(-(10**6), 10**6),
            rng.random() * 1e6,
            "".join(rng.choice("ab\n:[]*_<>") for _ in range(rng.randint(0, 9))),
        ][kind]

    encodings = ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252"]
    accented = with_raw(("name",), '"caf\u00e9 \u00fcber"')
    return {
        "byte mutations of a valid file": [mutate() for _ in range(200)],
        "random binary": [bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000))) for _ in range(50)],
        "other encodings (UTF-16/32, Latin-1, cp1252)": [accented.encode(encodings[i % 6]) for i in range(30)],
        "integers of 31 to 20,000 digits": [with_raw(rng.choice(PATHS), "9" * rng.randint(31, 20_000)).encode() for _ in range(40)],
        "nesting 33 to 200,000 deep": [
            with_raw(rng.choice(PATHS), "[" * (n := rng.randint(33, 200_000)) + "]" * n).encode() for _ in range(40)
        ],
        "NaN, Infinity, 1e999": [
            with_raw(rng.choice(PATHS), rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "[NaN]"])).encode() for _ in range(40)
        ],
        "over 1 MB": [(" " * (1_000_001 + rng.randint(0, 10**6)) + SEED_TEXT).encode() for _ in range(10)],
        "schema: random values at layout fields": [with_raw(rng.choice(PATHS), json.dumps(value())).encode() for _ in range(120)],
    }


def probe_files(rng: random.Random, folder: Path) -> None:
    for name, contents in malformed_files(rng).items():
        outcomes, slowest = Counter(), 0.0
        for index, content in enumerate(contents):
            path = folder / f"f{index}.json"
            path.write_bytes(content)
            code, seconds = run_cli("url", str(path))
            slowest = max(slowest, seconds)
            outcomes[{0: "layout", 2: "message (exit 2)"}.get(code, str(code))] += 1
        row(f"files: {name}", outcomes, set(outcomes) <= {"layout", "message (exit 2)"}, slowest)


def probe_links(rng: random.Random, count: int = 3000) -> None:
    seed = layout_to_params(parse_layout(SEED_LAYOUT))
    alphabet = "x;:,-%0123456789abcdefgh\n[]{}\"'\\!*_<>()é\u202e" + "NaN" + "Infinity"
    outcomes, slowest, broken = Counter(), 0.0, 0
    for _ in range(count):
        params = dict(seed)
        for _ in range(rng.randint(1, 4)):
            key = rng.choice(list(params) + ["x"])
            value = params.get(key, "")
            at = rng.randint(0, len(value))
            insert = (
                rng.choice(["9" * rng.randint(1, 6000), "[" * rng.randint(1, 5000), "NaN", "1e999", "%5B", "%00", ""])
                if rng.random() < 0.15
                else "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
            )
            params[key] = value[:at] + insert + value[at + rng.randint(0, 5) :]
        if rng.random() < 0.1:
            params.pop(rng.choice(list(params)))
        start = time.perf_counter()
        try:
            layout = params_to_layout(params)
            try:
                query = layout_to_query(layout)
                broken += params_to_layout(dict(parse_qsl(query.lstrip("?")))) != layout
                outcomes["layout (round-trips)"] += 1
            except ExplorerError:
                outcomes["layout (too large for a link)"] += 1
        except ExplorerError:
            outcomes["message"] += 1
        except Exception as error:  # noqa: BLE001
            outcomes[f"raised {type(error).__name__}"] += 1
        slowest = max(slowest, time.perf_counter() - start)
    if broken:
        outcomes["round trip changed the layout"] = broken
    row("links: mutations of a valid link", outcomes, not broken and all(k.startswith(("layout", "message")) for k in outcomes), slowest)


HOSTILE_LIBRARY_NAMES = [
    "../escape",
    "../../etc/passwd",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "..",
    ".",
    ".hidden",
    "",
    " ",
    "trailing ",
    " leading",
    "x" * 65,
    "nul\x00byte",
    "new\nline",
    "tab\tname",
    "caf\u00e9",
    "\u202eevil",
    "CON",
    "a..b",
    "-dash",
    "_under",
    "emoji \U0001f600",
    "semi;colon",
    "colon:name",
    "star*",
    "q?",
    "quote'",
    'dq"',
    "<b>",
    "![t](x)",
    "[l](x)",
    "*bold*",
    "$HOME",
    "`cmd`",
    "~user",
    "a|b",
    "#hash",
    "%2e%2e",
    "..%2f",
    "name.json",
    "lock",
    ".lock",
    ".saving-x.tmp",
    "ok name-1.2",
]


def probe_library_names(folder: Path) -> None:
    folder = folder / "names"
    os.environ[library.LIBRARY_ENV] = str(folder / "library")
    outcomes, outside = Counter(), []
    layout = parse_layout(SEED_LAYOUT)
    for name in HOSTILE_LIBRARY_NAMES:
        try:
            library.save(name, layout)
            outcomes["saved inside the folder"] += 1
        except ExplorerError:
            outcomes["message"] += 1
        except Exception as error:  # noqa: BLE001
            outcomes[f"raised {type(error).__name__}"] += 1
    outside = [p for p in folder.rglob("*") if p.is_file() and p.parent != folder / "library"]
    if outside:
        outcomes["file outside the folder"] = len(outside)
    row("library: hostile names", outcomes, not outside and set(outcomes) <= {"saved inside the folder", "message"})


def _racer(folder, worker, barrier, plan, results):
    os.environ["EXPLORER_LIBRARY"] = folder
    from explorer.sharing import library
    from explorer.errors import ExplorerError
    from explorer.layout import SEED_LAYOUT, parse_layout

    for index, (operation, name, version) in enumerate(plan):
        layout = parse_layout({**SEED_LAYOUT, "name": f"worker {worker}"})
        barrier.wait()
        try:
            if operation == "replace":
                library.save(name, layout, replaces=version)
            elif operation == "rename":
                library.rename(name, f"{name} by {worker}")
            elif operation == "delete":
                library.delete(name)
            else:
                library.save(name, layout)
            results.put((index, worker, "won"))
        except ExplorerError:
            results.put((index, worker, "refused"))
        except Exception as error:  # noqa: BLE001
            results.put((index, worker, f"raised {type(error).__name__}"))


def probe_library_races(folder: Path, rounds: int = 480, processes: int = 4) -> None:
    shelf = folder / "races"
    os.environ[library.LIBRARY_ENV] = str(shelf)
    plan = []
    for index in range(rounds):
        operation = ("replace", "rename", "delete", "create")[index % 4]
        name = f"{operation} {index}"
        version = None if operation == "create" else library.save(name, parse_layout(SEED_LAYOUT)).version
        plan.append((operation, name, version))
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_racer, args=(str(shelf), w, barrier, plan, results)) for w in range(processes)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=600) for _ in range(rounds * processes)]
    for worker in workers:
        worker.join()
    by_round: dict[int, Counter] = {}
    for index, _, outcome in outcomes:
        by_round.setdefault(index, Counter())[outcome] += 1
    for operation in ("replace", "rename", "delete", "create"):
        rounds_of = [c for i, c in by_round.items() if plan[i][0] == operation]
        counts = Counter(outcome for c in rounds_of for outcome in c.elements())
        one_winner = sum(c["won"] == 1 for c in rounds_of)
        counts[f"rounds with exactly one winner: {one_winner} of"] = 0
        text_rounds = len(rounds_of)
        held = one_winner == text_rounds and set(counts) - {"won", "refused"} <= {k for k in counts if k.startswith("rounds")}
        counts = Counter({k: v for k, v in counts.items() if v})
        ROWS.append(
            (
                f"library: concurrent {operation} (4 processes)",
                sum(counts.values()),
                ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; one winner in {one_winner}/{text_rounds} rounds",
                "yes" if held else "NO",
            )
        )
    leftovers = [p.name for p in shelf.iterdir() if p.name.startswith(".saving-")]
    ROWS.append(("library: temporaries left after the races", len(leftovers), str(len(leftovers)), "yes" if not leftovers else "NO"))


def probe_indivisible(folder: Path) -> None:
    outcomes, slowest = Counter(), 0.0
    for batch in (1, 3, 5, 7, 9, 11):
        data = copy.deepcopy(SEED_LAYOUT)
        data["model"]["options"].update(batch=batch, depth=256, layers=1)
        path = folder / f"b{batch}.json"
        path.write_text(json.dumps(data))
        code, seconds = run_cli("time", str(path), "--steps", "1")
        slowest = max(slowest, seconds)
        outcomes[{2: "refused before compiling (exit 2)"}.get(code, str(code))] += 1
    row("timing: indivisible layouts from the command line", outcomes, set(outcomes) == {"refused before compiling (exit 2)"}, slowest)


HOSTILE_NAMES = [
    "x\nimport os; os.system('id')",
    "a'); import os; ('",
    '"""',
    "'''",
    "\\",
    "# comment\nx = 1",
    "\r\nprint(1)",
    "\u2028y = 2",
    "![t](http://127.0.0.1:9/x.png)",
    "[Click to re-authenticate](http://127.0.0.1:9)",
    "<img src=x onerror=alert(1)>",
    "**bold** _it_ `code` $x$",
    ":red[alert]",
    "- list\n# heading",
    "1. item",
    "key: value\n- yaml",
    "{{template}}",
    "\x00nul",
    "\t tab",
    "end\\",
]


def probe_injection() -> None:
    outcomes = Counter()
    baseline = len(ast.parse(python_snippet(parse_layout(SEED_LAYOUT))).body)
    for name in HOSTILE_NAMES:
        data = copy.deepcopy(SEED_LAYOUT)
        data.update(name=name, rules=[[name[:64] or "x", "data"], ["hidden", "model"]])
        try:
            layout = parse_layout(data)
        except ExplorerError:
            outcomes["refused"] += 1
            continue
        try:
            tree = ast.parse(python_snippet(layout))
            assigned = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "layout_name"]
            safe_code = len(tree.body) == baseline and all(ast.literal_eval(n.value) == name for n in assigned)
        except SyntaxError:
            safe_code = False
        try:
            safe_yaml = yaml.safe_load(maxtext_yaml(layout))["logical_axis_rules"][0][0] == layout.rules[0].logical
        except yaml.YAMLError:
            safe_yaml = False
        shown = markdown_literal(name)
        safe_markdown = "\n" not in shown and not re.search(r"(?<!\\)[\[<*_`$]", shown)  # no unescaped mark
        round_trip = params_to_layout(dict(parse_qsl(layout_to_query(layout).lstrip("?")))) == layout
        for check, safe in (("code", safe_code), ("yaml", safe_yaml), ("markdown", safe_markdown), ("link", round_trip)):
            if not safe:
                outcomes[f"leaked into {check}"] += 1
        outcomes["data everywhere"] += safe_code and safe_yaml and safe_markdown and round_trip
    row("names: newlines, Markdown, HTML, code", outcomes, not any(k.startswith("leaked") for k in outcomes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--links", type=int, default=3000)
    parser.add_argument("--race-rounds", type=int, default=480)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        probe_files(rng, folder)
        probe_links(rng, args.links)
        probe_library_names(folder)
        probe_library_races(folder, args.race_rounds)
        probe_indivisible(folder)
        probe_injection()
    print("| class | tried | outcomes | held |")
    print("|---|---:|---|---|")
    for name, tried, outcomes, held in ROWS:
        print(f"| {name} | {tried:,} | {outcomes} | {held} |")


if __name__ == "__main__":
    main()
