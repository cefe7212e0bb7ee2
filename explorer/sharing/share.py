"""Sharing a layout: a readable link, and code for a training script.

The link carries the whole layout in query parameters a person can read and edit::

    ?name=seed-2x4&mesh=2x4&axes=data,model&rules=batch:data;hidden:model
     &model=mlp&options=batch:8;layers:4;depth:1024;scan:false[&types=explicit,explicit][&target=v5p-128]

In ``rules``, ``-`` replicates and ``,`` joins mesh axes (``batch:data,fsdp``); ``rules=maxtext`` (a MaxText
config's link, ``model=maxtext``) stands for the ~60 rules its config writes for its keys, which MaxText gives back
when the link opens (``maxtext.rules_for``; a link that lists them opens as before). Option
``types`` (only where some axis is Explicit) gives each mesh axis's type; ``dcn`` (``2x1``, only where given)
the slices each mesh axis spans on a multi-slice target (``mesh.dcn``). Option
values are JSON (``8``, ``false``), or a bare word for a string (``dtype:bfloat16``;
``NaN`` and ``Infinity`` are words too, never floats); a MaxText key's value, always text, is bare where the model
reads it back as the same text (``base_emb_dim:256``), else quoted once (``"1e-3"``). Each parameter is at most
``MAX_PARAM_LENGTH`` characters, and ``layout_to_query`` refuses a layout whose link
the decoder would refuse.
Tokens that contain a separator are percent-escaped. Decoding never imports a model's code:
it only builds a layout dict, which ``parse_layout`` validates (user factories stay
allow-listed); a ``rules=maxtext`` link asks the installed MaxText's config for its rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qsl, quote, unquote, urlencode

from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, Layout, json_value, layout_errors, parse_layout
from explorer.models import MAXTEXT
from explorer.specs import spec_axes

PARAMS = ("name", "mesh", "axes", "types", "dcn", "rules", "model", "options", "target")
_SAFE = '_-."'  # a JSON string's quotes stay quotes: the address bar escapes them once (%22), not twice (%2522)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")  # always re.fullmatch: "word\n" is not a word
_JSON_WORDS = ("true", "false", "null")
MAX_PARAM_LENGTH = 20_000


def _token(text: str) -> str:
    return quote(str(text), safe=_SAFE)


def _value_text(value: Any, text_model: bool = False) -> str:
    """An option's value in a link. ``text_model``: the model reads every option as text (MaxText's keys, whose values
    ``check_options`` writes as text), so a number is written bare where it reads back as the same text."""
    if isinstance(value, str) and _WORD.fullmatch(value) and value not in _JSON_WORDS:
        return _token(value)
    if text_model and isinstance(value, str) and _number_text(value) == value:
        return _token(value)
    return _token(json.dumps(value, separators=(",", ":")))


def _number_text(text: str) -> str | None:
    """The text a bare link value ``text`` reads back as in a text-only model: a JSON number's ``str``, else None.

    >>> _number_text("256"), _number_text("0.5"), _number_text("1e-3"), _number_text("true"), _number_text("07")
    ('256', '0.5', '0.001', None, None)
    """
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def layout_to_params(layout: Layout) -> dict[str, str]:
    """The layout as query parameters (a dict of strings), in the readable form above."""
    rules = []
    for rule in layout.rules:
        axes = rule.mesh_axes
        rules.append(f"{_token(rule.logical)}:{','.join(_token(a) for a in axes) if axes else '-'}")
    if _maxtexts_own_rules(layout):
        rules = [MAXTEXT]
    text_model = layout.model.name == MAXTEXT
    options = [f"{_token(k)}:{_value_text(v, text_model)}" for k, v in layout.model.options.items()]
    return (
        {
            "name": layout.name,
            "mesh": "x".join(str(s) for s in layout.mesh.shape),
            "axes": ",".join(_token(a) for a in layout.mesh.axes),
        }
        | ({"types": ",".join(layout.mesh.axis_types)} if layout.mesh.explicit else {})
        | ({"dcn": "x".join(str(s) for s in layout.mesh.dcn)} if layout.mesh.dcn is not None else {})
        | {
            "rules": ";".join(rules),
            "model": layout.model.name,
            "options": ";".join(options),
        }
        | ({"target": layout.target} if layout.target is not None else {})
    )


def _maxtexts_own_rules(layout: Layout) -> bool:
    """A MaxText layout whose rules are the ones its config writes (where MaxText is here to say so)."""
    if layout.model.name != MAXTEXT:
        return False
    from explorer.models import maxtext  # imported when used: a link of another model needs none

    try:
        own = maxtext.rules_for(dict(layout.model.options))
    except ExplorerError:  # MaxText not installed here, or refusing the keys: the rules are listed
        return False
    return [(r.logical, r.mesh_axes) for r in layout.rules] == [(name, spec_axes(axes)) for name, axes in own]


def _link_rules(text: str, model: str, options: dict[str, Any]) -> list[list[Any]]:
    """A link's ``rules``: its items, or for ``rules=maxtext`` of a MaxText link the rules MaxText writes for its keys."""
    if text == MAXTEXT and model == MAXTEXT:
        from explorer.models import maxtext

        return maxtext.rules_for(options)
    return _rules(text)


