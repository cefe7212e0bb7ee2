"""Sharing a layout: a readable link, and code for a training script.

The link carries the whole layout in query parameters a person can read and edit::

    ?name=seed-2x4&mesh=2x4&axes=data,model&rules=batch:data;hidden:model
     &model=mlp&options=batch:8;layers:4;depth:1024;scan:false

In ``rules``, ``-`` replicates and ``,`` joins mesh axes (``batch:data,fsdp``). Option
values are JSON (``8``, ``false``), or a bare word for a string (``dtype:bfloat16``;
``NaN`` and ``Infinity`` are words too, never floats). Each parameter is at most
``MAX_PARAM_LENGTH`` characters, and ``layout_to_query`` refuses a layout whose link
the decoder would refuse.
Tokens that contain a separator are percent-escaped. Decoding never imports anything:
it only builds a layout dict, which ``parse_layout`` validates (user factories stay
allow-listed).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping
from urllib.parse import quote, unquote, urlencode

from explorer.errors import ExplorerError
from explorer.layout import Layout, json_value, parse_layout

PARAMS = ("name", "mesh", "axes", "rules", "model", "options")
_SAFE = "_-."
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")  # always re.fullmatch: "word\n" is not a word
_JSON_WORDS = ("true", "false", "null")
MAX_PARAM_LENGTH = 20_000


def _token(text: str) -> str:
    return quote(str(text), safe=_SAFE)


def _value_text(value: Any) -> str:
    if isinstance(value, str) and _WORD.fullmatch(value) and value not in _JSON_WORDS:
        return _token(value)
    return _token(json.dumps(value, separators=(",", ":")))


def layout_to_params(layout: Layout) -> dict[str, str]:
    """The layout as query parameters (a dict of strings), in the readable form above."""
    rules = []
    for rule in layout.rules:
        axes = rule.mesh_axes
        rules.append(f"{_token(rule.logical)}:{','.join(_token(a) for a in axes) if axes else '-'}")
    options = [f"{_token(k)}:{_value_text(v)}" for k, v in layout.model.options.items()]
    return {
        "name": layout.name,
        "mesh": "x".join(str(s) for s in layout.mesh.shape),
        "axes": ",".join(_token(a) for a in layout.mesh.axes),
        "rules": ";".join(rules),
        "model": layout.model.name,
        "options": ";".join(options),
    }


def layout_to_query(layout: Layout) -> str:
    """``?name=...&mesh=...``: what ``python -m explorer url`` prints; refused if the decoder would refuse it."""
    params = layout_to_params(layout)
    _check_lengths(params)
    return "?" + urlencode(params, safe=",:;")


def params_to_layout(params: Mapping[str, str]) -> Layout:
    """Rebuild and validate a layout from query parameters; ExplorerError if mangled."""
    data = params_to_dict(params)
    return parse_layout(data)


def params_to_dict(params: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("mesh", "axes", "model"):
        if key not in params:
            raise ExplorerError("link", sorted(params), f"has no '{key}' parameter (it needs mesh, axes and model)")
    _check_lengths(params)
    return {
        "name": params.get("name") or "shared",
        "mesh": {"shape": _mesh_shape(params["mesh"]), "axes": [unquote(a) for a in params["axes"].split(",") if a]},
        "rules": _rules(params.get("rules", "")),
        "model": {"name": params["model"], "options": _options(params.get("options", ""))},
    }


def _check_lengths(params: Mapping[str, Any]) -> None:
    for key in PARAMS:
        value = params.get(key, "")
        if not isinstance(value, str):
            raise ExplorerError(f"link parameter '{key}'", value, "is not text")
        if len(value) > MAX_PARAM_LENGTH:
            raise ExplorerError(f"link parameter '{key}'", value[:40], f"is longer than {MAX_PARAM_LENGTH:,} characters, the limit for a link")


def _mesh_shape(text: str) -> list[Any]:
    sizes = []
    for part in re.split(r"[x,]", text):
        if not re.fullmatch(r"\d{1,7}", part):
            raise ExplorerError("link parameter 'mesh'", text, "is not sizes joined by 'x', like 2x4")
        sizes.append(int(part))
    return sizes


def _rules(text: str) -> list[list[Any]]:
    rules = []
    for index, item in enumerate(t for t in text.split(";") if t):
        if item.count(":") != 1:
            raise ExplorerError(f"link parameter 'rules', item {index}", item, "is not logical:mesh-axes")
        logical, axes = item.split(":")
        if axes == "-":
            mesh: Any = None
        else:
            parts = [unquote(a) for a in axes.split(",")]
            mesh = parts[0] if len(parts) == 1 else parts
        rules.append([unquote(logical), mesh])
    return rules


def _options(text: str) -> dict[str, Any]:
    options = {}
    for item in (t for t in text.split(";") if t):
        if item.count(":") != 1:
            raise ExplorerError("link parameter 'options'", item, "is not name:value")
        key, raw = item.split(":")
        name, value = unquote(key), unquote(raw)
        if _WORD.fullmatch(value) and value not in _JSON_WORDS:
            options[name] = value
        else:
            options[name] = json_value(value, f"link option {name!r}")
    return options


def python_snippet(layout: Layout) -> str:
    """The mesh and rules as code to paste into a training script (the Flax guide's recipe).

    Every name from the layout (which may come from someone else's link) appears only
    inside a ``repr`` string literal, so no name can add a line or a statement.
    """
    rules = "\n".join(f"    ({rule.logical!r}, {_mesh_repr(rule)})," for rule in layout.rules)
    axis_types = ", ".join(["AxisType.Auto"] * len(layout.mesh.axes))
    return (
        "import jax\n"
        "import flax.linen as nn\n"
        "from jax.sharding import AxisType\n\n"
        "# Generated by Partition Explorer. Names are data: they appear only as string literals.\n"
        f"layout_name = {layout.name!r}\n"
        f"mesh = jax.make_mesh({tuple(layout.mesh.shape)!r}, {tuple(layout.mesh.axes)!r}, axis_types=({axis_types},))\n"
        f"rules = (\n{rules}\n)\n\n"
        "# Linen resolves rules in order: the first whose mesh axes are free wins.\n"
        "abstract_state = jax.eval_shape(init_fn, jax.random.key(0), x)\n"
        "state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract_state), mesh, rules)\n"
        "with jax.set_mesh(mesh), nn.logical_axis_rules(rules):\n"
        "    ...  # jax.jit(init_fn, out_shardings=state_sharding), then jit the train step\n"
    )


def _mesh_repr(rule) -> str:
    axes = rule.mesh_axes
    if not axes:
        return "None"
    return repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))


def maxtext_yaml(layout: Layout) -> str:
    """The mesh axes and rules as MaxText-style YAML (``[]`` replicates).

    Names are JSON-quoted (valid YAML double-quoted scalars, ASCII escapes only), so none can start a line.
    """
    lines = [f"# Generated by Partition Explorer from the layout {json.dumps(layout.name)}", f"mesh_axes: {json.dumps(list(layout.mesh.axes))}", "logical_axis_rules: ["]
    for rule in layout.rules:
        axes = rule.mesh_axes
        target = json.dumps(axes[0]) if len(axes) == 1 else json.dumps(list(axes))
        lines.append(f"  [{json.dumps(rule.logical)}, {target}],")
    lines.append("]")
    return "\n".join(lines)
