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

from explorer.errors import ExplorerError, shown
from explorer.specs import MeshAxes, spec_axes, spec_entry
from explorer.formats import counted

MAX_DEVICES = 65_536
MAX_MESH_AXES = 16  # MaxText's mesh has 12 axes, most of size 1
AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,31}")  # whole name: re.fullmatch, so "data\n" fails

# What the decoding path accepts, from files, uploads, the team library and links (docs/layout-file.md).
MAX_FILE_BYTES = 1_000_000  # a layout file is a few hundred bytes; factory options leave room
MAX_DEPTH = 32  # nesting of lists and objects
MAX_INT_DIGITS = 30

# A rule's mesh field as the file writes it (rules.SpecEntry, strictly typed for validation).
RuleMesh = Union[None, StrictStr, tuple[StrictStr, ...]]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


AXIS_TYPES = ("auto", "explicit")  # jax.sharding.AxisType.Auto / .Explicit, as a layout file spells them


class MeshSpec(_Frozen):
    """A device mesh: its shape, one name per axis, and each axis's type.

    ``axis_types`` has one entry per axis, ``"auto"`` (the compiler decides the sharding of
    intermediate values, as in JAX's 2023 guides) or ``"explicit"`` (the sharding is part of
    every value's type: ``jax.make_mesh``'s default since JAX 0.9). Absent in a file or link:
    every axis Auto, so layouts written before it existed keep their meaning.
    """

    shape: tuple[StrictInt, ...] = Field(min_length=1, max_length=MAX_MESH_AXES)
    axes: tuple[Any, ...] = Field(min_length=1, max_length=MAX_MESH_AXES)
    axis_types: tuple[Any, ...] | None = None
    # Per axis, how many TPU slices it spans on a multi-slice target (MaxText's dcn_*_parallelism; the rest of the axis
    # stays inside each slice). None: the outermost axis spans them all (targets.slice_split).
    dcn: tuple[Any, ...] | None = None

    @field_validator("dcn", mode="before")
    @classmethod
    def _slice_counts(cls, dcn: Any) -> Any:
        if dcn is None:
            return None
        if not isinstance(dcn, (list, tuple)):
            raise ExplorerError("mesh.dcn", dcn, "is not a list with the slices each mesh axis spans, like [2, 1]")
        for i, count in enumerate(dcn):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ExplorerError(f"mesh.dcn[{i}]", count, "is not a positive whole number of slices")
        return tuple(dcn)

    @field_validator("axis_types", mode="before")
    @classmethod
    def _known_types(cls, types: Any) -> Any:
        if types is None:
            return None
        if not isinstance(types, (list, tuple)):
            raise ExplorerError("mesh.axis_types", types, 'is not a list with "auto" or "explicit" per mesh axis')
        for i, kind in enumerate(types):
            if kind not in AXIS_TYPES:
                raise ExplorerError(f"mesh.axis_types[{i}]", kind, 'is not an axis type; use "auto" or "explicit"')
        return tuple(types)

    @field_validator("shape", mode="before")
    @classmethod
    def _whole_sizes(cls, shape: Any) -> Any:
        if isinstance(shape, (list, tuple)) and not shape:  # pydantic's own words: "tuple should have at least 1 item after validation"
            raise ExplorerError("mesh.shape", list(shape), "is empty; a mesh shape is sizes like [2, 4]")
        for i, size in enumerate(shape if isinstance(shape, (list, tuple)) else ()):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ExplorerError(f"mesh.shape[{i}]", size, "is not a positive whole number; a mesh shape is sizes like [2, 4]")
        return shape

    @field_validator("shape")
    @classmethod
    def _positive_sizes(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if math.prod(shape) > MAX_DEVICES:
            raise ExplorerError(
                "mesh.shape",
                list(shape),
                f"needs {math.prod(shape):,} devices; the explorer plans meshes of at most {MAX_DEVICES:,}",
            )
        return shape

    @field_validator("axes", mode="before")
    @classmethod
    def _some_axes(cls, axes: Any) -> Any:
        if isinstance(axes, (list, tuple)) and not axes:
            raise ExplorerError("mesh.axes", list(axes), "is empty; one name per mesh axis, like ['data', 'model']")
        return axes

    @field_validator("axes")
    @classmethod
    def _named_axes(cls, axes: tuple[Any, ...]) -> tuple[str, ...]:
        for i, name in enumerate(axes):
            if not isinstance(name, str) or not AXIS_NAME.fullmatch(name):
                raise ExplorerError(
                    f"mesh.axes[{i}]",
                    name,
                    "is not an axis name (letters, digits, '_' or '-', starting with a letter, at most 32)",
                )
        for name in axes:
            if axes.count(name) > 1:
                raise ExplorerError("mesh.axes", list(axes), f"names the axis {shown(name)} twice")
        return axes

    @model_validator(mode="after")
    def _one_name_per_axis(self) -> "MeshSpec":
        if len(self.shape) != len(self.axes):
            raise ExplorerError(
                "mesh.axes",
                list(self.axes),
                f"has {counted(len(self.axes), 'name')} but mesh.shape {list(self.shape)} has {counted(len(self.shape), 'axis')}",
            )
        if self.axis_types is not None and len(self.axis_types) != len(self.axes):
            raise ExplorerError(
                "mesh.axis_types",
                list(self.axis_types),
                f"has {counted(len(self.axis_types), 'entry')} but the mesh has {counted(len(self.axes), 'axis')} {list(self.axes)}",
            )
        if self.dcn is not None and len(self.dcn) != len(self.axes):
            raise ExplorerError(
                "mesh.dcn",
                list(self.dcn),
                f"has {counted(len(self.dcn), 'entry')} but the mesh has {counted(len(self.axes), 'axis')} {list(self.axes)}",
            )
        for axis, size, count in zip(self.axes, self.shape, self.dcn or ()):
            if size % count:
                raise ExplorerError(
                    "mesh.dcn", list(self.dcn), f"spreads axis {shown(axis)} ({size}) over {count} slices; {count} does not divide {size}"
                )
        if self.axis_types is not None and "explicit" not in self.axis_types:
            object.__setattr__(self, "axis_types", None)  # one spelling per meaning: all Auto is the default
        return self

    @property
    def types(self) -> tuple[str, ...]:
        """Each axis's type, ``"auto"`` or ``"explicit"`` (all Auto when the layout says none)."""
        return self.axis_types if self.axis_types is not None else ("auto",) * len(self.axes)

    @property
    def explicit(self) -> bool:
        """Some axis is Explicit: the sharding is in the values' types (the Explicit branch of ``explorer.reading``)."""
        return self.axis_types is not None

    @property
    def mixed(self) -> bool:
        """Auto and Explicit axes together: valid for JAX; Flax NNX's eager sharding refuses it."""
        return self.explicit and "auto" in self.axis_types

    def as_dict(self) -> dict[str, Any]:
        """The mesh in the file format (``axis_types`` only where some axis is Explicit, ``dcn`` only where given)."""
        return (
            {"shape": list(self.shape), "axes": list(self.axes)}
            | ({"axis_types": list(self.axis_types)} if self.axis_types is not None else {})
            | ({"dcn": list(self.dcn)} if self.dcn is not None else {})
        )

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
    """Everything needed to analyze one partition layout."""

    name: StrictStr = Field(default="untitled", min_length=1, max_length=120)
    mesh: MeshSpec
    rules: tuple[Rule, ...] = ()
    model: ModelSpec
    # The TPU slice the layout is planned for (a Cloud TPU type or a libtpu topology, see
    # explorer.hardware.targets); None: the devices of the process that opens it. Optional in files
    # and links, so layouts written before it existed load unchanged.
    target: StrictStr | None = Field(default=None, min_length=1, max_length=40)

    @field_validator("target", mode="after")
    @classmethod
    def _known_target(cls, target: str | None) -> str | None:
        if target is None:
            return None
        from explorer.hardware.targets import parse_target

        return parse_target(target).name  # ExplorerError("target", ...) names the value

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
                        f"rules[{i}]",
                        [rule.logical, rule.mesh],
                        f"names mesh axis {shown(axis)}, which the mesh {list(self.mesh.axes)} lacks",
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
            "mesh": self.mesh.as_dict(),
            "rules": [[r.logical, list(r.mesh) if isinstance(r.mesh, tuple) else r.mesh] for r in self.rules],
            "model": {"name": self.model.name, "options": dict(self.model.options)},
        } | ({"target": self.target} if self.target is not None else {})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @property
    def key(self) -> str:
        """Identity of what gets compiled and timed: everything but the layout's name and its planned target
        (the compile and timing caches, the pages' stored results)."""
        data = self.to_dict()
        data.pop("name")
        data.pop("target", None)
        return json.dumps(data, sort_keys=True)


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
    check_plain(data, "layout")
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
    >>> draft["mesh"] = {"shape": ["3x"], "axes": ["**model**"]}  # a bad shape and a bad axis name: both said
    >>> [error.field for error in layout_errors(draft)]
    ['mesh.shape[0]', 'mesh.axes[0]', 'model.options.batch', 'model.options.depth']
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
        probes += [{"mesh": mesh} for mesh in _mesh_parts(data.get("mesh"))]
        axes = [{"shape": [1] * len(data["mesh"]["axes"]), "axes": data["mesh"]["axes"]}] if _axes_only(data) else []
        probes += [{"mesh": mesh, "rules": data.get("rules", [])} for mesh in axes]
    probes.append({"model": data.get("model")})
    if data.get("target") is not None:
        probes.append({"target": data["target"]})
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


