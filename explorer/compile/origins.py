"""Every value's sharding after propagation on Auto axes, and where each of its axes came from (Shardy's origins).

What the pinned JAX (0.12.0.1) exposes: neither a JAX option nor an XLA debug option turns on Shardy's
propagation debugging in a compile (XLA's ``DebugOptions`` have only ``xla_sdy_export_all_reduce_scatter``;
``sdy-propagation-pipeline`` refuses ``debug-sharding-origins``). But jaxlib's MLIR bindings register Shardy's
passes, and ``sdy-aggressive-propagate{debug-sharding-origins=true}`` accepts the option: run on the lowered
program (``lowered.compiler_ir("stablehlo")``, a copy), it writes on every value its propagated sharding
(``sdy.sharding``) and, per mesh axis, its origin (``sdy.sharding_origins``): ``"self"`` on an input or a
constraint that names the axis, ``"input: 0"``, ``"output: 0"`` or ``"constraint_3"`` (a
``sdy.sharding_constraint`` named ``sdy.sharding_origin_name``) on a value that received it. This is Shardy's
propagation run by us on the program JAX hands XLA, not read back from XLA's compile (the compile does not keep
the origins); ``tests/explorer/compile/test_origins.py`` checks that the outputs' shardings agree with the compiled
executable's. Each value's source line comes from the program's locations (``loc(callsite(...))``), the innermost
frame outside JAX, Flax, optax, the standard library and the explorer (``sources.user_frame``: none for the optimizer).

    >>> axis_origins('[{data = "input: 0", model = "constraint_0"}]')
    {'data': 'input: 0', 'model': 'constraint_0'}
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Any

from explorer.hlo.sources import Frame, user_frame

PASS = "builtin.module(sdy-aggressive-propagate{debug-sharding-origins=true})"
_OP = re.compile(
    r"^\s*(?P<results>%[\w#:, %]+?)\s*=\s*\"?(?P<op>[a-z_]+\.[\w.]+)\"?[ (].*?(?P<attrs>\{sdy\.[^\n]*?\})?[^{}\n]*loc\(#loc(?P<loc>\d+)\)\s*$"
)
_SHARDING = re.compile(r"sdy\.sharding = #sdy\.sharding(?:_per_value)?<\[?(?P<value><@\w+, \[.*?\]>)")
_ORIGINS = re.compile(r"sdy\.sharding_origins = (?P<origins>\[?\{[^\]]*?\}\]?)")
_LOC = re.compile(r"^#loc(?P<id>\d+) = loc\((?P<body>.*)\)\s*$")


@dataclasses.dataclass(frozen=True)
class PropagatedValue:
    """One op's result after Shardy's propagation: its sharding per dimension (mesh axes; ``open``: Shardy may
    still add axes) and, per mesh axis, where it came from; ``where`` the model's line, ``op_name`` JAX's name."""

    index: int
    op: str
    op_name: str
    where: str
    spec: tuple[tuple[str, ...], ...]
    origins: dict[str, str]
    described: dict[str, str] = dataclasses.field(default_factory=dict)  # each origin in words: the input's path, the constraint's line

    @property
    def spec_text(self) -> str:
        """The sharding per dimension as the text and the page write it: ``(data, -)``, ``(dataxmodel, -)``."""
        return "(" + ", ".join("x".join(d) or "-" for d in self.spec) + ")"

    @property
    def origin_text(self) -> str:
        """Where each mesh axis of the sharding came from, as the text and the page write it (``model ← constraint at
        mlp.py:23``); an axis Shardy recorded no origin for says so; ``replicated`` where no axis shards the value."""
        axes = dict.fromkeys([axis for dimension in self.spec for axis in dimension] + list(self.described))
        if not axes:
            return "replicated"
        return "; ".join(f"{axis} ← {self.described.get(axis, 'no origin recorded').removeprefix('the ')}" for axis in axes)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "op_name": self.op_name,
            "where": self.where,
            "spec": [list(d) for d in self.spec],
            "origins": dict(self.origins),
            "described": dict(self.described),
        }


def propagated(lowered: Any) -> str:
    """The lowered program after Shardy's propagation with origins, as text with its locations."""
    from jaxlib.mlir import ir, passmanager

    module = lowered.compiler_ir("stablehlo")
    with module.context:
        copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        passmanager.PassManager.parse(PASS).run(copy.operation)
        return copy.operation.get_asm(enable_debug_info=True)


def values(text: str) -> tuple[PropagatedValue, ...]:
    """Every op result with a propagated sharding in ``propagated``'s text, in program order."""
    locations = _locations(text)
    names = _origin_names(text, locations)
    found = []
    for line in text.splitlines():
        sharding = _SHARDING.search(line)
        op = _OP.match(line)
        if sharding is None or op is None or line.lstrip().startswith("func.func"):
            continue
        origins = _ORIGINS.search(line)
        name, frames = _resolve(locations, int(op["loc"]))
        user = _user(frames)
        found.append(
            PropagatedValue(
                index=len(found),
                op=op["op"],
                op_name=name,
                where=f"{os.path.basename(user.file)}:{user.line}" if user else "",
                spec=dimension_axes(sharding["value"]),
                origins=axis_origins(origins["origins"]) if origins else {},
            )
        )
        found[-1].described.update({axis: names.get(origin, origin) for axis, origin in found[-1].origins.items()})
    return tuple(found)


