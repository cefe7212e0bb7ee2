"""The depth shortcut: compile a model at two small depths and extrapolate its figures to its own depth.

A model whose layers are not scanned compiles in time that grows with its depth; its figures
(XLA's memory, flops, bytes accessed, each collective) grow linearly with it. ``stage2(shortcut=True)``
compiles each candidate at ``SHORTCUT_DEPTHS`` (``at_depth``), extrapolates linearly in depth
(``extrapolate``, labelled ``extrapolated``), then compiles the best in full and reports how close
the extrapolation was (``extrapolation_error``). ``depth_of`` finds the option(s) that set the depth.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from explorer.predict import roofline
from explorer.compile.compile_result import CollectiveCost, CrossCheck, Extrapolated, Memory, TargetCompile, judged_peak
from explorer.errors import ExplorerError
from explorer.hlo.program import LoopWork
from explorer.layout import Layout, parse_layout
from explorer.compile.xla_results import memory_limit
from explorer.hardware.targets import Target

DEPTH_OPTIONS = (
    "layers",
    "num_layers",
    "n_layers",
    "n_layer",
    "num_hidden_layers",
    "num_decoder_layers",
    "num_encoder_layers",
    "decoder_layers",
    "encoder_layers",
    "base_num_decoder_layers",
)
SHORTCUT_DEPTHS = (2, 4)  # the two small depths compiled; both scanned loops, so XLA's loop handling is the full model's
NO_DEPTH_OPTION = "no depth option found"  # how Depth.why starts where none was found (the command line and the page say how to name one)
MEMORY_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes")


@dataclasses.dataclass(frozen=True)
class Depth:
    """How a model's depth is set: the option(s) (all at ``full``), or why there is no shortcut (``why``)."""

    options: tuple[str, ...] = ()
    full: int = 0
    why: str = ""

    @property
    def usable(self) -> bool:
        return bool(self.options)


def depth_of(layout: Layout, option: str | None = None, depths: Sequence[int] = SHORTCUT_DEPTHS) -> Depth:
    """The model option(s) that set its depth: ``option`` when given, else every option with a known depth name
    (``DEPTH_OPTIONS``: this project's ``layers``, ``num_layers``, T5X's ``num_encoder_layers``/``num_decoder_layers``...).

    >>> from explorer.layout import seed_layout
    >>> depth_of(seed_layout()).why
    'layers=4 is no deeper than the small depths 2, 4: compiled in full'
    """
    options = dict(layout.model.options)
    if option is not None:
        if option not in options:
            raise ExplorerError(
                "--depth-option", option, f"is not an option of this layout's model; its options: {', '.join(sorted(options)) or 'none'}"
            )
        names = (option,)
    else:
        names = tuple(n for n in DEPTH_OPTIONS if n in options)
        if not names:
            return Depth(why=f"{NO_DEPTH_OPTION} among the model's options ({', '.join(sorted(options)) or 'none'})")
    # a MaxText config's options are its command line's text (base_num_decoder_layers="32"): a whole number in words counts
    values = {int(v) if isinstance(v, str) and v.strip().isdigit() else v for v in (options[n] for n in names)}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ExplorerError("--depth-option", names[0], f"is not a whole number of layers ({options[names[0]]!r})")
    if len(values) != 1:
        return Depth(why=f"the depth options {', '.join(f'{n}={options[n]}' for n in names)} differ: one line in depth cannot reach them")
    full = values.pop()
    if full <= max(depths):
        return Depth(why=f"{names[0]}={full} is no deeper than the small depths {', '.join(map(str, depths))}: compiled in full")
    return Depth(names, full)


def at_depth(layout: Layout, depth: Depth, layers: int) -> Layout:
    """The same layout with the model ``layers`` deep (every depth option), named so."""
    data = layout.to_dict()
    data["name"] = f"{layout.name}@{layers}"
    data["model"]["options"].update({n: layers for n in depth.options})
    return parse_layout(data)