def _mesh_parts(mesh: Any) -> list[dict]:
    """A bad mesh's shape and axis names, each beside a valid stand-in for the other, so both are checked."""
    if not isinstance(mesh, dict) or not isinstance(mesh.get("shape"), list) or not isinstance(mesh.get("axes"), list):
        return []
    parts = []
    if mesh["shape"]:
        parts.append({"shape": mesh["shape"], "axes": [f"axis{i}" for i in range(len(mesh["shape"]))]})
    if mesh["axes"]:
        parts.append({"shape": [1] * len(mesh["axes"]), "axes": mesh["axes"]})
    return parts


def _axes_only(data: dict) -> bool:
    """The draft's mesh names valid axes (its shape may be bad): rules can still be checked against them."""
    mesh = data.get("mesh")
    if not isinstance(mesh, dict) or not isinstance(mesh.get("axes"), list) or not mesh["axes"]:
        return False
    return _problem({"mesh": {"shape": [1] * len(mesh["axes"]), "axes": mesh["axes"]}, "rules": [], "model": SEED_LAYOUT["model"]}) is None


def check_plain(data: Any, field: str, depth: int = 0) -> None:
    """Refuse data no layout needs before pydantic sees it: deep nesting, text that is not Unicode.

    Iterative limits, so a hostile value fails here with a message instead of
    exhausting the recursion limit somewhere later.
    """
    if depth > MAX_DEPTH:
        raise ExplorerError(field, "…", f"is nested deeper than {MAX_DEPTH} levels")
    if isinstance(data, str):
        _check_text(data, field)
    elif isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                raise ExplorerError(field, key, "has a key that is not text")
            _check_text(key, field)
            check_plain(value, field if depth else key, depth + 1)
    elif isinstance(data, (list, tuple)):
        for item in data:
            check_plain(item, field, depth + 1)
    elif isinstance(data, float) and not math.isfinite(data):
        raise ExplorerError(field, data, "is not a finite number")
    elif isinstance(data, int) and not isinstance(data, bool) and abs(data) >= 10**MAX_INT_DIGITS:
        raise ExplorerError(field, "…", f"is a number with more than {MAX_INT_DIGITS} digits")


