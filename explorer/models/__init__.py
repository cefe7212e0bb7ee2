"""The model registry: built-in models with typed options, and allow-listed user factories.

A user's own model is named ``package.module:function``. The function takes the
layout's options as keyword arguments and returns ``BuiltModel`` (or the triple
``(module, inputs, loss)`` with ``inputs`` a sequence of ``InputSpec``): ``module`` a
Linen ``nn.Module``, or for Flax NNX a function of no arguments that builds the
``nnx.Module`` (an ``nnx.Module`` instance is accepted too). Naming one
imports code, so only factories listed in the environment variable
``EXPLORER_ALLOWED_FACTORIES`` (comma-separated) can be used; any other is refused
before anything is imported.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from explorer.errors import ExplorerError
from explorer.models.base import BuiltModel, InputSpec
from explorer.models.options import SIZE_PRESETS, MlpOptions, NnxGuideOptions, TransformerOptions

ALLOW_ENV = "EXPLORER_ALLOWED_FACTORIES"
MAXTEXT = "maxtext"  # a MaxText config: its options are MaxText's own KEY: VALUE keys (explorer.models.maxtext)
# A user's own jitted step: its options name the allow-listed factory that makes it (``factory``) and what it is given
# besides the mesh (explorer.compile.jitted); it has no model the reading reads, only the step's arguments
STEP = "step"
FACTORY_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_]\w*$")


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A built-in model: its options schema, its builder and its size presets."""

    name: str
    description: str
    options: type[BaseModel]
    builder: str  # "module:function", imported on first build: checking a layout needs no Flax
    presets: dict[str, dict]

    def build(self, options: BaseModel) -> BuiltModel:
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(options)


MODELS: dict[str, ModelEntry] = {
    "mlp": ModelEntry("mlp", "The Flax guide's LogicalMLP of LogicalDotReluDot layers", MlpOptions, "explorer.models.mlp:build_mlp", {}),
    "nnx-guide": ModelEntry(
        "nnx-guide", "The Flax NNX guide's MultiDotReluDot (Flax NNX)", NnxGuideOptions, "explorer.models.nnx_guide:build_nnx_guide", {}
    ),
    "transformer": ModelEntry(
        "transformer",
        "A decoder-only language model (GPT-2 / Llama shapes)",
        TransformerOptions,
        "explorer.models.transformer:build_transformer",
        SIZE_PRESETS,
    ),
}


def allowed_factories() -> tuple[str, ...]:
    """Factories the person running the tool allowed, from ``EXPLORER_ALLOWED_FACTORIES``."""
    raw = os.environ.get(ALLOW_ENV, "")
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def is_factory(name: str) -> bool:
    return ":" in name


def validate_model(spec):
    """Check the model name and options; return the spec with every option filled in."""
    if is_factory(spec.name):
        check_factory_allowed(spec.name)
        _check_json_options(spec.options)
        return spec
    if spec.name == STEP:  # a user's jitted step: its factory allow-listed, its other options passed to it
        check_factory_allowed(spec.options.get("factory"), "model.options.factory")
        _check_json_options(spec.options)
        return spec
    if spec.name == MAXTEXT:  # MaxText's keys: their names and values checked here, the config by MaxText when built
        from explorer.models.maxtext import check_options

        return type(spec)(name=spec.name, options=check_options(spec.options))
    entry = MODELS.get(spec.name)
    if entry is None:
        raise ExplorerError(
            "model.name",
            spec.name,
            f"is not a model; choose one of {sorted(MODELS)}, {MAXTEXT!r} (a MaxText config), {STEP!r} (your own jitted step) "
            "or an allow-listed factory 'package.module:function'",
        )
    options = _validate_options(entry, spec.options)
    return type(spec)(name=spec.name, options=options.model_dump())


def _validate_options(entry: ModelEntry, options: dict) -> BaseModel:
    try:
        return entry.options.model_validate(options)
    except ValidationError as error:
        raise _option_errors(entry, options, error)[0] from None


def option_errors(name: str, options: dict) -> list[ExplorerError]:
    """Every invalid option of built-in model ``name`` at once (validation stops at the first)."""
    entry = MODELS.get(name)
    if entry is None or not isinstance(options, dict):
        return []
    try:
        entry.options.model_validate(options)
    except ValidationError as error:
        return _option_errors(entry, options, error)
    return []


