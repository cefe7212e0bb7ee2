"""The search space: which mesh axes a model's logical names call for, and every mesh and rules over them.

Mesh axes are named by role: ``data`` (batch only), ``fsdp`` (batch, and the parameters' embed
dimension: ZeRO-3), ``tensor`` (heads, kv_heads, mlp, hidden, vocab: Megatron), plus ``sequence``
when the model has a sequence name (``length``) and ``expert`` when it has an expert name. A mesh
is a factorization of the device count over those axes in that order (axes of size 1 left out);
its rules give every role the mesh axes it has:

    batch     -> (data, fsdp, expert)        MaxText's activation_batch
    embed     -> (fsdp, sequence, expert)    MaxText's embed (FSDP over every non-tensor axis)
    tensor    -> tensor                      heads, kv_heads, mlp, hidden, vocab
    sequence  -> sequence                    length (context parallelism)
    expert    -> expert
    batch_no_expert -> (data, fsdp)          MaxText's activation_batch_no_exp (the expert axis is taken)
    embed_no_expert -> (fsdp, sequence)      MaxText's embed_no_exp (expert kernels: FSDP within experts)
    layer, kv, unknown names -> None         replicated

Every logical name the model uses gets a rule, the activation-only names the trace reads
included. Roles come from the names' conventions (the Flax guides', MaxText's, T5X's and
flaxformer's: ``ROLE_NAMES``), else from the name's parts (``ROLE_PATTERNS``: the names guessed
so are listed by ``guessed_roles`` and shown), and can be overridden (``roles={"hidden": "tensor"}``). With a 2^k device count and a axes
there are C(k + a - 1, a - 1) meshes: 10 for the guide's MLP on 8 devices (data, fsdp,
tensor), 84 for a transformer on 64 (data, fsdp, sequence, tensor).

On a GPU cluster the axes are laid over the GPUs in that order, host-major (JAX numbers a cluster's
GPUs host by host), so ``tensor``, innermost, lies on the GPUs of one host (NVLink) and the outer
axes span hosts (the network); a mesh whose tensor axis would straddle two hosts though it fits in
one (4 on hosts of 6 GPUs) is left out (``nvlink_first``).
"""

from __future__ import annotations

import json
import re
from typing import Callable, Iterable, Sequence

from explorer.analysis.analyzer import logical_names
from explorer.errors import ExplorerError
from explorer.layout import Layout, parse_layout
from explorer.hardware.targets import Target, hosts_per_axis
from explorer.models import MAXTEXT
from explorer.models.options import TransformerOptions

