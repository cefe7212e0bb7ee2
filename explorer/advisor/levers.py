"""What to change to make a layout fit: the largest contributors at the peak, each with the lever that shrinks it.

``levers(result, layout)`` reads a compile's memory breakdown (``compile.memory_breakdown``: the bytes live at the
peak by kind) and writes, for each contributor a lever can shrink, the layout that lever makes:

- saved activations: a stronger remat policy (``remat: full``, the model's own remat option: the transformer's
  ``remat``, MaxText's ``remat_policy``); gradient accumulation (``microbatches``: each slice of the batch's
  activations at a time); host offload (MaxText's ``remat_policy: minimal_offloaded``); a smaller batch (the workload
  changes: said so);
- parameters, optimizer state and gradients: FSDP/ZeRO, the parameters' embed dimension (and so Adam's moments and
  the gradients) sharded over the batch's mesh axis (for MaxText, that axis's devices moved to ``fsdp``);
- the logits: vocabulary tiling, where the model has it (none of the built-in models does: the lever is listed with
  why it cannot be compiled).

Each lever carries an estimate of the bytes it frees at the peak (labelled so: the compile gives the truth), and the
levers come most-freeing first, those that make a layout before those that cannot. ``compile_levers`` compiles them
through the compile pool (the advisor's machinery: its child processes, disk cache and Stop) and gives each new
peak as XLA reports it. Where nothing the advisor compiled fits, its memory search (``fitting.memory_search``) orders
the same changes by the same breakdown (``fitting.where_memory_goes``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from explorer.advisor import fitting
from explorer.advisor.space import chosen_roles
from explorer.compile.compile_result import TargetCompile
from explorer.compile.memory_breakdown import MemoryBreakdown
from explorer.errors import ExplorerError
from explorer.layout import Layout, parse_layout
from explorer.models import MAXTEXT

TIGHT = 0.10  # a layout that fits with less than this share of the memory limit to spare is shown its levers too
# each remat option (fitting's, the advisor's) and its value that saves the least: the last of its ladder
REMAT_OPTIONS = {option: list(values)[-1] for option, values in fitting.REMAT_OPTIONS.items()}
[MICROBATCH_OPTION] = fitting.MICROBATCH_OPTIONS
BATCH_OPTIONS = fitting.BATCH_OPTIONS
HOST_OFFLOAD_POLICY = "minimal_offloaded"  # MaxText's remat policy that offloads the saved projections to host memory
VOCAB_OPTIONS = ("vocab", "vocab_size")


@dataclasses.dataclass(frozen=True)
class Lever:
    """One change that shrinks a contributor to the peak.

    ``name`` says the change (``remat full``); ``shrinks`` the kinds it acts on and ``target_bytes`` their bytes at the
    peak; ``saving_bytes`` an estimate of what it frees (an estimate: the compile gives the truth); ``layout`` the
    layout it makes (None where the model cannot make it: ``unavailable`` says why); ``cost`` what it costs."""

    name: str
    shrinks: tuple[str, ...]
    target_bytes: int
    saving_bytes: int
    layout: Layout | None
    cost: str
    unavailable: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shrinks": list(self.shrinks),
            "target_bytes": self.target_bytes,
            "saving_bytes_estimate": self.saving_bytes,
            "layout": None if self.layout is None else self.layout.to_dict(),
            "cost": self.cost,
            "unavailable": self.unavailable,
        }


@dataclasses.dataclass(frozen=True)
class LeverOutcome:
    """A lever compiled: XLA's result for its layout (None: not compiled, ``error`` says why)."""

    lever: Lever
    result: TargetCompile | None
    error: str = ""

    @property
    def peak_bytes(self) -> int | None:
        """The new peak, as XLA reports it (the verdict's figure: ``TargetCompile.judged_peak_bytes``)."""
        return None if self.result is None else self.result.judged_peak_bytes

    def to_json(self) -> dict[str, Any]:
        return self.lever.to_json() | {
            "peak_bytes": self.peak_bytes,
            "fits": None if self.result is None else self.result.fits,
            "headroom_bytes": None if self.result is None else self.result.headroom_bytes,
            "error": self.error,
        }


def needs_levers(result: TargetCompile) -> bool:
    """Whether a result's levers are worth showing: it does not fit, or fits with less than ``TIGHT`` to spare."""
    return not result.fits or result.headroom_bytes < TIGHT * result.memory_limit.bytes


def levers(result: TargetCompile, layout: Layout) -> tuple[Lever, ...]:
    """The levers for ``layout`` compiled as ``result``, the most freeing first (those with a layout before those
    without); () without a memory breakdown."""
    breakdown = result.memory_breakdown
    if breakdown is None:
        return ()
    found = [*_activation_levers(breakdown, layout, result), *_state_levers(breakdown, layout, result), *_logit_levers(breakdown, layout)]
    return tuple(sorted(found, key=lambda lever: (lever.layout is None, -lever.saving_bytes, lever.name)))