def layout_to_query(layout: Layout) -> str:
    """``?name=...&mesh=...``: what ``python -m explorer url`` prints; refused if the decoder would refuse it."""
    params = layout_to_params(layout)
    _check_lengths(params)
    return "?" + urlencode(params, safe=",:;")


def params_to_layout(params: Mapping[str, str]) -> Layout:
    """Rebuild and validate a layout from query parameters; ExplorerError if mangled, naming every problem.

    >>> params_to_layout({"mesh": "2xfour", "axes": "data", "model": "mlp", "rules": "batch"})
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: link: 2 problems: link parameter 'mesh': '2xfour' is not sizes joined by 'x', like 2x4; link parameter 'rules', item 0: 'batch' is not logical:mesh-axes
    """
    data = params_to_dict(params)
    errors = layout_errors(data)
    if errors:
        raise _all(list(errors))
    return parse_layout(data)


def _all(errors: list[ExplorerError]) -> ExplorerError:
    """One error for a link's problems: itself when there is one, else all of them in one sentence."""
    if len(errors) == 1:
        return errors[0]
    return ExplorerError("link", len(errors), "problems: " + "; ".join(str(e) for e in errors))


def layout_from_link(link: str) -> Layout:
    """The layout in a pasted link: a whole address, or only its query (with or without the ``?``).

    >>> layout_from_link("http://localhost:8501/?mesh=8&axes=data&rules=batch:data&model=mlp").mesh.shape
    (8,)
    >>> layout_from_link("mesh=2x4&axes=data,model&model=mlp").rules
    ()
    """
    text = link.strip()
    query = text.partition("?")[2] if "?" in text else text
    return params_to_layout(dict(parse_qsl(query.partition("#")[0])))


def params_to_dict(params: Mapping[str, Any]) -> dict[str, Any]:
    """The layout dict a link's parameters spell, not yet validated; ExplorerError naming every unreadable parameter."""
    missing = [key for key in ("mesh", "axes", "model") if key not in params]
    if missing:
        raise ExplorerError(
            "link", sorted(params), f"has no {', '.join(repr(k) for k in missing)} parameter (it needs mesh, axes and model)"
        )
    _check_lengths(params)
    errors: list[ExplorerError] = []

    def read(parse, text, default):
        try:
            return parse(text)
        except ExplorerError as error:
            errors.append(error)
            return default

    mesh = {"shape": read(_mesh_shape, params["mesh"], [1]), "axes": [unquote(a) for a in params["axes"].split(",") if a]}
    if params.get("types"):  # validated with the layout: each "auto" or "explicit", one per axis
        mesh["axis_types"] = [unquote(t) for t in params["types"].split(",")]
    if params.get("dcn"):  # the slices each mesh axis spans on a multi-slice target (mesh.dcn), sizes like the mesh's
        mesh["dcn"] = read(_mesh_shape, params["dcn"], None)
    options = read(_options, params.get("options", ""), {})
    data = {
        "name": params.get("name") or "shared",
        "mesh": mesh,
        "rules": read(lambda text: _link_rules(text, params["model"], options), params.get("rules", ""), []),
        "model": {"name": params["model"], "options": options},
    } | ({"target": params["target"]} if params.get("target") else {})
    if errors:
        raise _all(errors)
    return data


@dataclass(frozen=True)
class LeftOut:
    """A field of a link left out because it was bad."""

    param: str  # the link's parameter: target, rules, options, mesh (mesh, axes, types, dcn), model or name
    error: ExplorerError  # why, naming the field and its value
    instead: str  # what stands in, in words ("the rule is left out", "this process's devices instead")


def link_keeping_the_rest(params: Mapping[str, str]) -> tuple[Layout, tuple[LeftOut, ...]]:
    """The layout a link spells, each bad field left out and the rest kept: the layout, and what was left out.

    A bad target opens the layout for this process's devices, a bad rule drops that rule, a bad option that option,
    a bad mesh or model the seed's. A link without mesh, axes and model, or one too long, is refused whole
    (ExplorerError): there is no rest to keep.

    >>> layout, left_out = link_keeping_the_rest({"mesh": "2x4", "axes": "data,model", "model": "mlp",
    ...                                           "rules": "batch:data;hidden:nope", "target": "tpu-v9"})
    >>> layout.mesh.shape, layout.rules_for_flax(), layout.target
    ((2, 4), (('batch', 'data'),), None)
    >>> [(out.param, out.error.field, out.instead) for out in left_out]
    [('rules', 'rules[1]', 'the rule is left out'), ('target', 'target', "this process's devices instead")]
    """
    data, errors = _read(params)
    left_out = list(errors)
    for _ in range(len(data["rules"]) + len(data["model"]["options"]) + 8):  # each pass removes one field or item
        try:
            return parse_layout(data), tuple(sorted(left_out, key=lambda out: PARAMS.index(out.param)))  # in the link's order
        except ExplorerError as error:
            out = _leave_out(data, error)
            if out is None:
                raise _all([o.error for o in left_out] + [error]) from None
            left_out.append(out)
    raise _all([o.error for o in left_out])


