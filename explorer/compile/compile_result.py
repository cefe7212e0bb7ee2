"""What a compile for a target gives, as frozen types: XLA's memory and the verdict, flops, collectives, the roofline.

``xla_results`` builds one ``TargetCompile`` per compile and never changes it (a cached result is
judged again with ``dataclasses.replace``). Its ``to_json()`` is the documented JSON form: what
``python -m explorer compile --json`` prints (with ``cached``), what the compile's child process sends
its parent and what the disk cache keeps; ``TargetCompile.from_json`` reads it back.

    >>> mesh = TargetMesh((8,), ("data",), (AxisPlacement("data", 8, ("x", "y")),), "mesh_utils")
    >>> mesh.to_json()["placement"]
    [{'axis': 'data', 'size': 8, 'torus_axes': ['x', 'y']}]
    >>> TargetMesh.from_json(mesh.to_json()) == mesh
    True

This module imports no JAX: the pages, the text and the advisor read results without the compile's machinery.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from explorer.compile.memory_breakdown import MemoryBreakdown
from explorer.hlo.program import LoopWork, ParameterLayout
from explorer.predict.roofline import Collective, Estimate, collective_seconds, link
from explorer.predict.step_model import Bubble
from explorer.hlo.sources import Source, Traced
from explorer.formats import human_bytes
from explorer.hardware.placement import AxisPlacement
from explorer.hardware.targets import Target, parse_target

MEMORY_FIELDS = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "peak_bytes", "generated_code_bytes")


@dataclasses.dataclass(frozen=True)
class Memory:
    """XLA's memory per device, as ``memory_analysis()`` names it; None: a figure XLA did not give (a refused program)."""

    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    peak_bytes: int | None = None
    generated_code_bytes: int | None = None

    def figures(self) -> dict[str, int]:
        """The figures XLA gave, by their JSON names, in ``MEMORY_FIELDS``' order."""
        return {k: v for k, v in self.to_json().items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in MEMORY_FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Memory:
        return cls(**{k: data.get(k) for k in MEMORY_FIELDS})


class _Flat:
    """A dataclass of plain fields: its JSON is its fields by name."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class MemoryLimit(_Flat):
    """The figure the verdict compares XLA's peak with (``bytes``), the device's whole memory, and what it is, in words."""

    bytes: int
    device_bytes: int
    fraction: float
    what: str


@dataclasses.dataclass(frozen=True)
class Oom(_Flat):
    """XLA's refusal of a program for HBM (E1000): its figures, in bytes as XLA rounds them, and its first line."""

    required_bytes: int
    available_bytes: int
    message: str


@dataclasses.dataclass(frozen=True)
class TargetMesh:
    """The layout's mesh laid over the target's devices, and how (``placement.PLACEMENTS``)."""

    shape: tuple[int, ...]
    axes: tuple[str, ...]
    placement: tuple[AxisPlacement, ...]
    placement_method: str

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "axes": list(self.axes),
            "placement": [p.to_json() for p in self.placement],
            "placement_method": self.placement_method,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TargetMesh:
        return cls(
            tuple(data["shape"]), tuple(data["axes"]), tuple(map(AxisPlacement.from_json, data["placement"])), data["placement_method"]
        )


@dataclasses.dataclass(frozen=True)
class CollectiveCost:
    """A collective of the program per device per step (``roofline.Collective``), with what it rides, its roofline
    time and the lines of the user's code it comes from (``sources.Source``, the most bytes first)."""

    op: str
    count: int
    bytes: int
    mesh_axes: tuple[str, ...]
    group_size: int
    ici_axes: int
    hosts: int
    link: str
    seconds: float
    slices: int = 1  # several TPU slices: the slices one group spans (link "dcn" when more than one)
    sources: tuple[Source, ...] = ()

    @classmethod
    def of(cls, c: Collective, target: Target, sources: tuple[Source, ...] = ()) -> CollectiveCost:
        """``c`` costed on ``target``'s chip (``roofline.collective_seconds``)."""
        return cls(
            c.op,
            c.count,
            c.bytes,
            tuple(c.mesh_axes),
            c.group_size,
            c.ici_axes,
            c.hosts,
            link(c, target.chip),
            collective_seconds(c, target.chip),
            c.slices,
            sources,
        )

    @property
    def collective(self) -> Collective:
        return Collective(self.op, self.count, self.bytes, self.mesh_axes, self.group_size, self.ici_axes, self.hosts, self.slices)

    def to_json(self) -> dict[str, Any]:
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return plain | {"mesh_axes": list(self.mesh_axes), "sources": [s.to_json() for s in self.sources]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CollectiveCost:
        sources = tuple(Source.from_json(s) for s in data.get("sources", ()))
        return cls(**(data | {"mesh_axes": tuple(data["mesh_axes"]), "sources": sources}))


@dataclasses.dataclass(frozen=True)
class Padding:
    """How the arguments' tiled layout pads them: the totals, and every parameter that grows."""

    bytes: int
    padded_bytes: int
    padded: tuple[ParameterLayout, ...]

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "padded_bytes": self.padded_bytes, "padded": [dataclasses.asdict(p) for p in self.padded]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Padding | None:
        return None if data is None else cls(data["bytes"], data["padded_bytes"], tuple(ParameterLayout(**p) for p in data["padded"]))


@dataclasses.dataclass(frozen=True)
class CrossCheck:
    """For a TPU program that fits, what the route for one that does not would have read from XLA's dump.

    The dump gives no generated-code size, so its memory has none (and its JSON no such key).
    """

    memory: Memory
    matmul_flops: float

    def to_json(self) -> dict[str, Any]:
        memory = {k: v for k, v in self.memory.to_json().items() if k != "generated_code_bytes"}
        return {"memory": memory, "matmul_flops": self.matmul_flops}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> CrossCheck | None:
        return None if data is None else cls(Memory.from_json(data["memory"]), data["matmul_flops"])


@dataclasses.dataclass(frozen=True)
class Extrapolated:
    """A result extrapolated in depth (the advisor's depth shortcut): from the compiles at ``depths``, to ``depth``."""

    depths: tuple[int, ...]
    depth: int
    options: tuple[str, ...] = ()  # the model options that set the depth

    def to_json(self) -> dict[str, Any]:
        return {"depths": list(self.depths), "depth": self.depth, "options": list(self.options)}


@dataclasses.dataclass(frozen=True)
class TargetCompile:
    """One compile of a layout's train step for a target, judged for this environment (docs/targets.md).

    ``compiled`` is False when XLA refused the program for HBM (E1000, its figures under ``oom``):
    the memory, flops and collectives are then read from XLA's dump (``memory_source``,
    ``flops_source``). ``fits`` compares the peak with ``memory_limit``, ``fits_device`` with the
    device's whole memory. ``loop_work`` is what loop iterations after the first add to
    ``cost_analysis()``'s flops and bytes; ``xla_messages`` what XLA's GPU compiler logged about
    memory; ``cross_check`` is kept for TPU programs XLA accepted (None when the dump could not be read).
    """

    target: Target
    mesh: TargetMesh
    compile_s: float
    compiled: bool
    memory: Memory
    memory_source: str
    memory_limit: MemoryLimit
    fits: bool
    fits_device: bool
    headroom_bytes: int
    oom: Oom | None
    xla_messages: tuple[str, ...]
    flops: float | None
    bytes_accessed: float | None
    flops_source: str | None
    bytes_source: str | None
    loop_work: LoopWork
    padding: Padding | None
    collectives: tuple[CollectiveCost, ...]
    estimate: Estimate | None
    donated: bool = True
    cross_check: CrossCheck | None = None
    extrapolated: Extrapolated | None = None
    compiled_at: str = ""  # when XLA compiled it (UTC, ISO 8601 to the second): a result read from the cache says so
    bubble: Bubble | None = None  # a pipelined layout's bubble in the predicted step (``step_model.pipeline_bubble``)
    # The flags the compile ran under, by variable (``devices.compile_flags``: LIBTPU_INIT_ARGS, XLA_FLAGS), and which
    # program was compiled, in words (the explorer's train step, MaxText's own, a user's jitted function)
    flags: tuple[tuple[str, str], ...] = ()
    program: str = ""
    refused_flags: tuple[str, ...] = ()  # a flag asked for that libtpu or XLA refused, left out: one line each
    memory_breakdown: MemoryBreakdown | None = None  # the buffers live at the peak and what each is (None: dump not read)

    @property
    def judged_peak_bytes(self) -> int | None:
        """The peak the verdict judges (``judged_peak``)."""
        return judged_peak(self.memory, self.cross_check)

    @property
    def dcn_collectives(self) -> tuple[CollectiveCost, ...]:
        """The collectives that cross the data-center network between slices (several TPU slices only)."""
        return tuple(c for c in self.collectives if c.link == "dcn")

    @property
    def dcn_bytes(self) -> int:
        """Bytes per device per step of the collectives that cross the DCN (their results, as the roofline counts them)."""
        return sum(c.bytes for c in self.dcn_collectives)

    def pipeline_sends(self, stage_axes: tuple[str, ...]) -> tuple[CollectiveCost, ...]:
        """A pipelined model's sends between stages: the collective-permutes whose groups differ only along the stage's
        mesh axes ``stage_axes`` (``stage_plan.stage_mesh_axes``), each with its count (the loop's trip count
        included), bytes, link and source lines. None without ``stage_axes``."""
        return tuple(
            c
            for c in self.collectives
            if c.op == "collective-permute" and stage_axes and c.mesh_axes and set(c.mesh_axes) <= set(stage_axes)
        )

    def to_json(self) -> dict[str, Any]:
        """The documented JSON form (the keys in this order; ``cross_check`` only for a TPU program XLA accepted)."""
        data = {
            "target": self.target.to_dict(),
            "mesh": self.mesh.to_json(),
            "compile_s": self.compile_s,
            "compiled": self.compiled,
            "memory": self.memory.to_json(),
            "memory_source": self.memory_source,
            "memory_limit": self.memory_limit.to_json(),
            "judged_peak_bytes": self.judged_peak_bytes,
            "fits": self.fits,
            "fits_device": self.fits_device,
            "headroom_bytes": self.headroom_bytes,
            "oom": None if self.oom is None else self.oom.to_json(),
            "xla_messages": list(self.xla_messages),
            "flops": self.flops,
            "bytes_accessed": self.bytes_accessed,
            "flops_source": self.flops_source,
            "bytes_source": self.bytes_source,
            "loop_work": dataclasses.asdict(self.loop_work),
            "padding": None if self.padding is None else self.padding.to_json(),
            "collectives": [c.to_json() for c in self.collectives],
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "donated": self.donated,
            "compiled_at": self.compiled_at,
            "flags": dict(self.flags),
            "program": self.program,
            "refused_flags": list(self.refused_flags),
            "memory_breakdown": None if self.memory_breakdown is None else self.memory_breakdown.to_json(),
        }
        if self.compiled and not self.target.is_gpu:
            data["cross_check"] = None if self.cross_check is None else self.cross_check.to_json()
        if self.extrapolated is not None:
            data["extrapolated"] = self.extrapolated.to_json()
        if self.bubble is not None:
            data["bubble"] = self.bubble.to_dict()
        return data

    @property
    def flags_text(self) -> str:
        """The flags it was compiled under, as a shell sets them (``LIBTPU_INIT_ARGS='--a=1' XLA_FLAGS='...'``), or
        "no LIBTPU_INIT_ARGS or XLA_FLAGS" (what the CLI, the app and Compare show beside the prediction)."""
        return " ".join(f"{name}='{value}'" for name, value in self.flags) or "no LIBTPU_INIT_ARGS or XLA_FLAGS"

    @property
    def compiled_when(self) -> str:
        """When XLA compiled it, as a person reads it (``2026-11-27 18:02:11 UTC``); "" when not recorded."""
        return self.compiled_at.replace("T", " ").replace("+00:00", " UTC")

    def traced(self) -> tuple[Traced, ...]:
        """The collectives with their source lines and roofline times (``sources.by_line`` reads them)."""
        return tuple(Traced(c.op, c.mesh_axes, c.count, c.bytes, c.sources, c.seconds) for c in self.collectives)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TargetCompile:
        """``to_json``'s inverse (keys it does not write, such as the command line's ``cached``, are passed over)."""
        estimate = data["estimate"]
        extrapolated = data.get("extrapolated")
        return cls(
            target=parse_target(data["target"]["name"]),
            mesh=TargetMesh.from_json(data["mesh"]),
            compile_s=data["compile_s"],
            compiled=data["compiled"],
            memory=Memory.from_json(data["memory"]),
            memory_source=data["memory_source"],
            memory_limit=MemoryLimit.from_json(data["memory_limit"]),
            fits=data["fits"],
            fits_device=data["fits_device"],
            headroom_bytes=data["headroom_bytes"],
            oom=None if data["oom"] is None else Oom.from_json(data["oom"]),
            xla_messages=tuple(data["xla_messages"]),
            flops=data["flops"],
            bytes_accessed=data["bytes_accessed"],
            flops_source=data["flops_source"],
            bytes_source=data["bytes_source"],
            loop_work=LoopWork(**data["loop_work"]),
            padding=Padding.from_json(data["padding"]),
            collectives=tuple(map(CollectiveCost.from_json, data["collectives"])),
            estimate=None
            if estimate is None
            else Estimate(
                estimate["compute_s"],
                estimate["memory_s"],
                estimate["collective_s"],
                estimate.get("predicted_s"),
                estimate.get("prediction_parts"),
            ),
            donated=data["donated"],
            compiled_at=data.get("compiled_at", ""),
            cross_check=CrossCheck.from_json(data.get("cross_check")),
            extrapolated=None
            if extrapolated is None
            else Extrapolated(tuple(extrapolated["depths"]), extrapolated["depth"], tuple(extrapolated.get("options", ()))),
            bubble=Bubble(**data["bubble"]) if data.get("bubble") else None,
            flags=tuple(data.get("flags", {}).items()),
            program=data.get("program", ""),
            refused_flags=tuple(data.get("refused_flags", ())),
            memory_breakdown=MemoryBreakdown.from_json(data.get("memory_breakdown")),
        )


def judged_peak(memory: Memory, cross_check: CrossCheck | None) -> int | None:
    """The peak a device's verdict judges: for a TPU program, the HBM total of XLA's memory-usage report (``cross_check``,
    read from its dump), which is what its compiler holds against the HBM it lets a program use and what a refused
    program's peak is; elsewhere (a GPU, a dump not read) ``memory_analysis()``'s peak.

    On a TPU ``memory_analysis()``'s peak also counts buffers outside HBM: MaxText's Llama 3.1 8B on v6e-8, which
    offloads activations to host memory, has a ``memory_analysis()`` peak of 32.2 GiB and 28.1 GiB in HBM, and ran.

    >>> judged_peak(Memory(peak_bytes=34), CrossCheck(Memory(peak_bytes=30), 0.0)), judged_peak(Memory(peak_bytes=34), None)
    (30, 34)
    """
    if cross_check is not None and cross_check.memory.peak_bytes is not None:
        return cross_check.memory.peak_bytes
    return memory.peak_bytes


def memory_room(target: Target, limit: MemoryLimit) -> str:
    """What a device's peak is judged against, in words (the compile's verdict, the CLI, the advisor): "the 15.8 GiB
    XLA lets a program use of the 16.0 GiB HBM per chip", or on a GPU "the 59.3 GiB JAX lets one process use per GPU (75% of its 79.1 GiB)"."""
    if not target.is_gpu:
        per = "chip" if target.chip.devices_per_chip == 1 else "device"
        return f"the {human_bytes(limit.bytes)} XLA lets a program use of the {human_bytes(limit.device_bytes)} HBM per {per}"
    return (
        f"the {human_bytes(limit.bytes)} JAX lets one process use per GPU ({limit.fraction:.0%} of its {human_bytes(limit.device_bytes)})"
    )