def _check_text(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ExplorerError(field, text, f"holds a character that is not Unicode text (position {error.start})") from None


def json_value(text: str, source: str) -> Any:
    """``json.loads`` that refuses, with an ExplorerError, what a layout never holds.

    NaN and Infinity are not JSON and come back as text from a link, never as floats;
    integers are capped at MAX_INT_DIGITS digits (Python's own cap is 4,300, with a
    traceback); nesting is capped at MAX_DEPTH, checked before parsing (Python's own
    limit depends on its version: a RecursionError, or a plain syntax error for
    brackets that never close).
    """
    if _nesting_depth(text) > MAX_DEPTH:
        raise ExplorerError(source, text, f"is nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except json.JSONDecodeError as error:
        raise ExplorerError(source, text, f"is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except _Refused as refused:
        raise ExplorerError(source, refused.args[0], refused.args[1]) from None
    except RecursionError:
        raise ExplorerError(source, text, f"is nested deeper than {MAX_DEPTH} levels") from None


def _nesting_depth(text: str) -> int:
    """The deepest nesting of JSON lists and objects in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif character in "]}":
            depth -= 1
    return deepest


class _Refused(Exception):
    """A JSON token a layout never holds: (the token, why)."""


def _no_constant(token: str) -> Any:
    raise _Refused(token, "is not a JSON number (NaN and Infinity are not allowed)")


def _bounded_int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(token, f"is a number with {len(token.lstrip('-')):,} digits; at most {MAX_INT_DIGITS} are allowed")
    return int(token)


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise _Refused(token, "is too large for a number")
    return value


def decode_text(data: bytes, source: str) -> str:
    """A layout file's bytes as text: UTF-8 (a BOM is allowed) within MAX_FILE_BYTES, else a message."""
    if len(data) > MAX_FILE_BYTES:
        raise ExplorerError(source, f"{len(data):,} bytes", f"is larger than {MAX_FILE_BYTES:,} bytes, the limit for a layout file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or _utf16_without_mark(data):
        raise ExplorerError(source, data[:4], "is UTF-16 text; save it as UTF-8")
    if b"\x00" in data:
        raise ExplorerError(source, data[:16], "is binary, not a JSON text file")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise ExplorerError(
            source,
            data[error.start : error.start + 4],
            f"is not UTF-8 text (at byte {error.start:,}); save it as UTF-8",
        ) from None


def _utf16_without_mark(data: bytes) -> bool:
    """ASCII-range text saved as UTF-16: every other byte is zero."""
    head = data[:200]
    return len(head) >= 4 and (not any(head[1::2]) or not any(head[0::2])) and any(head)


def load_layout_bytes(data: bytes, source: str = "layout file") -> Layout:
    """The one decoding path for file contents (uploads, the CLI, the team library): bytes -> Layout."""
    return load_layout_json(decode_text(data, source), source)


def load_layout_json(text: str, source: str = "layout file") -> Layout:
    """Parse a layout file's text."""
    if len(text) > MAX_FILE_BYTES:
        raise ExplorerError(
            source, f"{len(text):,} characters", f"is longer than {MAX_FILE_BYTES:,} characters, the limit for a layout file"
        )
    return parse_layout(json_value(text, source))


def load_layout_argument(path: str) -> Layout:
    """The layout a command line names: a file's path, or ``-`` for standard input."""
    import sys

    if path == "-":
        return load_layout_bytes(sys.stdin.buffer.read(MAX_FILE_BYTES + 1), "standard input")
    return load_layout_file(path)


def load_layout_file(path: str) -> Layout:
    """Read a layout file (at most MAX_FILE_BYTES) and decode it."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ExplorerError("layout file", path, f"cannot be read ({error.strerror})") from None
    return load_layout_bytes(data, f"layout file {path}")


SEED_LAYOUT = {
    "name": "seed-2x4",
    "mesh": {"shape": [2, 4], "axes": ["data", "model"]},
    "rules": [["batch", "data"], ["hidden", "model"]],
    "model": {"name": "mlp", "options": {"batch": 8, "layers": 4, "depth": 1024, "scan": False}},
}


def seed_layout() -> Layout:
    """The Flax guide's example: LogicalMLP on a 2x4 (data, model) mesh."""
    return parse_layout(SEED_LAYOUT)