def _read(params: Mapping[str, str]) -> tuple[dict[str, Any], list[LeftOut]]:
    """A link's layout dict with each unreadable piece left out (a rule or option item, the mesh), and why."""
    missing = [key for key in ("mesh", "axes", "model") if key not in params]
    if missing:
        params_to_dict(params)  # raises: it names what is missing
    _check_lengths(params)
    errors: list[LeftOut] = []
    rules, options = [], {}
    for item in (t for t in params.get("options", "").split(";") if t):
        try:
            options |= _options(item)
        except ExplorerError as error:
            errors.append(LeftOut("options", error, "the option is left out"))
    items = [t for t in params.get("rules", "").split(";") if t]
    if items == [MAXTEXT] and params.get("model") == MAXTEXT:
        try:
            rules = _link_rules(MAXTEXT, MAXTEXT, options)
        except ExplorerError as error:  # MaxText not installed here: the link's layout without them, and why
            errors.append(LeftOut("rules", error, "the rules are left out"))
        items = []
    for index, item in enumerate(items):
        try:
            rules += _rules(item)
        except ExplorerError as error:
            errors.append(
                LeftOut("rules", ExplorerError(f"link parameter 'rules', item {index}", item, error.problem), "the rule is left out")
            )
    try:
        mesh = {"shape": _mesh_shape(params["mesh"]), "axes": [unquote(a) for a in params["axes"].split(",") if a]}
        if params.get("types"):
            mesh["axis_types"] = [unquote(t) for t in params["types"].split(",")]
        if params.get("dcn"):
            mesh["dcn"] = _mesh_shape(params["dcn"])
    except ExplorerError as error:
        mesh = dict(SEED_LAYOUT["mesh"])
        errors.append(LeftOut("mesh", error, _SEED_MESH))
    data = {
        "name": params.get("name") or "shared",
        "mesh": mesh,
        "rules": rules,
        "model": {"name": params["model"], "options": options},
    } | ({"target": params["target"]} if params.get("target") else {})
    return data, errors


_SEED_MESH = "the seed's mesh instead ({}, axes {})".format(
    "x".join(map(str, SEED_LAYOUT["mesh"]["shape"])), ", ".join(SEED_LAYOUT["mesh"]["axes"])
)


def _leave_out(data: dict[str, Any], error: ExplorerError) -> LeftOut | None:
    """Take the part ``error`` names out of ``data`` (a layout dict), putting a valid stand-in there (None: none)."""
    field = error.field
    rule = re.match(r"rules\[(\d+)\]", field)
    if field == "target":
        del data["target"]
        return LeftOut("target", error, "this process's devices instead")
    if field == "name":
        data["name"] = "shared"
        return LeftOut("name", error, "the name 'shared' instead")
    if field.startswith(("mesh.axis_types", "mesh.dcn")):
        data["mesh"].pop("axis_types" if field.startswith("mesh.axis_types") else "dcn", None)
        return LeftOut(
            "mesh", error, "every axis Auto instead" if field.startswith("mesh.axis_types") else "the slices per axis are left out"
        )
    if field.startswith("mesh"):
        data["mesh"] = dict(SEED_LAYOUT["mesh"])
        return LeftOut("mesh", error, _SEED_MESH)
    if rule and int(rule[1]) < len(data["rules"]):
        del data["rules"][int(rule[1])]
        return LeftOut("rules", error, "the rule is left out")
    if field.startswith("rules") and data["rules"]:
        data["rules"] = []
        return LeftOut("rules", error, "the rules are left out")
    option = field.removeprefix("model.options.")
    if option != field and option in data["model"]["options"]:
        del data["model"]["options"][option]
        return LeftOut("options", error, "the option is left out (its default instead)")
    if field.startswith("model") and data["model"] != SEED_LAYOUT["model"]:
        data["model"] = {"name": SEED_LAYOUT["model"]["name"], "options": dict(SEED_LAYOUT["model"]["options"])}
        return LeftOut("model", error, f"the seed's model, {SEED_LAYOUT['model']['name']}, instead")
    return None


