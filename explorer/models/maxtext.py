"""A MaxText config, built by MaxText: ``KEY=VALUE`` overrides -> its config, mesh, logical axis rules and parameters.

MaxText (``pip install maxtext``, an optional extra: requirements-maxtext.txt) is imported only here and only when a
config is opened, so nothing else in the project needs it. The config is MaxText's own ``pyconfig`` over its
``base.yml`` with the user's keys as overrides, exactly as ``train_compile.py`` reads its command line; the mesh is
``maxtext_utils.create_device_mesh`` (ICI parallelism inside a slice, DCN across slices) named by the config's
``mesh_axes``; the parameters are MaxText's decoder built abstractly (``nnx.eval_shape``: no weights materialised) by
``model_creation_utils.create_nnx_abstract_model``, with the shardings MaxText's ``logical_axis_rules`` give them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import re
import sys
from typing import Any

from explorer.errors import ExplorerError, first_line

FIELD = "--maxtext"
INSTALL_LINE = "pip install --no-deps -r requirements-maxtext.txt"
KEY = re.compile(r"^[A-Za-z_]\w*$")
MESH_AXES = (  # base.yml's mesh_axes, in its order (a test checks them against the installed MaxText)
    "diloco",
    "data",
    "stage",
    "fsdp",
    "fsdp_transpose",
    "context",
    "context_usp_ulysses",
    "context_autoregressive",
    "tensor",
    "tensor_sequence",
    "expert",
    "autoregressive",
)
KEY_OF_AXIS = {"stage": "pipeline"}  # the one mesh axis whose ici_*/dcn_* key has another name
PIPELINE_KEYS = (  # MaxText's pipeline keys (layers/pipeline.py reads them), in base.yml's order
    "ici_pipeline_parallelism",
    "dcn_pipeline_parallelism",
    "num_pipeline_microbatches",
    "num_pipeline_repeats",
    "num_layers_per_pipeline_stage",
    "pipeline_parallel_layers",
)
DEFAULT_RUN_NAME = "explorer"  # MaxText wants a run name; only a real run writes anything under it


@dataclasses.dataclass(frozen=True)
class MaxTextBuild:
    """What MaxText built for one config: its keys, config object, mesh, rules and abstract parameters."""

    keys: dict[str, str]
    config: Any
    mesh: Any  # jax.sharding.Mesh over the config's mesh_axes
    logical_axis_rules: tuple[tuple[str, Any], ...]
    parameters: dict[str, Any]  # "decoder/layers/mlp/wi_0/kernel" -> jax.ShapeDtypeStruct with its NamedSharding


def parse_keys(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["model_name=llama2-7b", ...]`` -> ``{"model_name": "llama2-7b"}``, refusing a pair that is not KEY=VALUE or a
    key given twice (MaxText would silently keep one of them)."""
    keys: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = str(pair).partition("=")
        key = key.strip()
        if not equals or not KEY.match(key):
            raise ExplorerError(FIELD, pair, "is not KEY=VALUE (a MaxText key such as per_device_batch_size=4)")
        if key in keys:
            raise ExplorerError(FIELD, pair, f"sets {key} a second time (first {key}={keys[key]})")
        keys[key] = value.strip()
    return keys


def parallelism_keys(ici: dict[str, int], dcn: dict[str, int] | None = None) -> list[str]:
    """A mesh written as the MaxText keys that make it: every axis's ``ici_*_parallelism`` (inside a slice) and
    ``dcn_*_parallelism`` (across slices), 1 where not given, so none of base.yml's -1 (fill in) defaults applies.
    How advice for a MaxText config is written."""
    lines = []
    for prefix, sizes in (("ici", ici), ("dcn", dcn or {})):
        for axis, size in sizes.items():
            if axis not in MESH_AXES:
                raise ExplorerError(f"{prefix} mesh axis", axis, f"is not one of MaxText's mesh axes {list(MESH_AXES)}")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ExplorerError(f"{prefix}_{KEY_OF_AXIS.get(axis, axis)}_parallelism", size, "must be a whole number of at least 1")
        lines += [f"{prefix}_{KEY_OF_AXIS.get(axis, axis)}_parallelism={sizes.get(axis, 1)}" for axis in MESH_AXES]
    return lines