ROLES = ("batch", "embed", "tensor", "sequence", "expert", "batch_no_expert", "embed_no_expert", "stage", "none")
# Logical names by convention, each by its role (activation-only names included: a name the parameters do not carry
# still shards the activations that carry it). The Flax guides' (batch, hidden, embed), this project's transformer,
# MaxText's base.yml (activation_*, *_no_exp, exp, q_lora, kv_lora, embed_and_logits...), T5X's and flaxformer's
# (joined_kv, mlp, vocab, expert_mlp, expert_replicas, layers/stack), and the common spellings of other codebases.
ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "batch": (
        "batch",
        "data",
        "activation_batch",
        "activation_embed_and_logits_batch",
        "activation_batch_attn",
        "activation_kv_batch",
        "activation_prefill_kv_batch",
        "decode_batch",
        "cache_batch",
        "expert_replicas",
        "activation_embed_and_logits_batch_sequence",
    ),
    # MaxText's MoE batch: its dispatched tokens are (activation_exp, activation_batch_moe, ...), the expert axis is exp's
    "batch_no_expert": (
        "activation_batch_no_exp",
        "activation_kv_batch_no_exp",
        "activation_embed_and_logits_batch_no_exp",
        "activation_batch_moe",
    ),
    "embed": (
        "embed",
        "emb",
        "embed_dim",
        "d_model",
        "model_dim",
        "hidden_size",
        "embed_vocab",
        "q_lora",
        "kv_lora",
        "embed_tensor_transpose",
    ),
    "embed_no_expert": ("embed_no_exp", "embed_moe_no_exp", "embed_moe"),  # MaxText's expert kernels (exp, embed_moe, mlp_moe)
    "tensor": (
        "hidden",
        "heads",
        "q_heads",
        "kv_heads",
        "mlp",
        "mlp_dim",
        "ff",
        "ffn",
        "joined_kv",
        "vocab",
        "mlp_moe",
        "expert_mlp",
        "mlp_no_fsdp",
        "gdn_head",
        "cache_heads",
        "paged_kv_heads",
        "num_heads",
        "n_heads",
        "activation_heads",
        "activation_kv_heads",
        "activation_mlp",
        "activation_vocab",
        "activation_embed",
        "activation_mlp_moe",
        "activation_embed_moe",
        "activation_embed_attn",
        "activation_kv",
        "activation_kv_head_dim",
        "norm",
        "engram_dim",
    ),
    "sequence": (
        "length",
        "seq",
        "sequence",
        "activation_length",
        "activation_length_no_exp",
        "activation_q_length",
        "activation_q_length_no_exp",
        "q_length",
        "activation_length_attn",
        "activation_length_moe",
        "activation_norm_length",
        "activation_norm_length_moe",
        "activation_input_length_attn",
        "decode_length",
        "prefill_activation_length",
        "seq_len",
    ),
    "expert": ("expert", "experts", "exp", "activation_exp", "num_experts"),
    "stage": ("stage",),  # the built-in transformer's pipeline stages (explorer.models.pipeline): the stage mesh axis
    "none": (
        "layer",
        "layers",
        "stack",
        "blocks",
        "kv",
        "head_dim",
        "kv_head_dim",
        "qkv",
        "kv_length",
        "activation_kv_length",
        "q_lora_up_proj",
        "kv_lora_up_proj",
        "unmodeled",
        "relpos_buckets",
        "abspos_buckets",
        "mlp_activations",
        "circular_repeats",
        "dense_layers",
        "moe_layers",
        "local_layers",
        "cache_kv",
        "cache_sequence",
        "cache_batch_prefill",
        "cache_heads_none",
        "activation_stage",
        "diloco",
        "mhc",
        "kv_lora_dim",
        "classes",
        "num_pages",
        "tokens_per_page",
        "paged_kv_head_dim_size",
    ),
}
# A name no table knows: its role from its parts, first match wins (MaxText's suffix "_no_exp" drops the expert axis).
ROLE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("batch.*_no_exp$", "batch_no_expert"),
    ("embed.*_no_exp$", "embed_no_expert"),
    ("_no_exp$", "none"),
    ("(^|_)(exp|experts?)($|_)", "expert"),
    ("(^|_)batch($|_)", "batch"),
    ("(^|_)(length|seq|sequence)($|_)", "sequence"),
    ("(^|_)(heads?|mlp|ffn?|vocab|hidden|intermediate)($|_)", "tensor"),
    ("^activation_embed", "tensor"),
    ("(^|_)(embed|emb|model_dim|d_model)($|_)", "embed"),
)
AXIS_ORDER = ("stage", "data", "fsdp", "sequence", "expert", "tensor")  # mesh axes, outermost first (tensor innermost)
# Remat options other than this project's transformer's ``remat`` (whose values are estimate.REMAT_POLICIES): the option's
# name, and the values the search tries, most kept first, each with the policy stage 1 costs it as. MaxText's
# ``remat_policy`` (decoders.py get_remat_policy): minimal saves every projection's output, save_dot_except_mlp only the
# attention's, full only each layer's input; "none" (no nn.remat) is the vendored factories' own value.
REMAT_ALIASES: dict[str, dict[str, str]] = {
    "remat_policy": {"none": "none", "minimal": "dots_saveable", "save_dot_except_mlp": "dots_with_no_batch_dims_saveable", "full": "full"},
}


def default_roles(names: Sequence[str]) -> dict[str, str]:
    """Each logical name's role by convention (``ROLE_NAMES``), else from its parts (``ROLE_PATTERNS``); "none": replicated.

    >>> default_roles(["batch", "embed", "hidden", "layer", "activation_batch_no_exp", "my_heads_dim", "zzz"])
    {'batch': 'batch', 'embed': 'embed', 'hidden': 'tensor', 'layer': 'none', 'activation_batch_no_exp': 'batch_no_expert', 'my_heads_dim': 'tensor', 'zzz': 'none'}
    """
    return {name: role_of(name)[0] for name in names}


def role_of(name: str) -> tuple[str, bool]:
    """A name's role and whether a convention table knows it (False: guessed from its parts, or none matched)."""
    known = next((role for role, names in ROLE_NAMES.items() if name in names), None)
    if known is not None:
        return known, True
    lowered = name.lower()
    return next((role for pattern, role in ROLE_PATTERNS if re.search(pattern, lowered)), "none"), False


