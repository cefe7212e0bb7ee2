"""A layout: the mesh, the logical-to-mesh rules and the model, as one frozen value.

The JSON file format is a contract shared with teammates::

    {"name": "seed-2x4",
     "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
     "rules": [["batch", "data"], ["hidden", "model"]],
     "model": {"name": "mlp", "options": {"batch": 8, "layers": 4, "depth": 1024, "scan": false}}}

Validation is pydantic's; every failure is turned into one ``ExplorerError`` whose
message names the field (``mesh.shape[1]``) and the offending value. Our own
validators raise ``ExplorerError`` directly (it is a ValueError, so pydantic carries
it through) when they know a better field path than pydantic would report.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from explorer.errors import ExplorerError
from explorer.rules import MeshAxes, spec_axes, spec_entry

MAX_DEVICES = 65_536
AXIS_NAME = r"^[A-Za-z_][A-Za-z0-9_\-]{0,31}$"

# A rule's mesh field as the file writes it (rules.SpecEntry, strictly typed for validation).
RuleMesh = Union[None, StrictStr, tuple[StrictStr, ...]]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MeshSpec(_Frozen):
    """A device mesh: its shape and one name per axis, e.g. ``(2, 4)`` and ``("data", "model")``."""

    shape: tuple[StrictInt, ...] = Field(min_length=1, max_length=8)
    axes: tuple[Any, ...] = Field(min_length=1, max_length=8)

    @field_validator("shape", mode="before")
    @classmethod
    def _whole_sizes(cls, shape: Any) -> Any:
        for i, size in enumerate(shape if isinstance(shape, (list, tuple)) else ()):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ExplorerError(
                    f"mesh.shape[{i}]", size, "is not a positive whole number; a mesh shape is sizes like [2, 4]"
                )
        return shape

    @field_validator("shape")
    @classmethod
    def _positive_sizes(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if math.prod(shape) > MAX_DEVICES:
            raise ExplorerError(
                "mesh.shape", list(shape),
                f"needs {math.prod(shape):,} devices; the explorer plans meshes of at most {MAX_DEVICES:,}",
            )
        return shape

    @field_validator("axes")
    @classmethod
    def _named_axes(cls, axes: tuple[Any, ...]) -> tuple[str, ...]:
        for i, name in enumerate(axes):
            if not isinstance(name, str) or not re.match(AXIS_NAME, name):
                raise ExplorerError(
                    f"mesh.axes[{i}]", name,
                    "is not an axis name (letters, digits, '_' or '-', starting with a letter, at most 32)",
                )
        for name in axes:
            if axes.count(name) > 1:
                raise ExplorerError("mesh.axes", list(axes), f"names the axis {name!r} twice")
        return axes

    @model_validator(mode="after")
    def _one_name_per_axis(self) -> "MeshSpec":
        if len(self.shape) != len(self.axes):
            raise ExplorerError(
                "mesh.axes", list(self.axes),
                f"has {len(self.axes)} names but mesh.shape {list(self.shape)} has {len(self.shape)} axes",
            )
        return self

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Rule(_Frozen):
    """One logical-to-mesh rule: a logical axis name and the mesh axes it shards over.

    ``mesh`` is one mesh axis, ``None`` (replicate) or several (shard over their product).
    """

    logical: StrictStr = Field(min_length=1, max_length=64)
    mesh: RuleMesh = None

    @property
    def mesh_axes(self) -> MeshAxes:
        """The mesh axes as a tuple, whatever form the rule was written in."""
        return spec_axes(self.mesh)

    def as_flax(self) -> tuple[str, str | tuple[str, ...] | None]:
        return (self.logical, self.mesh)


class ModelSpec(_Frozen):
    """Which model to build and its options (validated against the model's own schema)."""

    name: StrictStr = Field(min_length=1, max_length=200)
    options: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> tuple:
        """A hashable identity of the model configuration, for caching the abstract model."""
        return (self.name, json.dumps(self.options, sort_keys=True))


class Layout(_Frozen):
    """Everything needed to analyse one partition layout."""

    name: StrictStr = Field(default="untitled", min_length=1, max_length=120)
    mesh: MeshSpec
    rules: tuple[Rule, ...] = ()
    model: ModelSpec

    @field_validator("rules", mode="before")
    @classmethod
    def _rules_from_pairs(cls, rules: Any) -> Any:
        if not isinstance(rules, (list, tuple)):
            raise ExplorerError("rules", rules, "is not a list of [logical name, mesh axes] pairs")
        return tuple(_rule_from_pair(i, pair) for i, pair in enumerate(rules))

    @model_validator(mode="after")
    def _rules_name_mesh_axes(self) -> "Layout":
        for i, rule in enumerate(self.rules):
            for axis in rule.mesh_axes:
                if axis not in self.mesh.axes:
                    raise ExplorerError(
                        f"rules[{i}]", [rule.logical, rule.mesh],
                        f"names mesh axis {axis!r}, which the mesh {list(self.mesh.axes)} lacks",
                    )
            if len(set(rule.mesh_axes)) != len(rule.mesh_axes):
                raise ExplorerError(f"rules[{i}]", [rule.logical, rule.mesh], "names a mesh axis twice")
        from explorer.models import validate_model

        object.__setattr__(self, "model", validate_model(self.model))
        return self

    def rules_for_flax(self) -> tuple[tuple[str, Any], ...]:
        return tuple(rule.as_flax() for rule in self.rules)

    def to_dict(self) -> dict[str, Any]:
        """The layout in the file format (rules as pairs)."""
        return {
            "name": self.name,
            "mesh": {"shape": list(self.mesh.shape), "axes": list(self.mesh.axes)},
            "rules": [[r.logical, list(r.mesh) if isinstance(r.mesh, tuple) else r.mesh] for r in self.rules],
            "model": {"name": self.model.name, "options": dict(self.model.options)},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _rule_from_pair(index: int, pair: Any) -> Any:
    if isinstance(pair, Rule):
        return pair
    if isinstance(pair, dict):
        return pair
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        raise ExplorerError(f"rules[{index}]", pair, "is not a [logical name, mesh axes] pair")
    logical, mesh = pair
    if not isinstance(logical, str) or not logical:
        raise ExplorerError(f"rules[{index}][0]", logical, "is not a logical axis name")
    if isinstance(mesh, list):
        mesh = tuple(mesh)
    if not (mesh is None or isinstance(mesh, str) or (isinstance(mesh, tuple) and all(isinstance(a, str) for a in mesh))):
        raise ExplorerError(f"rules[{index}][1]", mesh, "is not a mesh axis name, null or a list of mesh axis names")
    return {"logical": logical, "mesh": spec_entry(mesh)}  # one spelling per meaning: [] is null, ["data"] is "data"


def _explain(error: ValidationError) -> ExplorerError:
    """Turn pydantic's first complaint into one ExplorerError naming field and value."""
    first = error.errors(include_url=False)[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ExplorerError):  # raised by our own validators: already names field and value
        return cause
    field = _field_path(first["loc"])
    value = first.get("input")
    if first["type"] == "missing":
        return ExplorerError(field, None, "is missing")
    if first["type"] == "extra_forbidden":
        return ExplorerError(field, value, "is not a field of a layout")
    return ExplorerError(field, value, first["msg"].lower().removeprefix("value error, "))


def _field_path(loc: tuple) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("tagged-union", "function-after", "function-before"):
            continue
        else:
            path += ("." if path else "") + str(part)
    return path or "layout"


def parse_layout(data: Any) -> Layout:
    """Validate a layout given as a dict (the file format); raise ExplorerError if it is bad."""
    if not isinstance(data, dict):
        raise ExplorerError("layout", data, "is not a JSON object")
    try:
        return Layout.model_validate(data)
    except ValidationError as error:
        raise _explain(error) from None


def layout_errors(data: Any) -> tuple[ExplorerError, ...]:
    """Every problem of a draft layout at once, one per field, in the order name, mesh, rules, model.

    ``parse_layout`` stops at the first problem; a person fixing a form wants them all.
    Each section is checked on its own against a valid stand-in for the others (rules
    against the draft's mesh only when that mesh is valid).

    >>> draft = {"name": "x", "mesh": {"shape": [2, -4], "axes": ["data", "model"]},
    ...          "rules": [["batch", "data"]], "model": {"name": "mlp", "options": {"batch": 0, "depth": "wide"}}}
    >>> [error.field for error in layout_errors(draft)]
    ['mesh.shape[1]', 'model.options.batch', 'model.options.depth']
    """
    try:
        parse_layout(data)
        return ()
    except ExplorerError as error:
        first = error
    if not isinstance(data, dict):
        return (first,)
    from explorer.models import option_errors

    stand_in = {"name": "stand-in", "mesh": SEED_LAYOUT["mesh"], "rules": [], "model": SEED_LAYOUT["model"]}
    probes = ([{"name": data["name"]}] if "name" in data else []) + [{"mesh": data.get("mesh")}]
    mesh_valid = _problem({**stand_in, "mesh": data.get("mesh")}) is None
    if mesh_valid:
        probes.append({"mesh": data.get("mesh"), "rules": data.get("rules", [])})
    else:
        axes = [{"shape": [1] * len(data["mesh"]["axes"]), "axes": data["mesh"]["axes"]}] if _axes_only(data) else []
        probes += [{"mesh": mesh, "rules": data.get("rules", [])} for mesh in axes]
    probes.append({"model": data.get("model")})
    found: list[ExplorerError] = []
    for probe in probes:
        problem = _problem({**stand_in, **probe})
        if problem is not None:
            found.append(problem)
    model = data.get("model")
    if isinstance(model, dict):
        found += option_errors(model.get("name"), model.get("options", {}))
    unique: dict[str, ExplorerError] = {}
    for error in [first] + found:
        unique.setdefault(str(error), error)
    order = ("name", "mesh", "rules", "model")
    return tuple(sorted(unique.values(), key=lambda e: next((i for i, p in enumerate(order) if e.field.startswith(p)), len(order))))


def _problem(data: dict) -> ExplorerError | None:
    try:
        parse_layout(data)
    except ExplorerError as error:
        return error
    return None


def _axes_only(data: dict) -> bool:
    """The draft's mesh names valid axes (its shape may be bad): rules can still be checked against them."""
    mesh = data.get("mesh")
    if not isinstance(mesh, dict) or not isinstance(mesh.get("axes"), list) or not mesh["axes"]:
        return False
    return _problem({"mesh": {"shape": [1] * len(mesh["axes"]), "axes": mesh["axes"]}, "rules": [], "model": SEED_LAYOUT["model"]}) is None


def load_layout_json(text: str) -> Layout:
    """Parse a layout file's text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ExplorerError("layout file", text[:40], f"is not valid JSON ({error.msg} at line {error.lineno})") from None
    return parse_layout(data)


def load_layout_file(path: str) -> Layout:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ExplorerError("layout file", path, f"cannot be read ({error.strerror})") from None
    return load_layout_json(text)


SEED_LAYOUT = {
    "name": "seed-2x4",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["hidden", "model"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 4, "depth": 1024, "scan": False}},
}


def seed_layout() -> Layout:
    """The Flax guide's example: LogicalMLP on a 2x4 (data, model) mesh."""
    return parse_layout(SEED_LAYOUT)