JAX_OWN = (("lax", "with_sharding_constraint"), ("lax", "top_k"))  # what MaxText's tunix adapter replaces on import
EAGER = "flax_always_shard_variable"  # Flax's default for NNX variables, which MaxText's nnx_wrappers turns off on import


def require_maxtext() -> None:
    """Import MaxText's config machinery, or raise the one message that says how to install it.

    MaxText's import changes the whole process: its tunix adapter puts wrappers of its own over
    ``jax.lax.with_sharding_constraint`` and ``jax.lax.top_k`` (they turn JAX's refusals into reshards), and its
    ``nnx_wrappers`` turns off Flax's eager sharding of NNX variables. Both are put back as they were, so that a MaxText
    config opened in a process (the app's server, a test) changes nothing for every other model read there; MaxText's
    own models are built with eager sharding off (``own_settings``). MaxText's layers constrain with ``reshard`` on
    Explicit axes and with ``with_sharding_constraint`` on Auto ones, where JAX refuses no spec its rules make."""
    import flax
    import jax

    own = [(getattr(jax, module), name, getattr(getattr(jax, module), name)) for module, name in JAX_OWN]
    eager = getattr(flax.config, EAGER)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # MaxText prints on import; stdout is for results (--json)
            importlib.import_module("maxtext.configs.pyconfig")
            importlib.import_module("maxtext.utils.model_creation_utils")
    except ImportError as error:
        raise ExplorerError(
            FIELD, getattr(error, "name", None) or "maxtext", f"needs MaxText, an optional extra: {INSTALL_LINE} ({first_line(error)})"
        ) from None
    finally:
        for module, name, function in own:
            setattr(module, name, function)
        flax.config.update(EAGER, eager)


@contextlib.contextmanager
def own_settings():
    """MaxText's models built as MaxText's import sets Flax up for them: NNX variables not sharded eagerly (this block
    only; ``require_maxtext`` keeps the process's own setting)."""
    from flax import nnx

    with nnx.use_eager_sharding(False):
        yield


def maxtext_version() -> str:
    """The installed MaxText's version (0.2.5), as its package metadata gives it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("maxtext")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def base_config_path() -> str:
    """MaxText's own ``base.yml``, inside the installed package."""
    import maxtext.configs

    return os.path.join(os.path.dirname(maxtext.configs.__file__), "base.yml")


@contextlib.contextmanager
def _no_persistent_cache():
    """JAX's persistent compilation cache as it was before MaxText's config was read. ``pyconfig.initialize`` points it
    at base.yml's ``jax_cache_dir`` (~/jax_cache) for the whole process, and JAX's cache key leaves out source
    locations: every later compile in the process (any model's) would be answered from a folder shared by every
    checkout and run on the machine, its program naming another checkout's source lines (the suite's CI run read
    another clone's ``mlp.py``). The explorer keeps its own compiles (``compile.compile_cache``)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    before = jax.config.jax_compilation_cache_dir
    try:
        yield
    finally:
        if jax.config.jax_compilation_cache_dir != before:
            jax.config.update("jax_compilation_cache_dir", before)
            compilation_cache.reset_cache()


def build_config(keys: dict[str, str]) -> Any:
    """MaxText's config for ``keys``: ``pyconfig.initialize`` over base.yml with the keys as command-line overrides."""
    require_maxtext()
    from maxtext.configs import pyconfig

    keys = {"run_name": DEFAULT_RUN_NAME, **keys}
    argv = ["explorer", base_config_path(), *(f"{key}={value}" for key, value in keys.items())]
    flags = os.environ.get("XLA_FLAGS")
    try:
        with _no_persistent_cache():
            return pyconfig.initialize(argv)
    except Exception as error:  # MaxText validates with pydantic, omegaconf and asserts: one message, never a traceback
        details = error.errors() if callable(getattr(error, "errors", None)) else []
        if details:  # pydantic names the key and the value it refused
            first = details[0]
            key = str(first["loc"][0]) if first.get("loc") else FIELD  # the key; the rest names a union's member
            raise ExplorerError(key, keys.get(key, first.get("input")), f"was refused by MaxText's config: {first.get('msg')}") from None
        unknown = re.match(r"'(\w+)' not in ", first_line(error))
        if unknown and unknown[1] in keys:  # a key this MaxText does not have (a newer one's, in a recipe written for it)
            raise ExplorerError(
                unknown[1], keys[unknown[1]], f"is not a key of MaxText {maxtext_version()} (its base.yml has none of that name)"
            ) from None
        raise ExplorerError(FIELD, " ".join(argv[2:]), f"was refused by MaxText's config: {first_line(error)}") from None
    finally:  # pyconfig sets XLA_FLAGS to dump every train step into /tmp/xla_dump when it is unset: not in this process,
        # whose compile children inherit its environment (their flags are their identity; dumps fill the disk)
        if flags is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = flags


