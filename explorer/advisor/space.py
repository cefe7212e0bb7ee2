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
    layer, kv, unknown names -> None         replicated

Roles come from the names' conventions (the Flax guides', MaxText's, T5X's: ``ROLE_NAMES``)
and can be overridden (``roles={"hidden": "tensor"}``). With a 2^k device count and a axes
there are C(k + a - 1, a - 1) meshes: 10 for the guide's MLP on 8 devices (data, fsdp,
tensor), 84 for a transformer on 64 (data, fsdp, sequence, tensor).
"""

from __future__ import annotations

import json
from typing import Sequence

from explorer.analysis import logical_names
from explorer.errors import ExplorerError
from explorer.layout import Layout, parse_layout
from explorer.targets import Target

ROLES = ("batch", "embed", "tensor", "sequence", "expert", "none")
# Logical names by convention: the Flax guides' (batch, hidden, embed), this project's transformer,
# MaxText's base.yml (activation_*, q_heads, joined_kv, exp...), T5X/flaxformer's (joined_kv, mlp, vocab).
ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "batch": ("batch", "activation_batch", "data"),
    "embed": ("embed", "emb", "embed_dim", "d_model", "model_dim"),
    "tensor": ("hidden", "heads", "q_heads", "kv_heads", "mlp", "mlp_dim", "ff", "joined_kv", "vocab", "activation_heads",
               "activation_kv_heads", "activation_mlp", "activation_vocab"),
    "sequence": ("length", "seq", "sequence", "activation_length", "q_length", "kv_length"),
    "expert": ("expert", "experts", "exp", "activation_exp"),
}
AXIS_ORDER = ("data", "fsdp", "sequence", "expert", "tensor")  # mesh axes, outermost first (tensor innermost)


def default_roles(names: Sequence[str]) -> dict[str, str]:
    """Each logical name's role by convention ("none": replicated).

    >>> default_roles(["batch", "embed", "hidden", "layer"])
    {'batch': 'batch', 'embed': 'embed', 'hidden': 'tensor', 'layer': 'none'}
    """
    found = {}
    for name in names:
        found[name] = next((role for role, known in ROLE_NAMES.items() if name in known), "none")
    return found


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
    return tuple(a for a in AXIS_ORDER if a in ("data", "fsdp", "tensor") or a in present)


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
        "batch": axes("data", "fsdp", "expert"), "embed": axes("fsdp", "sequence", "expert"), "tensor": axes("tensor"),
        "sequence": axes("sequence"), "expert": axes("expert"), "none": None,
    }
    return [[name, by_role[roles[name]]] for name in sorted(roles)]


def candidate_layouts(layout: Layout, target: Target, roles: dict[str, str] | None = None) -> list[Layout]:
    """The search space: the layout itself first, then one layout per factorization (fixed order).

    A layout with Explicit axes keeps its own mesh axes, axis types and rules, and the search
    factorizes the target's devices over those axes: such a model names mesh axes in its own code
    (``out_sharding=P('data', ...)``, ``reshard``), so its activations are the model's to decide,
    not the rules', and a mesh with other axis names would not trace.
    """
    if layout.mesh.explicit:
        if roles:
            raise ExplorerError("roles", sorted(roles), "apply to the advisor's own rules; a layout with Explicit axes keeps "
                                                       "its own mesh axes and rules, and only their sizes are searched")
        return _explicit_candidates(layout, target)
    names = logical_names(layout.model, tuple(layout.mesh.axes))
    chosen = default_roles(names)
    if roles:
        check_roles(roles, names)
        chosen.update(roles)
    axes = mesh_axes_for(chosen)
    out, seen = [layout], {_identity(layout)}
    for sizes in factorizations(target.devices, len(axes)):
        kept = [(a, s) for a, s in zip(axes, sizes) if s > 1] or [(axes[0], 1)]
        mesh_axes = [a for a, _ in kept]
        name = "x".join(f"{a}{s}" for a, s in kept)
        candidate = parse_layout({
            "name": name, "mesh": {"shape": [s for _, s in kept], "axes": mesh_axes},
            "rules": rules_for(chosen, mesh_axes), "model": {"name": layout.model.name, "options": dict(layout.model.options)},
        })
        if _identity(candidate) not in seen:
            seen.add(_identity(candidate))
            out.append(candidate)
    return out


def _explicit_candidates(layout: Layout, target: Target) -> list[Layout]:
    """The layout, then every factorization of the target's devices over its own mesh axes (sizes only change)."""
    out, seen = [layout], {_identity(layout)}
    for sizes in factorizations(target.devices, len(layout.mesh.axes)):
        data = layout.to_dict()
        data["name"] = "x".join(f"{a}{s}" for a, s in zip(layout.mesh.axes, sizes))
        data["mesh"]["shape"] = list(sizes)
        candidate = parse_layout(data)
        if _identity(candidate) not in seen:
            seen.add(_identity(candidate))
            out.append(candidate)
    return out


def _identity(layout: Layout) -> str:
    """The layout as JSON without its name: two candidates with the same identity are one program."""
    data = layout.to_dict()
    data.pop("name")
    return json.dumps(data, sort_keys=True)