def _check_lengths(params: Mapping[str, Any]) -> None:
    for key in PARAMS:
        value = params.get(key, "")
        if not isinstance(value, str):
            raise ExplorerError(f"link parameter '{key}'", value, "is not text")
        if len(value) > MAX_PARAM_LENGTH:
            raise ExplorerError(
                f"link parameter '{key}'", value[:40], f"is longer than {MAX_PARAM_LENGTH:,} characters, the limit for a link"
            )


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


# --- the Arrays page's op links -------------------------------------------------------------
#
#   ?mesh=4x2&axes=a,b&arrays=y:8192x8192:float32:a,-;z:8192x8192:float32:-,b&expr=jnp.dot(y, z)
#
# In ``arrays``, items are name:shape:dtype:spec; a spec's entries are joined by ``,``,
# ``-`` replicates a dimension and ``*`` joins mesh axes (``x*y``: sharded over their product). ``out`` is the output
# constraint in the same spelling (empty: replicated, P()); without it XLA chooses.

OP_PARAMS = ("mesh", "axes", "types", "arrays", "expr", "out")


def _spec_token(spec) -> str:
    from explorer.specs import spec_axes

    return ",".join("*".join(_token(a) for a in spec_axes(e)) or "-" for e in spec)


def _spec_from_token(field: str, text: str) -> list[Any]:
    entries: list[Any] = []
    for part in (p for p in text.split(",") if p) if text else ():
        axes = [unquote(a) for a in part.split("*")]
        if part == "-":
            entries.append(None)
        elif any(not a for a in axes):
            raise ExplorerError(field, text, "has an empty mesh axis name (write - to replicate a dimension)")
        else:
            entries.append(axes[0] if len(axes) == 1 else axes)
    return entries


def op_to_params(op) -> dict[str, str]:
    """The op spec as query parameters (a dict of strings), in the readable form above."""
    arrays = ";".join(f"{name}:{'x'.join(str(s) for s in a.shape)}:{a.dtype}:{_spec_token(a.spec)}" for name, a in op.arrays.items())
    params = (
        {
            "mesh": "x".join(str(s) for s in op.mesh.shape),
            "axes": ",".join(_token(a) for a in op.mesh.axes),
        }
        | ({"types": ",".join(op.mesh.axis_types)} if op.mesh.explicit else {})
        | {
            "arrays": arrays,
            "expr": op.expr,
        }
    )
    if op.out_spec is not None:
        params["out"] = _spec_token(op.out_spec)
    return params


def op_to_query(op) -> str:
    return "?" + urlencode(op_to_params(op), safe=",:;()*", quote_via=quote)


def is_op_link(params: Mapping[str, Any]) -> bool:
    return "arrays" in params or "expr" in params


def params_to_op(params: Mapping[str, Any]):
    """Rebuild and validate an op spec from query parameters; ExplorerError if mangled. Nothing is evaluated."""
    from explorer.ops.op_spec import parse_op

    for key in ("mesh", "axes", "arrays", "expr"):
        if key not in params:
            raise ExplorerError("link", sorted(params), f"has no '{key}' parameter (an op link needs mesh, axes, arrays and expr)")
    for key in OP_PARAMS:
        value = params.get(key, "")
        if not isinstance(value, str):
            raise ExplorerError(f"link parameter '{key}'", value, "is not text")
        if len(value) > MAX_PARAM_LENGTH:
            raise ExplorerError(f"link parameter '{key}'", value[:40], f"is longer than {MAX_PARAM_LENGTH:,} characters")
    arrays: dict[str, Any] = {}
    for index, item in enumerate(t for t in params["arrays"].split(";") if t):
        fields = item.split(":")
        if len(fields) != 4:
            raise ExplorerError(f"link parameter 'arrays', item {index}", item, "is not name:shape:dtype:spec")
        name, shape, dtype, spec = fields
        sizes = [p for p in shape.split("x") if p]
        if not all(re.fullmatch(r"\d{1,10}", s) for s in sizes):
            raise ExplorerError(f"link parameter 'arrays', item {index}", shape, "is not sizes joined by 'x', like 8192x8192")
        name = unquote(name)
        if name in arrays:
            raise ExplorerError("link parameter 'arrays'", name, "names two arrays")
        arrays[name] = {"shape": [int(s) for s in sizes], "dtype": unquote(dtype), "spec": _spec_from_token(f"arrays.{name}.spec", spec)}
    mesh = {"shape": _mesh_shape(params["mesh"]), "axes": [unquote(a) for a in params["axes"].split(",") if a]}
    if params.get("types"):
        mesh["axis_types"] = [unquote(t) for t in params["types"].split(",")]
    return parse_op(
        {
            "mesh": mesh,
            "arrays": arrays,
            "expr": params["expr"],
            "out_spec": _spec_from_token("out_spec", params["out"]) if "out" in params else None,
        }
    )