def build_mesh(config: Any, devices: list | None = None) -> Any:
    """MaxText's mesh for ``config`` over ``devices`` (default: this process's devices), as train_compile.py makes it."""
    import jax
    from jax.sharding import AxisType, Mesh
    from maxtext.utils import maxtext_utils

    devices = list(jax.devices() if devices is None else devices)
    try:
        device_array = maxtext_utils.create_device_mesh(config, devices)
    except Exception as error:  # a parallelism product that does not match the device count, among others
        raise ExplorerError(FIELD, f"{len(devices)} devices", f"cannot hold MaxText's mesh: {first_line(error)}") from None
    explicit = str(getattr(config, "shard_mode", "")).lower().endswith("explicit")
    axis_type = AxisType.Explicit if explicit else AxisType.Auto
    return Mesh(device_array, tuple(config.mesh_axes), axis_types=(axis_type,) * len(config.mesh_axes))


def topology_devices(config: Any) -> list:
    """The devices of ``compile_topology`` (MaxText's name for the slice, e.g. v5e-256) times
    ``compile_topology_num_slices``, from libtpu's topology description as MaxText's accelerator table gives it:
    no TPU needed."""
    from jax.experimental.topologies import get_topology_desc
    from maxtext.utils import accelerator_to_spec_map

    from explorer.hardware.libtpu import libtpu_refusal
    from explorer.hardware.targets import parse_target, tpu_topology

    slices = int(config.compile_topology_num_slices)
    names = [config.compile_topology]
    try:  # a slice the explorer names by its libtpu topology only (v4-384 is v4:4x4x12: not a power of two)
        names.append(accelerator_to_spec_map.get_system_characteristics(config.compile_topology).topology_name)
    except Exception:  # not in MaxText's table: refused below, with MaxText's message
        pass
    for name in names:
        try:  # the compile's own description of the slice where the explorer names it: one set of devices in the process
            return list(tpu_topology(parse_target(f"{slices}x{name}" if slices > 1 else name)).devices)
        except ExplorerError:  # a slice only MaxText's table names: its own description
            pass
    try:
        spec = accelerator_to_spec_map.get_system_characteristics(config.compile_topology)
        return list(
            get_topology_desc(
                platform=spec.platform,
                topology_name=spec.topology_name,
                chip_config_name=spec.chip_config_name,
                chips_per_host_bounds=spec.chips_per_host_bounds,
                num_slices=config.compile_topology_num_slices,
                wrap=spec.wrap,
            ).devices
        )
    except Exception as error:  # an unknown topology name, a platform this install cannot describe, libtpu's lock
        problem = libtpu_refusal(error) or f"has no devices here: {first_line(error)}"
        raise ExplorerError("compile_topology", config.compile_topology, problem) from None