def _option_errors(entry: ModelEntry, options: dict, error: ValidationError) -> list[ExplorerError]:
    found = []
    known = ", ".join(entry.options.model_fields)
    for item in error.errors(include_url=False):
        field = ".".join(str(p) for p in item["loc"])
        problem = item["msg"].lower().removeprefix("value error, ")
        if item["type"] == "extra_forbidden":
            found.append(
                ExplorerError(f"model.options.{field}", item["input"], f"is not an option of model '{entry.name}' (known: {known})")
            )
        elif not field:
            found.append(ExplorerError("model.options", options, problem))
        else:
            found.append(ExplorerError(f"model.options.{field}", item["input"], problem))
    return found


def check_factory_allowed(name: str, field: str = "model.name") -> None:
    """Refuse a factory name that is not ``package.module:function`` or not allow-listed (``EXPLORER_ALLOWED_FACTORIES``)."""
    if not isinstance(name, str) or not FACTORY_NAME.match(name):
        raise ExplorerError(field, name, "is not a factory name of the form 'package.module:function'")
    if name not in allowed_factories():
        raise ExplorerError(
            field,
            name,
            f"is a user factory that is not allow-listed; the person running the tool can add it to {ALLOW_ENV}",
        )


def _check_json_options(options: dict) -> None:
    for key, value in options.items():
        if not isinstance(value, (int, float, str, bool)) or value is None:
            raise ExplorerError(f"model.options.{key}", value, "must be a number, string or boolean for a factory")


def framework_of(module: Any) -> str:
    """'linen' for a Linen module; 'nnx' for an nnx.Module or a function that builds one."""
    import flax.linen as nn
    from flax import nnx

    if isinstance(module, nn.Module):
        return "linen"
    if isinstance(module, nnx.Module) or callable(module):
        return "nnx"
    return "unknown"


def build_model(spec) -> BuiltModel:
    """Build the Linen module, inputs and loss for a validated model spec."""
    if is_factory(spec.name):
        return _build_factory(spec)
    if spec.name == MAXTEXT:
        from explorer.models.maxtext import built_model

        return built_model(spec.options)
    if spec.name == STEP:  # its own code is the step: the explorer's train step (a timing, origins) has no model to run
        raise ExplorerError(
            "model.name",
            spec.name,
            "is your own jitted step: it is analyzed (its arguments) and compiled for a target as it is (docs/step.md), "
            "not run inside the explorer's train step; time it with your own code",
        )
    entry = MODELS[spec.name]
    return entry.build(entry.options.model_validate(spec.options))


def import_factory(name: str, field: str = "model.name"):
    """The allow-listed factory ``name`` (``package.module:function``), imported: a model's, or a step's
    (``compile.jitted``); one that is not allow-listed is refused before anything is imported."""
    check_factory_allowed(name, field)
    module_name, function_name = name.split(":")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ExplorerError(field, name, f"cannot be imported ({error})") from None


def _build_factory(spec) -> BuiltModel:
    factory = import_factory(spec.name)
    try:
        built = factory(**spec.options)
    except TypeError as error:
        raise ExplorerError("model.options", spec.options, f"were refused by {spec.name} ({error})") from None
    except Exception as error:  # a user's factory can fail in any way: one message, never a traceback
        raise ExplorerError("model.name", spec.name, f"failed: {type(error).__name__}: {error}") from None
    if isinstance(built, tuple) and len(built) == 3:
        module, inputs, loss = built
        built = BuiltModel(module, tuple(inputs), loss, framework_of(module))
    if not isinstance(built, BuiltModel) or not all(isinstance(i, InputSpec) for i in built.inputs):
        raise ExplorerError(
            "model.name",
            spec.name,
            "did not return (module, inputs as InputSpec, loss): module a Linen nn.Module, or a function building an nnx.Module",
        )
    if framework_of(built.module) != built.framework:
        built = dataclasses.replace(built, framework=framework_of(built.module))
    return built


__all__ = [
    "ALLOW_ENV",
    "BuiltModel",
    "InputSpec",
    "MAXTEXT",
    "MODELS",
    "STEP",
    "ModelEntry",
    "allowed_factories",
    "build_model",
    "check_factory_allowed",
    "import_factory",
    "framework_of",
    "is_factory",
    "option_errors",
    "validate_model",
]