def _origin_names(text: str, locations: dict[int, str]) -> dict[str, str]:
    """Shardy's origin names in words: ``input: 3`` -> the main function's argument 3 by JAX's name for it
    (``state.params['Dense_0']['kernel'].value``), ``output: 14`` -> the result's (``state.opt_state[0].mu[...]``),
    ``constraint_2`` -> the line of the constraint it names."""
    names: dict[str, str] = {}
    main = next((line for line in text.splitlines() if "func.func public @main" in line), "")
    for index, argument in enumerate(re.split(r"%arg\d+: ", main)[1:]):
        label = re.search(r'loc\("([^"]*)"\)', argument)
        names[f"input: {index}"] = f"input {label[1]}" if label else f"input {index}"
    # Outputs by JAX's name for them: the step returns the new state, so "result.opt_state..." is the state leaf
    # "state.opt_state...", as its input is named (not Shardy's "output: 14").
    results = main.partition(") -> (")[2]
    for index, label in enumerate(re.findall(r'jax\.result_info = "([^"]*)"', results)):
        names[f"output: {index}"] = "output " + re.sub(r"^result", "state", label)
    for line in text.splitlines():
        constraint = re.search(r'sdy\.sharding_origin_name = "(?P<name>[^"]+)".*loc\(#loc(?P<loc>\d+)\)\s*$', line)
        if constraint:
            frames = _resolve(locations, int(constraint["loc"]))[1]
            user = _user(frames)
            names[constraint["name"]] = f"the constraint at {os.path.basename(user.file)}:{user.line}" if user else constraint["name"]
    return names


def _user(frames: list[tuple[str, int]]) -> Frame | None:
    """The model's line among a location's frames (innermost first), as for a collective (``sources.user_frame``)."""
    return user_frame(Frame(file, line, "") for file, line in frames)


def dimension_axes(sharding: str) -> tuple[tuple[str, ...], ...]:
    """``(("data",), ())`` from ``<@mesh, [{"data", ?}, {}]>`` (the first value's, for a per-value sharding)."""
    dims = re.search(r"\[(.*?)\]>", sharding)
    return tuple(tuple(re.findall(r'"([^"]+)"', d)) for d in re.findall(r"\{([^}]*)\}", dims[1] if dims else ""))


def axis_origins(text: str) -> dict[str, str]:
    """Mesh axis -> origin, from ``sdy.sharding_origins`` (the first value's, for several results)."""
    first = re.search(r"\{([^}]*)\}", text)
    return dict(re.findall(r'(\w+) = "([^"]*)"', first[1])) if first else {}


def _locations(text: str) -> dict[int, str]:
    found = {}
    for line in text.splitlines():
        match = _LOC.match(line)
        if match:
            found[int(match["id"])] = match["body"]
    return found


def _resolve(locations: dict[int, str], number: int) -> tuple[str, list[tuple[str, int]]]:
    """(JAX's op name, the frames innermost first) of location ``number``."""

    @functools.cache
    def walk(n: int) -> tuple[str, tuple[tuple[str, int], ...]]:
        body = locations.get(n, "unknown")
        callsite = re.fullmatch(r"callsite\(#loc(\d+) at #loc(\d+)\)", body)
        if callsite:
            inner, outer = walk(int(callsite[1])), walk(int(callsite[2]))
            return inner[0] or outer[0], inner[1] + outer[1]
        named = re.fullmatch(r'"(?P<name>[^"]*)"\(#loc(?P<inner>\d+)\)', body)
        if named:
            name, frames = walk(int(named["inner"]))
            return (named["name"] if named["name"].startswith("jit(") else name), frames
        file = re.fullmatch(r'"(?P<file>[^"]*)":(?P<line>\d+):.*', body)
        if file:
            return "", ((file["file"], int(file["line"])),)
        return "", ()

    name, frames = walk(number)
    return name, list(frames)


def matching(found: tuple[PropagatedValue, ...], query: str = "") -> tuple[PropagatedValue, ...]:
    """The values whose line, op name, axes or origins contain every word of ``query`` (case-insensitive)."""
    words = query.lower().split()
    text = lambda v: " ".join([v.where, v.op_name, str(v.spec), *v.described.values()]).lower()  # noqa: E731
    return tuple(v for v in found if all(w in text(v) for w in words))


def of_layout(layout: Any) -> tuple[PropagatedValue, ...]:
    """Every value of ``layout``'s train step (forward and backward) after Shardy's propagation, with its origins."""
    from explorer.compile.compiled import lower_step

    return values(propagated(lower_step(layout)))