def guessed_roles(names: Sequence[str]) -> dict[str, str]:
    """The names no convention table knows, with the role chosen for each (shown, and changed with ``roles=``)."""
    return {name: role for name in names for role, known in [role_of(name)] if not known}


def check_roles(roles: dict[str, str], names: Sequence[str]) -> None:
    """Refuse a role given to a name the model does not have, or a role that is not one of ``ROLES``."""
    for name, role in roles.items():
        if name not in names:
            raise ExplorerError("roles", name, f"is not a logical name of this model; its names: {', '.join(names)}")
        if role not in ROLES:
            raise ExplorerError(f"roles[{name!r}]", role, f"is not a role; choose one of {', '.join(ROLES)}")


def mesh_axes_for(roles: dict[str, str]) -> tuple[str, ...]:
    """The named axes the search factorizes over: data, fsdp, tensor, and sequence/expert where the model has them."""
    present = set(roles.values())
    return tuple(a for a in AXIS_ORDER if a in ("data", "fsdp", "tensor") or a in present and a != "stage")


def factorizations(devices: int, axes: int) -> list[tuple[int, ...]]:
    """Every ordered way to write ``devices`` as a product of ``axes`` whole numbers, in a fixed order.

    >>> factorizations(4, 2)
    [(1, 4), (2, 2), (4, 1)]
    """
    if axes == 1:
        return [(devices,)]
    out = []
    for first in range(1, devices + 1):
        if devices % first == 0:
            out += [(first,) + rest for rest in factorizations(devices // first, axes - 1)]
    return out


def rules_for(roles: dict[str, str], mesh_axes: Sequence[str]) -> list[list]:
    """The rules a mesh gets: each role its axes (see the module docstring), in the names' sorted order."""
    present = set(mesh_axes)

    def axes(*names: str):
        chosen = [a for a in names if a in present]
        return None if not chosen else chosen[0] if len(chosen) == 1 else chosen

    by_role = {
        "batch": axes("data", "fsdp", "expert"),
        "embed": axes("fsdp", "sequence", "expert"),
        "tensor": axes("tensor"),
        "sequence": axes("sequence"),
        "expert": axes("expert"),
        "none": None,
        "batch_no_expert": axes("data", "fsdp"),
        "embed_no_expert": axes("fsdp", "sequence"),
        "stage": axes("stage"),
    }
    return [[name, by_role[roles[name]]] for name in sorted(roles)]


def candidate_layouts(layout: Layout, target: Target, roles: dict[str, str] | None = None, pipelines: bool | None = None) -> list[Layout]:
    """The search space: the layout itself first, then one layout per factorization (fixed order), then the pipelines
    (``pipeline_meshes``) where ``pipelines`` says so (None: on several slices, where a pipeline can keep the
    parameters' gathers off the data-center network; True: on one slice too).

    A layout with Explicit axes keeps its own mesh axes, axis types and rules, and the search
    factorizes the target's devices over those axes: such a model names mesh axes in its own code
    (``out_sharding=P('data', ...)``, ``reshard``), so its activations are the model's to decide,
    not the rules', and a mesh with other axis names would not trace.
    """
    if layout.mesh.explicit:
        if roles:
            raise ExplorerError(
                "roles",
                sorted(roles),
                "apply to the advisor's own rules; a layout with Explicit axes keeps "
                "its own mesh axes and rules, and only their sizes are searched",
            )
        return _explicit_candidates(layout, target)
    if layout.model.name == MAXTEXT:
        return maxtext_candidates(layout, target)
    chosen = chosen_roles(layout, roles)
    axes = mesh_axes_for(chosen)
    plain = {k: v for k, v in layout.model.options.items() if k not in PIPELINE_OPTIONS}
    meshes = [(sizes, {}) for sizes in factorizations(target.devices, len(axes))]
    for stages, micro, sizes in (
        pipeline_meshes(layout, target) if (target.multislice if pipelines is None else pipelines) else ()
    ):  # the pipelines: a stage axis, then data, fsdp, tensor
        meshes.append((sizes, {"pipeline_stages": stages, "pipeline_microbatches": micro}))

    def generated():
        for sizes, pipeline in meshes:
            names = ("stage",) + PIPELINE_AXES if pipeline else axes
            kept = [(a, s) for a, s in zip(names, sizes) if s > 1] or [(names[0], 1)]
            mesh_axes = [a for a, _ in kept]
            if not nvlink_first(target, kept):
                continue
            name = "x".join(f"{a}{s}" for a, s in kept) + (f"+pp_mb{pipeline['pipeline_microbatches']}" if pipeline else "")
            candidate = parse_layout(
                {
                    "name": name,
                    "mesh": {"shape": [s for _, s in kept], "axes": mesh_axes},
                    "rules": rules_for({**chosen, "stage": "stage"} if pipeline else chosen, mesh_axes),
                    "model": {"name": layout.model.name, "options": {**plain, **pipeline}},
                }
            )
            yield from across_slices(candidate, target)

    return distinct([layout, *generated()])


PIPELINE_OPTIONS = ("pipeline_stages", "pipeline_microbatches", "pipeline_repeats")  # the built-in transformer's (docs/pipelines.md)
PIPELINE_AXES = ("data", "fsdp", "tensor")  # the axes beside a pipeline's stage axis (its stage axis outermost)
PIPELINE_MICROBATCHES = (1, 2, 4)  # microbatches per stage tried: stages x these (the bubble (S-1)/(M+S-1) falls with M)


def pipeline_meshes(layout: Layout, target: Target) -> list[tuple[int, int, tuple[int, ...]]]:
    """The pipelines the search tries for a model that can pipeline (the built-in transformer, whose options say
    ``pipeline_stages``; docs/pipelines.md): (stages, microbatches, the mesh sizes of stage, data, fsdp, tensor) for
    every stage count above 1 that divides both the layers and the devices, every factorization of the rest over
    ``PIPELINE_AXES``, and microbatch counts of stages x ``PIPELINE_MICROBATCHES`` that divide the batch into
    microbatches the data and FSDP axes still divide. The stage axis goes over the slices or inside one
    (``across_slices``). Not searched: circular repeats."""
    if layout.model.name != "transformer" or layout.mesh.explicit:
        return []
    options = TransformerOptions.model_validate({k: v for k, v in layout.model.options.items() if k not in PIPELINE_OPTIONS})
    layers, batch = options.layers, options.batch // options.microbatches
    out = []
    for stages in range(2, min(layers, target.devices) + 1):
        if layers % stages or target.devices % stages:
            continue
        for rest in factorizations(target.devices // stages, len(PIPELINE_AXES)):
            for per in PIPELINE_MICROBATCHES:
                micro = stages * per
                if batch % micro == 0 and (batch // micro) % (rest[0] * rest[1]) == 0:
                    out.append((stages, micro, (stages,) + rest))
    return out


SLICE_AXES = (
    "stage",
    "data",
    "fsdp",
)  # the axes a candidate may spread over several slices: stages, data or FSDP over the DCN, never tensor


def across_slices(candidate: Layout, target: Target) -> list[Layout]:
    """On several slices, one candidate per axis that can span them all (``SLICE_AXES`` whose size the slice count
    divides: ``mesh.dcn`` puts that axis over the slices, its rest and the other axes inside each); on one slice, the
    candidate itself."""
    if not target.multislice:
        return [candidate]
    out = []
    for index, (axis, size) in enumerate(zip(candidate.mesh.axes, candidate.mesh.shape)):
        if axis in SLICE_AXES and size % target.num_slices == 0:
            data = candidate.to_dict()
            data["name"] = f"{candidate.name}, {axis} across slices"
            data["mesh"]["dcn"] = [target.num_slices if i == index else 1 for i in range(len(candidate.mesh.axes))]
            out.append(parse_layout(data))
    return out


def nvlink_first(target: Target, axes: Sequence[tuple[str, int]]) -> bool:
    """On a GPU cluster, whether a mesh (axis, size pairs, outermost first) keeps its ``tensor`` axis inside one
    host wherever it could be: tensor is the innermost axis, so it lies on consecutive GPUs (JAX numbers them
    host-major), and a tensor axis no larger than a host must not straddle two (4 on hosts of 6 would; 2, 3 and 6
    do not). A larger one spans hosts of necessity and is kept (the network then costs it). True on a TPU slice.

    >>> from explorer.hardware.targets import parse_target
    >>> [nvlink_first(parse_target("h100:2x6"), [("fsdp", 12 // t), ("tensor", t)]) for t in (2, 3, 4, 6, 12)]
    [True, True, False, True, True]
    """
    if not target.is_gpu:
        return True
    spans = hosts_per_axis(target, tuple(size for _, size in axes))
    return all(hosts == 1 for (name, size), hosts in zip(axes, spans) if name == "tensor" and size <= target.gpus_per_host)


def chosen_roles(layout: Layout, roles: dict[str, str] | None = None) -> dict[str, str]:
    """Every logical name the model uses (its parameters', inputs' and activations', as the trace reads them:
    ``analysis.logical_names``) with its role: by convention, then ``roles``."""
    names = logical_names(layout.model, tuple(layout.mesh.axes))
    chosen = default_roles(names)
    if roles:
        check_roles(roles, names)
        chosen.update(roles)
    return chosen


MAXTEXT_AXES = ("data", "fsdp", "tensor")  # MaxText's mesh axes the search splits a slice over (and expert, for experts)
MAXTEXT_SLICE_AXES = ("data", "fsdp")  # the axes a MaxText candidate may put over the slices (dcn_*_parallelism)
PARALLELISM_KEY = re.compile(r"^(ici|dcn)_\w+_parallelism$")


def maxtext_candidates(layout: Layout, target: Target) -> list[Layout]:
    """A MaxText config's search space: the config itself, then the same keys with the ``ici_*_parallelism`` set to
    each factorization of a slice's devices over ``MAXTEXT_AXES`` (expert too when the config has experts), and on
    several slices ``dcn_data_parallelism`` or ``dcn_fsdp_parallelism`` set to the slice count, every other axis 1.
    Each is built by MaxText's own machinery (``models.maxtext.layout_data``): its 12-axis mesh (size-1 axes kept, since
    its inputs and ``logical_axis_rules`` name them all) and its own rules, so every candidate is a layout MaxText itself
    would build, and its winner is written back as the keys that make it (``output.maxtext_keys``). A split MaxText's
    config refuses is no candidate. On a GPU target (MaxText's ``compile_topology`` names TPU slices only), the config
    alone."""
    from explorer.models import maxtext

    if target.is_gpu:
        return [layout]
    options = maxtext.check_options(layout.model.options)
    config = maxtext.cached_config(tuple(sorted(options.items())))
    axes = MAXTEXT_AXES + (("expert",) if int(getattr(config, "num_experts", 1) or 1) > 1 else ())
    plain = [f"{key}={value}" for key, value in options.items() if not PARALLELISM_KEY.match(key)]
    per_slice = target.devices // target.num_slices

    def generated():
        for sizes in factorizations(per_slice, len(axes)):
            ici = dict(zip(axes, sizes))
            name = "x".join(f"{a}{s}" for a, s in ici.items() if s > 1) or f"{axes[0]}1"
            spreads = (
                [(name, {})]
                if not target.multislice
                else [(f"{name}, {a} across slices", {a: target.num_slices}) for a in MAXTEXT_SLICE_AXES]
            )
            for label, dcn in spreads:
                try:
                    data = maxtext.layout_data(plain + maxtext.parallelism_keys(ici, dcn), target.name)
                except ExplorerError:  # MaxText refuses this split (its config's checks): not a layout it would build
                    continue
                yield parse_layout({**data, "name": label})

    return distinct([layout, *generated()], key=_mesh_identity)


def _mesh_identity(layout: Layout) -> str:
    """A MaxText candidate's mesh and rules: two with the same are one program (its parallelism keys aside)."""
    data = layout.to_dict()
    return json.dumps([data["mesh"], data["rules"]], sort_keys=True)


def _explicit_candidates(layout: Layout, target: Target) -> list[Layout]:
    """The layout, then every factorization of the target's devices over its own mesh axes (sizes only change)."""

    def generated():
        for sizes in factorizations(target.devices, len(layout.mesh.axes)):
            data = layout.to_dict()
            data["name"] = "x".join(f"{a}{s}" for a, s in zip(layout.mesh.axes, sizes))
            data["mesh"]["shape"] = list(sizes)
            yield parse_layout(data)

    return distinct([layout, *generated()])


def _identity(layout: Layout) -> str:
    """The layout as JSON without its name: two candidates with the same identity are one program."""
    data = layout.to_dict()
    data.pop("name")
    return json.dumps(data, sort_keys=True)


def distinct(layouts: Iterable[Layout], key: Callable[[Layout], str] = _identity) -> list[Layout]:
    """The layouts in order, each program once: the first of those with the same ``key`` (the search's one dedupe)."""
    out, seen = [], set()
    for layout in layouts:
        if (identity := key(layout)) not in seen:
            seen.add(identity)
            out.append(layout)
    return out