def compile_levers(
    found: tuple[Lever, ...],
    target,
    session: str = "local",
    on_progress: Callable[[list], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_wait: Callable[[int, int], None] | None = None,
) -> tuple[LeverOutcome, ...]:
    """Each lever with a layout compiled for ``target`` through the compile pool (``compile_pool.POOL``), in order; a
    lever without one is passed on with its reason."""
    from explorer.compile.compile_pool import POOL

    runnable = [lever for lever in found if lever.layout is not None]
    outcomes = POOL.compile_many(
        session, [(lever.layout, target) for lever in runnable], on_wait=on_wait, on_progress=on_progress, should_stop=should_stop
    )
    compiled = {id(lever): outcome for lever, outcome in zip(runnable, outcomes)}
    out = []
    for lever in found:
        outcome = compiled.get(id(lever))
        if outcome is None:
            out.append(LeverOutcome(lever, None, lever.unavailable))
        elif outcome.stopped:
            out.append(LeverOutcome(lever, None, "stopped"))
        elif outcome.error is not None:
            out.append(LeverOutcome(lever, None, str(outcome.error)))
        else:
            out.append(LeverOutcome(lever, outcome.result))
    return tuple(out)


def what_to_change(
    result: TargetCompile, layout: Layout, session: str = "local", on_progress: Callable[[list], None] | None = None
) -> tuple[LeverOutcome, ...]:
    """``levers(result, layout)``, each compiled for the result's target (``compile_levers``)."""
    return compile_levers(levers(result, layout), result.target, session, on_progress=on_progress)


def _variant(layout: Layout, suffix: str, options: dict[str, Any] | None = None, rules: list | None = None) -> Layout:
    data = layout.to_dict()
    data["name"] = f"{layout.name}+{suffix}"[:120]
    if options:
        data["model"]["options"] = {**data["model"]["options"], **options}
    if rules is not None:
        data["rules"] = rules
    return parse_layout(data)


def _maxtext_variant(layout: Layout, suffix: str, keys: dict[str, str], target) -> Layout:
    from explorer.models import maxtext

    options = {**layout.model.options, **keys}
    data = maxtext.layout_data([f"{k}={v}" for k, v in options.items()], target.name if target is not None and not target.is_gpu else None)
    return parse_layout({**data, "name": f"{layout.name}+{suffix}"[:120]})


def _activation_levers(breakdown: MemoryBreakdown, layout: Layout, result: TargetCompile) -> list[Lever]:
    saved = breakdown.kind_bytes("saved activation")
    if saved <= 0:
        return []
    options = dict(layout.model.options)
    out = []
    remat = next((o for o in REMAT_OPTIONS if o in options or (o == "remat_policy" and layout.model.name == MAXTEXT)), None)
    policy = REMAT_OPTIONS.get(remat or "")
    if remat and str(options.get(remat, "none" if remat == "remat" else "full")) != policy:
        made = _made(layout, f"remat_{policy}", {remat: policy}, result)
        out.append(
            _lever(
                f"remat {policy}",
                ("saved activation",),
                saved,
                saved,
                made,
                "each layer's activations recomputed in the backward pass (about a third more compute)",
            )
        )
    elif remat is None:
        out.append(
            Lever(
                "remat",
                ("saved activation",),
                saved,
                saved,
                None,
                "recompute activations in the backward pass",
                "the model has no remat option (wrap its layers in nn.remat / jax.checkpoint)",
            )
        )
    if layout.model.name == MAXTEXT and str(options.get("remat_policy", "full")) != HOST_OFFLOAD_POLICY:
        made = _made(layout, "offload", {"remat_policy": HOST_OFFLOAD_POLICY}, result)
        out.append(
            _lever(
                f"host offload (remat_policy {HOST_OFFLOAD_POLICY})",
                ("saved activation",),
                saved,
                saved,
                made,
                "the saved projections go to host memory and back (host bandwidth)",
            )
        )
    micro = _microbatches(layout, options)
    if micro:
        made = _made(layout, f"mb{micro}", {MICROBATCH_OPTION: micro}, result)
        saving = saved - saved * int(options.get(MICROBATCH_OPTION, 1) or 1) // micro  # a slice's activations at a time
        out.append(
            _lever(
                f"{micro} microbatches",
                ("saved activation",),
                saved,
                saving,
                made,
                "the batch in slices, one at a time (gradient accumulation: more, smaller steps)",
            )
        )
    batch_option = next((o for o in BATCH_OPTIONS if o in options), None)
    if batch_option:
        smaller = _half(options[batch_option])
        if smaller is not None:
            made = _made(layout, f"{batch_option}{smaller}", {batch_option: smaller}, result)
            out.append(
                _lever(
                    f"{batch_option} {smaller}",
                    ("saved activation", "input"),
                    saved,
                    saved // 2,
                    made,
                    "half the examples per step: a different workload, not the same training",
                )
            )
    return out


def _microbatches(layout: Layout, options: dict[str, Any]) -> int | None:
    """The next gradient-accumulation count to try (twice the layout's), where the model has the option and its batch
    still divides; None otherwise."""
    if MICROBATCH_OPTION not in options or int(options.get("pipeline_stages", 1) or 1) > 1:
        return None
    now = int(options.get(MICROBATCH_OPTION, 1) or 1)
    batch = int(options.get("batch", 0) or 0)
    data = max((size for axis, size in zip(layout.mesh.axes, layout.mesh.shape) if axis in _batch_axes(layout)), default=1)
    for micro in (now * 2, now * 4, now * 8):
        if batch and batch % micro == 0 and (batch // micro) % data == 0:
            return micro
    return None


def _half(value: Any) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number <= 1:
        return None
    half = number / 2
    return (
        (int(half) if half.is_integer() else half) if not isinstance(value, str) else (str(int(half)) if half.is_integer() else str(half))
    )


def _batch_axes(layout: Layout) -> set[str]:
    """The mesh axes the layout's batch names map to (its data-parallel axes)."""
    axes: set[str] = set()
    for name, mesh_axes in layout.rules_for_flax():
        if "batch" in str(name):
            axes.update([mesh_axes] if isinstance(mesh_axes, str) else [a for a in (mesh_axes or ()) if a])
    return axes & set(layout.mesh.axes)


def _state_levers(breakdown: MemoryBreakdown, layout: Layout, result: TargetCompile) -> list[Lever]:
    state = sum(breakdown.kind_bytes(k) for k in ("parameter", "optimizer state", "gradient"))
    if state <= 0 or layout.mesh.explicit:
        return []
    sizes = dict(zip(layout.mesh.axes, layout.mesh.shape))
    if layout.model.name == MAXTEXT:
        options = dict(layout.model.options)
        data = int(options.get("ici_data_parallelism", "1") or 1)
        if data <= 1:
            return []
        fsdp = int(options.get("ici_fsdp_parallelism", "1") or 1)
        keys = {"ici_data_parallelism": "1", "ici_fsdp_parallelism": str(fsdp * data)}
        made = _made(layout, "fsdp", keys, result)
        return [
            _lever(
                f"FSDP over the data axis's {data} devices (ici_fsdp_parallelism {fsdp * data})",
                ("parameter", "optimizer state", "gradient"),
                state,
                state - state // data,
                made,
                "parameters gathered before each use (all-gathers, reduce-scatters)",
            )
        ]
    axes = sorted(_batch_axes(layout), key=lambda a: -sizes[a])
    if not axes or sizes[axes[0]] <= 1:
        return []
    axis = axes[0]
    names = [name for name, role in _roles(layout).items() if role in ("embed", "embed_no_expert")]
    rules = [list(r) for r in layout.to_dict()["rules"]]
    ruled = {r[0] for r in rules}
    free = [n for n in names if n not in ruled or all(r[1] in (None, []) for r in rules if r[0] == n)]
    if not free:
        return []
    new_rules = [r for r in rules if r[0] not in free] + [[n, axis] for n in free]
    made = _variant(layout, f"fsdp_{axis}", rules=new_rules)
    return [
        _lever(
            f"FSDP over {axis} ({', '.join(free)} -> {axis})",
            ("parameter", "optimizer state", "gradient"),
            state,
            state - state // sizes[axis],
            made,
            f"parameters gathered over {axis} before each use (all-gathers, reduce-scatters)",
        )
    ]


def _roles(layout: Layout) -> dict[str, str]:
    try:
        return chosen_roles(layout)
    except ExplorerError:
        return {}


def _logit_levers(breakdown: MemoryBreakdown, layout: Layout) -> list[Lever]:
    options = dict(layout.model.options)
    vocab = next((int(options[o]) for o in VOCAB_OPTIONS if str(options.get(o, "")).isdigit()), None)
    if vocab is None:
        return []
    logits = sum(b.bytes for b in breakdown.buffers if b.kind in ("saved activation", "temporary") and b.shape.endswith(f",{vocab}]"))
    if logits <= 0:
        return []
    return [
        Lever(
            "vocabulary tiling",
            ("saved activation", "temporary"),
            logits,
            logits,
            None,
            "the logits and their loss in slices of the vocabulary",
            "the explorer's train step computes the whole [batch, length, vocab] logits: the model has no vocabulary tiling "
            "(MaxText's num_vocab_tiling applies in its own train step)",
        )
    ]


def _made(layout: Layout, suffix: str, options: dict[str, Any], result: TargetCompile) -> Layout | str:
    """The layout a lever makes, or why it cannot be made (the model's checks refuse the option)."""
    try:
        if layout.model.name == MAXTEXT:
            return _maxtext_variant(layout, suffix, {k: str(v) for k, v in options.items()}, result.target)
        return _variant(layout, suffix, options)
    except ExplorerError as error:
        return str(error)


def _lever(name: str, shrinks: tuple[str, ...], target: int, saving: int, made: Layout | str, cost: str) -> Lever:
    if isinstance(made, str):
        return Lever(name, shrinks, target, saving, None, cost, made)
    return Lever(name, shrinks, target, saving, made, cost)