def check_options(options: Any) -> dict[str, str]:
    """A layout's MaxText model options in one normal form: ``{KEY: VALUE}`` with MaxText key names and text values (as on
    its command line), so that the same config is one layout (``Layout.key``: one compile cache entry) from the app's
    text box, the command line and a layout file. MaxText's own pyconfig validates the values when the model is built.

    A ``compile_topology`` without ``compile_topology_num_slices`` is one slice, written out as ``--target`` writes it:
    base.yml's -1 would count the slice's devices negative (train_compile.py refuses it; pyconfig builds a batch of -8
    sequences on a v5e-8).
    """
    if not isinstance(options, dict):
        raise ExplorerError("model.options", options, "is not MaxText's keys as {KEY: VALUE}")
    checked = {}
    for key, value in options.items():
        if not isinstance(key, str) or not KEY.match(key):
            raise ExplorerError("model.options", key, "is not a MaxText key name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ExplorerError(f"model.options.{key}", value, "is not a MaxText value (text, as on its command line)")
        checked[key] = str(value).strip()
    if checked.get("compile_topology") and "compile_topology_num_slices" not in checked:
        checked["compile_topology_num_slices"] = "1"
    return checked


@functools.lru_cache(maxsize=32)  # the advisor's candidates: one config each
def cached_config(items: tuple[tuple[str, str], ...]) -> Any:
    """MaxText's config for sorted ``(key, value)`` items: a layout's model is built several times (the reading, the
    compile, each page), and pyconfig takes a second or two."""
    return build_config(dict(items))


def config_devices(config: Any) -> list:
    """The devices MaxText's mesh is built over: ``compile_topology``'s (``--target`` sets it), else this process's."""
    import jax

    return topology_devices(config) if getattr(config, "compile_topology", "") else list(jax.devices())


def topology_keys(target_name: str) -> dict[str, str]:
    """``--target`` as MaxText's ``compile_topology`` and ``compile_topology_num_slices`` (its accelerator table names a
    v5e slice v5e-N, where Cloud TPU's type is v5litepod-N)."""
    from explorer.hardware.targets import parse_target

    target = parse_target(target_name)
    name = "" if target.is_gpu else target.cloud_name.split("x", 1)[-1] if target.multislice else target.cloud_name
    name = name.replace("v5litepod-", "v5e-")
    from maxtext.utils import accelerator_to_spec_map

    try:
        accelerator_to_spec_map.get_system_characteristics(name)
    except Exception:  # MaxText's table has TPU slices only (v4, v5e, v5p, v6e ...)
        raise ExplorerError("--target", target_name, "is not a slice MaxText's compile_topology names (e.g. v5e-256, v5p-128)") from None
    return {"compile_topology": name, "compile_topology_num_slices": str(target.num_slices)}


def target_of(pairs: list[str] | tuple[str, ...], target: str) -> str:
    """``--target`` as the slices the keys ask for: a target naming one slice with ``compile_topology_num_slices=N``
    (N > 1) among the keys is N of that slice (``--target v6e-256`` with ``compile_topology_num_slices=2`` is
    ``2xv6e-256``, as a recipe's ``--device-type=v6e-256 --num-slices=2``); otherwise the target as given.

    >>> target_of(["model_name=gemma3-12b", "compile_topology_num_slices=2"], "v6e-256"), target_of([], "v6e-256")
    ('2xv6e-256', 'v6e-256')
    """
    from explorer.hardware.targets import parse_target

    slices = parse_keys(pairs).get("compile_topology_num_slices", "1")
    if not parse_target(target).multislice and slices.isdigit() and int(slices) > 1:
        return f"{int(slices)}x{target}"
    return target


def layout_data(pairs: list[str] | tuple[str, ...], target: str | None = None) -> dict[str, Any]:
    """A MaxText config as a layout, in the file format (``explorer.layout.parse_layout`` reads it): MaxText's mesh (its 12 ``mesh_axes``, the sizes ``create_device_mesh`` gives the
    parallelism keys, the DCN share of each axis across slices), its ``logical_axis_rules``, and the model ``maxtext``
    whose options are the keys. ``target`` (``--target``) wins over the keys' ``compile_topology``."""
    keys = parse_keys(pairs)
    require_maxtext()
    if target is not None:
        target = target_of(pairs, target)
        keys |= topology_keys(target)
    keys = check_options(keys)  # the normal form the layout's model has: the mesh and rules from the config it builds
    config = cached_config(tuple(sorted(keys.items())))
    mesh = build_mesh(config, config_devices(config))
    axes, shape = tuple(config.mesh_axes), tuple(int(n) for n in mesh.devices.shape)
    slices = int(getattr(config, "num_slices", 1) or 1)
    data = {
        "name": f"maxtext {keys.get('model_name', 'default')}"[:120],
        "mesh": {"shape": list(shape), "axes": list(axes)} | ({"dcn": dcn_shares(config, axes, slices)} if slices > 1 else {}),
        "rules": config_rules(config),
        "model": {"name": "maxtext", "options": keys},
    }
    topology = getattr(config, "compile_topology", "")
    if target is not None or topology:
        data["target"] = target or (f"{slices}x{topology}" if slices > 1 else topology)
    return data


def config_rules(config: Any) -> list[list[Any]]:
    """A MaxText config's ``logical_axis_rules`` as a layout's rules (the file format's ``[name, axes]`` pairs)."""
    return [[name, list(axes) if isinstance(axes, (list, tuple)) else axes] for name, axes in config.logical_axis_rules]


def rules_for(options: dict[str, Any]) -> list[list[Any]]:
    """The rules MaxText writes for a layout's MaxText ``options`` (a share link's ``rules=maxtext``: a MaxText layout
    whose rules are its config's own says so instead of listing its ~60 rules)."""
    require_maxtext()
    return config_rules(cached_config(tuple(sorted(check_options(options).items()))))


def dcn_shares(config: Any, axes: tuple[str, ...], slices: int) -> list[int]:
    """How many slices each mesh axis spans: its ``dcn_*_parallelism``, MaxText's -1 (fill in) given the rest."""
    shares = [int(getattr(config, f"dcn_{KEY_OF_AXIS.get(axis, axis)}_parallelism")) for axis in axes]
    known = 1
    for share in shares:
        known *= share if share > 0 else 1
    return [share if share > 0 else slices // known for share in shares]


def built_model(options: dict[str, str]):
    """The ``maxtext`` model of a layout, as the analysis reads it: MaxText's ``Transformer`` built by
    ``model_creation_utils.from_config`` on MaxText's mesh, fed as its train step feeds it (``inputs``,
    ``inputs_position``, ``inputs_segmentation``, sharded over the config's ``data_sharding`` axes), with MaxText's own
    optimizer (``optimizers.get_optimizer`` for the config: its state is the train state's). A compile for a target is
    MaxText's own train step (``lower_train_step``), not this; the loss here (a softmax cross-entropy of the logits
    against ``targets``) serves only a step run on this process's devices."""
    import jax
    import jax.numpy as jnp

    from explorer.models.base import BuiltModel, InputSpec

    config = cached_config(tuple(sorted(check_options(options).items())))
    mesh = build_mesh(config, config_devices(config))  # the layers hold it: their constraints name its axes

    def build():
        from flax.linen import partitioning as nn_partitioning
        from maxtext.utils import maxtext_utils_nnx, model_creation_utils

        rngs = maxtext_utils_nnx.create_nnx_rngs(config, model_mode="train")
        try:  # a compile's mesh (jax.set_mesh): the layers' constraints must name its devices
            context = jax.sharding.get_mesh()
        except ValueError:  # inside a trace (jax.jit, nnx.eval_shape), where JAX answers only the abstract mesh
            context = None
        same = (
            context is not None
            and not context.empty
            and context.axis_names == mesh.axis_names
            and context.devices.shape == mesh.devices.shape
        )
        # MaxText's layers read the logical rules from Flax's context when they are built (the pipeline's stage specs
        # for its shard_maps): train_compile.py builds the model inside nn_partitioning.axis_rules, so do we.
        with nn_partitioning.axis_rules(config.logical_axis_rules), own_settings():
            return model_creation_utils.from_config(config, mesh=context if same else mesh, rngs=rngs)

    batch, length = max(1, int(config.per_device_batch_size * mesh.devices.size)), int(config.max_target_length)
    data_axes = tuple(config.data_sharding[0]) if config.data_sharding else None
    along = (data_axes, None)
    inputs = (
        InputSpec("inputs", (batch, length), "int32", along),
        InputSpec("inputs_position", (batch, length), "int32", along),
        InputSpec("inputs_segmentation", (batch, length), "int32", along),
        InputSpec("targets", (batch, length), "int32", along, model_arg=False),
    )

    def loss(logits, tokens, positions, segments, targets):
        one_hot = jax.nn.one_hot(targets, logits.shape[-1], dtype=jnp.float32)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits.astype(jnp.float32)) * one_hot, axis=-1))

    def optimizer(model):  # MaxText's own, as get_shaped_inputs makes it: its state is the one its train step carries
        from maxtext.optimizers import optimizers
        from maxtext.utils import maxtext_utils

        return optimizers.get_optimizer(config, maxtext_utils.create_learning_rate_schedule(config), model, mesh=mesh)

    return BuiltModel(build, inputs, loss, "nnx", mesh=mesh, optimizer=optimizer)


