"""Rules presets fitted to one model, mesh and size, so that JAX accepts the layout they give.

``explorer.rules.preset_rules`` writes a preset for a mesh's axes and a model's logical
names. A preset written that way can still give a layout JAX refuses: GPT-2's vocabulary
(50257) over a tensor axis of 2, or under NNX semantics two dimensions of one array on
the same mesh axis. ``fit_preset`` analyzes the layout the preset gives and leaves each
such logical name unsharded (``[name, null]``), saying why in a note, until nothing is
refused. Under NNX a model's name that is itself a mesh axis passes through, as NNX does.

>>> from explorer.layout import parse_layout
>>> gpt2 = parse_layout({"mesh": {"shape": [4, 2], "axes": ["data", "tensor"]}, "model": {"name": "transformer",
...     "options": {"batch": 8, "seq_len": 64, "layers": 1, "d_model": 64, "heads": 2, "kv_heads": 2, "head_dim": 32,
...                 "mlp_dim": 128, "vocab": 101}}})
>>> fitted = fit_preset("tensor-parallel", gpt2)
>>> ("vocab", None) in fitted.rules
True
>>> fitted.notes[0].split(":")[0]
"'vocab' left unsharded"
"""

from __future__ import annotations

import dataclasses
import math

from explorer.analysis.analyzer import analyze, logical_names, model_of
from explorer.errors import ExplorerError, NeedsExplicitAxes
from explorer.analysis.report import ERROR_CODES
from explorer.layout import SEED_LAYOUT, Layout
from explorer.rules import PRESETS, RulePair, preset_rules

# Whole layouts a newcomer opens in one pick (the sidebar's Examples), each a file of ``layouts/`` too (the same layout,
# for the command line). The transformer's rules are the fsdp+tensor-parallel preset fitted to its mesh and sizes.
EXAMPLES: dict[str, dict] = {
    "Flax guide's MLP, Auto axes": SEED_LAYOUT,
    "Transformer, Explicit axes": {
        "name": "transformer-explicit-2x4",
        "mesh": {"shape": [2, 4], "axes": ["data", "model"], "axis_types": ["explicit", "explicit"]},
        "rules": [
            ["batch", "data"],
            ["mlp", "model"],
            ["heads", "model"],
            ["kv_heads", "model"],
            ["vocab", "model"],
            ["embed", "data"],
            ["kv", None],
            ["length", None],
        ],
        "model": {"name": "transformer", "options": {}},
    },
}

# The preset a model's own guide or recipe uses: what the sidebar offers after a model switch.
MODEL_PRESETS = {"mlp": "flax-guide", "nnx-guide": "flax-guide", "transformer": "fsdp+tensor-parallel"}
DEFAULT_PRESET = "fsdp"


@dataclasses.dataclass(frozen=True)
class FittedPreset:
    """A preset written for one layout's model, mesh and sizes.

    ``rules``: the rules, in order; ``notes``: one sentence per logical name the preset
    would shard but leaves unsharded (and why); ``refused``: what JAX would still refuse
    that no rule causes (a mesh axis the model fixes by hand and the mesh lacks), empty
    for every built-in model on a mesh with two axes or more.
    """

    preset: str
    rules: tuple[RulePair, ...]
    notes: tuple[str, ...]
    refused: tuple[str, ...]


def example_layout(title: str) -> Layout:
    """The example layout ``title`` (a key of ``EXAMPLES``), validated."""
    from explorer.layout import parse_layout

    if title not in EXAMPLES:
        raise ExplorerError("example", title, f"is not an example layout; choose one of {sorted(EXAMPLES)}")
    return parse_layout(EXAMPLES[title])


def model_preset(model_name: str) -> str:
    """The preset to offer for ``model_name`` (its guide's, else FSDP)."""
    return MODEL_PRESETS.get(model_name, DEFAULT_PRESET)


def fit_preset(preset: str, layout: Layout) -> FittedPreset:
    """``preset`` written for ``layout``'s mesh and model (its rules are ignored), fitted so that JAX accepts it."""
    names = logical_names(layout.model, tuple(layout.mesh.axes))
    named = {logical for logical, _ in PRESETS[preset](layout.mesh.axes[0], layout.mesh.axes[-1])} if preset in PRESETS else set()
    rules = list(preset_rules(preset, layout.mesh.axes, names=names))
    framework = model_of(layout.model_copy(update={"rules": ()})).framework
    if framework == "nnx":  # a name that is a mesh axis passes through (NNX's own way), unless the preset shards it
        rules = [r for r in rules if not (r[1] is None and r[0] in layout.mesh.axes and r[0] not in named)]
    sizes = dict(zip(layout.mesh.axes, layout.mesh.shape))
    notes: list[str] = []
    for _ in range(len(rules) + 1):
        report = _fitting_report(_with_rules(layout, rules))
        bad = _refused_rules(report, sizes)
        if not bad:
            break
        for index, reason in sorted(bad.items()):
            name = rules[index][0]
            notes.append(f"{name!r} left unsharded: {reason}")
            rules[index] = (name, None)
    refused = tuple(w.message for w in report.warnings if w.code in ERROR_CODES)
    return FittedPreset(preset, tuple(rules), tuple(notes), refused)


def _fitting_report(layout: Layout):
    """The report a preset is fitted on. On Explicit axes JAX refuses a dimension the mesh does not divide while
    tracing, so the report comes from the same layout on Auto axes, where it is a finding (the rules resolve the same
    way); a model written for Explicit axes only (``NeedsExplicitAxes`` on Auto) is read on its own mesh."""
    from explorer.layout import parse_layout

    if "explicit" in layout.mesh.types:
        data = layout.to_dict()
        data["mesh"] = {key: value for key, value in data["mesh"].items() if key != "axis_types"}
        try:
            return analyze(parse_layout(data))
        except NeedsExplicitAxes:
            pass
    return analyze(layout)


def _with_rules(layout: Layout, rules: list[RulePair]) -> Layout:
    from explorer.layout import parse_layout

    return parse_layout({**layout.to_dict(), "rules": [[logical, axes] for logical, axes in rules]})


def _refused_rules(report, sizes: dict[str, int]) -> dict[int, str]:
    """Rule index -> why JAX would refuse a dimension that rule decides (the first reason found)."""
    bad: dict[int, str] = {}
    for info in report.arrays:
        taken = {axis for t in info.trace if t.rule is None for axis in t.mesh_axes}  # fixed by the model
        for t in info.trace:
            if t.rule is None or not t.mesh_axes:
                continue
            product = math.prod(sizes[a] for a in t.mesh_axes if a in sizes)
            size = info.shape[t.dim]
            twice = [a for a in t.mesh_axes if a in taken]
            if product > 1 and size % product:
                bad.setdefault(
                    t.rule, f"{info.path} dim {t.dim} has size {size}, which mesh axes {' x '.join(t.mesh_axes)} ({product}) do not divide."
                )
            elif twice:
                bad.setdefault(t.rule, f"{info.path} would use mesh axis {twice[0]!r} for two dimensions.")
            taken.update(t.mesh_axes)
    return bad