def extrapolate(
    low: TargetCompile,
    high: TargetCompile,
    depths: Sequence[int],
    full: int,
    target: Target,
    options: Sequence[str] = (),
) -> TargetCompile:
    """A compile result at depth ``full`` extrapolated linearly from results at ``depths`` (two depths).

    Every figure that grows with depth (XLA's memory, flops, bytes accessed, the loops' extra work,
    each collective's count and bytes, matched by op, mesh axes and group) is ``f(full) = f(d1) +
    (f(d2) - f(d1)) x (full - d1) / (d2 - d1)``; the roofline is recomputed from them and the peak
    judged against the device's HBM (on a TPU the dump's HBM peak, extrapolated as the rest: the cross-check then
    holds it and the extrapolated dump flops, nothing else); the step model's prediction is extrapolated as the other
    figures. Labelled ``extrapolated`` with the depths and the depth ``options``; what describes one program only
    (XLA's refusal, padding, messages) is left empty, the rest (mesh, memory limit, sources) is the deeper compile's.
    """
    d1, d2 = depths
    t = (full - d1) / (d2 - d1)

    def line(a, b):
        return None if a is None or b is None else a + (b - a) * t

    memory = {}
    for key in MEMORY_FIELDS:
        value = line(getattr(low.memory, key), getattr(high.memory, key))
        memory[key] = None if value is None else max(int(round(value)), 0)
    flops, accessed = line(low.flops, high.flops), line(low.bytes_accessed, high.bytes_accessed)
    collectives = []
    by_key = lambda c: (c.op, tuple(c.mesh_axes), c.group_size, c.ici_axes)
    lows = {by_key(c): c for c in low.collectives}
    highs = {by_key(c): c for c in high.collectives}
    absent = roofline.Collective("", 0, 0, (), 0, 0)
    for key in sorted(set(lows) | set(highs)):
        a, b = lows.get(key, absent), highs.get(key, absent)
        c = roofline.Collective(
            key[0], max(int(round(line(a.count, b.count))), 0), max(int(round(line(a.bytes, b.bytes))), 0), key[1], key[2], key[3]
        )
        if c.bytes:
            collectives.append(c)
    estimate = roofline.estimate(flops, accessed, collectives, target.chip) if flops is not None and accessed is not None else None
    predicted = line(*(r.estimate.predicted_s if r.estimate else None for r in (low, high)))  # the step model's, per kernel
    hbm = memory_limit(target).bytes  # what XLA lets a TPU program use; on a GPU, JAX's share (as the compile's verdict)
    # the peak the verdict judges (on a TPU the dump's HBM total), extrapolated as the rest
    both = low.cross_check is not None and high.cross_check is not None
    cross_check = (
        CrossCheck(
            Memory(peak_bytes=max(int(round(line(low.judged_peak_bytes, high.judged_peak_bytes))), 0)),
            line(low.cross_check.matmul_flops, high.cross_check.matmul_flops),
        )
        if both
        else None
    )
    peak = judged_peak(Memory(**memory), cross_check)
    compiled = bool(low.compiled) and bool(high.compiled)
    fits = peak is not None and peak <= hbm and compiled
    return dataclasses.replace(
        high,
        target=target,
        compiled=compiled,
        compile_s=(low.compile_s or 0.0) + (high.compile_s or 0.0),
        memory=Memory(**memory),
        fits=fits,
        fits_device=fits,
        headroom_bytes=hbm - (peak or 0),
        oom=None,
        xla_messages=(),
        flops=flops,
        bytes_accessed=accessed,
        loop_work=LoopWork(line(low.loop_work.flops, high.loop_work.flops), line(low.loop_work.bytes, high.loop_work.bytes)),
        padding=None,
        collectives=tuple(CollectiveCost.of(c, target) for c in collectives),
        estimate=None if estimate is None else dataclasses.replace(estimate, predicted_s=predicted),
        cross_check=cross_check,
        extrapolated=Extrapolated(tuple(depths), full, tuple(options)),
        memory_breakdown=None,  # a breakdown is of one compiled program's buffers: an extrapolation has none
    )


def extrapolation_error(extrapolated: TargetCompile, full: TargetCompile) -> dict[str, float | None]:
    """Extrapolated over compiled, per figure (1.0: exact): peak, flops, bytes accessed, collective bytes, step (the
    bound) and the predicted step."""

    def ratio(a, b):
        return None if a is None or not b else a / b

    collective = lambda r: sum(c.bytes for c in r.collectives)
    step = lambda r: r.estimate.step_s if r.estimate else None
    predicted = lambda r: r.estimate.predicted_s if r.estimate else None
    return {
        "peak_bytes": ratio(extrapolated.memory.peak_bytes, full.memory.peak_bytes),
        "flops": ratio(extrapolated.flops, full.flops),
        "bytes_accessed": ratio(extrapolated.bytes_accessed, full.bytes_accessed),
        "collective_bytes": ratio(collective(extrapolated), collective(full)),
        "step_s": ratio(step(extrapolated), step(full)),
        "predicted_s": ratio(predicted(extrapolated), predicted(full)),
    }