# What train_compile.py's main adds to LIBTPU_INIT_ARGS before libtpu loads (with jax_default_prng_impl=unsafe_rbg): part
# of the program MaxText compiles, so part of ours
RNG_FLAG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"


def _same_rules(ours, theirs) -> bool:
    """Two logical-axis rule lists equal as Flax reads them (a lone axis, a list or a tuple of axes, None or ())."""

    def axes(mesh_axes) -> tuple:
        return () if mesh_axes is None else (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes)

    return [(name, axes(m)) for name, m in ours] == [(name, axes(m)) for name, m in theirs]


def program_keys(
    options: dict[str, str],
    target_name: str,
    mesh_shape: tuple[int, ...],
    mesh_axes: tuple[str, ...],
    mesh_dcn: tuple[int, ...] | None,
    rules: tuple,
) -> dict[str, str]:
    """The MaxText keys whose own train step is the program of a ``maxtext`` layout on ``target_name``: its options, the
    target as ``compile_topology`` (it wins), and, where the layout's mesh was edited away from the one its keys make,
    that mesh as ``ici_*``/``dcn_*_parallelism`` keys. Rules edited away from the config's ``logical_axis_rules`` are
    refused: MaxText's command line appends rules rather than replacing them, so no key gives its train step other rules."""
    keys = check_options(options) | topology_keys(target_name)
    config = cached_config(tuple(sorted(keys.items())))
    if tuple(config.mesh_axes) != tuple(mesh_axes):
        raise ExplorerError("mesh.axes", list(mesh_axes), f"are not MaxText's mesh axes {list(config.mesh_axes)} for these keys")
    built = build_mesh(config, config_devices(config))
    if tuple(int(n) for n in built.devices.shape) != tuple(mesh_shape):
        slices = int(getattr(config, "num_slices", 1) or 1)
        dcn = dict(zip(mesh_axes, mesh_dcn or (slices,) + (1,) * (len(mesh_axes) - 1)))
        ici = {axis: size // dcn[axis] for axis, size in zip(mesh_axes, mesh_shape)}
        keys |= dict(pair.split("=", 1) for pair in parallelism_keys(ici, dcn if slices > 1 else None))
    if not _same_rules(rules, config.logical_axis_rules):
        first = next(
            (i for i, (a, b) in enumerate(zip(rules, config.logical_axis_rules)) if not _same_rules([a], [b])),
            min(len(rules), len(config.logical_axis_rules)),
        )
        raise ExplorerError(
            "rules",
            list(rules[first]) if first < len(rules) else None,
            f"differs from MaxText's logical_axis_rules for these keys at rule {first}: a MaxText layout compiles MaxText's "
            "own train step, whose rules are its config's (write them in a MaxText config file, or reset the rules)",
        )
    return keys


def as_main_does() -> None:
    """What train_compile.py's ``main`` sets before anything else: ``jax_default_prng_impl=unsafe_rbg`` and ``RNG_FLAG``
    in LIBTPU_INIT_ARGS (read when libtpu loads: call this before any topology is described)."""
    import jax

    jax.config.update("jax_default_prng_impl", "unsafe_rbg")
    if RNG_FLAG not in os.environ.get("LIBTPU_INIT_ARGS", "").split():
        os.environ["LIBTPU_INIT_ARGS"] = f"{os.environ.get('LIBTPU_INIT_ARGS', '')} {RNG_FLAG}".strip()


def lower_train_step(keys: dict[str, str]):
    """MaxText's own train step for ``keys`` lowered for their slice (``compile_topology``), as train_compile.py's
    ``main`` lowers it, MaxText's functions called in its order: ``get_topology_mesh``, ``get_shaped_inputs`` (its
    train state with its optimizer, ``optimizers.get_optimizer``, and the batch), the Zero-1 shardings
    (``maybe_update_params_sharding_with_opt``, ``build_zero1_input_state_mesh_shardings``),
    ``get_input_data_sharding``, then ``get_functional_train_with_signature(train.train_step, ...)`` (or DiLoCo's step)
    jitted with its shardings and donation and lowered under the mesh and its rules, as ``jit_and_compile`` does. Like
    ``main``: ``jax_default_prng_impl=unsafe_rbg`` and ``RNG_FLAG`` in LIBTPU_INIT_ARGS (before libtpu loads, in a
    compile child). Returns ``(lowered, mesh, compiler_options)``: the options ``jit_and_compile`` compiles with (its
    ``compile_xla_flags``)."""
    import contextlib
    import functools

    import jax
    from flax.core.spmd import logical_axis_rules as axis_rules

    require_maxtext()
    with contextlib.redirect_stdout(sys.stderr):
        from maxtext.trainers.diloco import diloco
        from maxtext.trainers.pre_train import train, train_compile
        from maxtext.utils import max_utils, maxtext_utils, sharding

    as_main_does()
    config = build_config(keys)
    try:  # MaxText's models built as its import sets Flax up for them (own_settings)
        with contextlib.redirect_stdout(sys.stderr), own_settings():  # MaxText prints; stdout carries the result
            train_compile.validate_config(config)
            mesh = train_compile.get_topology_mesh(config)
            args, kwargs, state_shardings, _, model = train_compile.get_shaped_inputs(mesh, config)
            params_shardings, state_shardings = sharding.maybe_update_params_sharding_with_opt(config, state_shardings)
            input_shardings = sharding.build_zero1_input_state_mesh_shardings(config, state_shardings, params_shardings)
            data_sharding = sharding.get_input_data_sharding(config, mesh)
            if config.enable_diloco:
                state, state_shardings, inner = diloco.build_abstract_diloco_state(config, args[0], state_shardings, mesh)
                args = (state, args[1], args[2] if len(args) > 2 else None)
                func = diloco.build_diloco_train_step(config, functools.partial(train.train_step, model, config, inner, params_shardings))
                func.__name__ = "train_step"
                in_shard, out_shard, static, donate = (state_shardings, data_sharding, None), (state_shardings, None), (), 0
            else:
                func, in_shard, out_shard, static, donate = maxtext_utils.get_functional_train_with_signature(
                    train.train_step, data_sharding, input_shardings, model, config, params_shardings
                )
            with jax.set_mesh(mesh), mesh if config.enable_diloco else contextlib.nullcontext(), axis_rules(config.logical_axis_rules):
                jitted = jax.jit(func, in_shardings=in_shard, out_shardings=out_shard, static_argnums=static, donate_argnums=donate)
                lowered = jitted.lower(*args, **kwargs)
    except ExplorerError:
        raise
    except Exception as error:  # MaxText's model and train step assert on shapes the keys make impossible
        raise ExplorerError(
            FIELD, " ".join(f"{k}={v}" for k, v in keys.items()), f"MaxText could not lower its train step: {first_line(error)}"
        ) from None
    return lowered, mesh, max_utils.parse_libtpu_flags_to_dict(config.compile_xla_flags)


def build(pairs: list[str] | tuple[str, ...], devices: list | None = None) -> MaxTextBuild:
    """Open a MaxText config: its keys parsed, MaxText's config, mesh and abstract parameters with their shardings.

    The devices: ``devices`` when given (a ``--target``'s, which wins), else ``compile_topology``'s when the keys
    name one, else this process's."""
    keys = parse_keys(pairs)
    config = build_config(keys)
    if devices is None and getattr(config, "compile_topology", ""):
        devices = topology_devices(config)
    mesh = build_mesh(config, devices)
    from flax import nnx
    from maxtext.utils import model_creation_utils

    try:
        with own_settings():
            _, model = model_creation_utils.create_nnx_abstract_model(config, mesh)
    except Exception as error:  # MaxText's model code asserts on shapes the keys make impossible
        raise ExplorerError(FIELD, " ".join(pairs), f"MaxText could not build its model: {first_line(error)}") from None
    parameters = {
        "/".join(str(part) for part in path): value.get_value() if isinstance(value, nnx.Variable) else value
        for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param))
    }
    rules = tuple((name, tuple(axes) if isinstance(axes, list) else axes) for name, axes in config.logical_axis_rules)
    return MaxTextBuild(keys, config, mesh, rules, parameters)


__all__ = [
    "MESH_AXES",
    "parallelism_keys",
    "FIELD",
    "INSTALL_LINE",
    "MaxTextBuild",
    "base_config_path",
    "build",
    "build_config",
    "built_model",
    "cached_config",
    "check_options",
    "config_rules",
    "config_devices",
    "dcn_shares",
    "layout_data",
    "target_of",
    "as_main_does",
    "lower_train_step",
    "program_keys",
    "topology_keys",
    "build_mesh",
    "parse_keys",
    "require_maxtext",
    "rules_for",
    "topology_devices",
]
