"""A target compile's result as frozen types: the documented JSON form and its inverse, for every optional part.

No compile here: the results are built from their parts (``tests.explorer.compile.compile_result``), as the child process
and the disk cache pass them along as JSON.
"""

from __future__ import annotations

import dataclasses
import json

from explorer.hardware.placement import AxisPlacement
from explorer.compile.compile_result import CollectiveCost, CrossCheck, Extrapolated, Memory, Oom, Padding, TargetCompile, TargetMesh
from explorer.hlo.program import LoopWork, ParameterLayout
from explorer.predict.roofline import Collective, Estimate
from explorer.hardware.targets import parse_target
from tests.explorer import DOCUMENTED_KEYS, compile_result

MEMORY = Memory(argument_bytes=100, output_bytes=90, alias_bytes=80, temp_bytes=70, peak_bytes=180, generated_code_bytes=60)


def through_json(result: TargetCompile) -> TargetCompile:
    """``result`` as the child process sends it and the disk cache keeps it: JSON text, read back."""
    return TargetCompile.from_json(json.loads(json.dumps(result.to_json())))


def full_tpu_result() -> TargetCompile:
    """A TPU result with every optional part filled: placement, padding, collectives, an estimate, the cross-check."""
    target = parse_target("v5litepod-8")
    reduce = Collective("all-reduce", 3, 4096, ("data",), 8, 2)
    return compile_result(
        mesh=TargetMesh((2, 4), ("data", "model"), (AxisPlacement("data", 2, ("y",)), AxisPlacement("model", 4, ("x",))), "mesh_utils"),
        memory=MEMORY,
        flops=1.5e9,
        bytes_accessed=2.5e8,
        loop_work=LoopWork(1e6, 2e5),
        padding=Padding(8, 1024, (ParameterLayout("s32[]{:T(128)}", 4, 512),) * 2),
        collectives=(CollectiveCost.of(reduce, target),),
        estimate=Estimate(0.001, 0.002, 0.0005),
        cross_check=CrossCheck(dataclasses.replace(MEMORY, generated_code_bytes=None), 1.2e9),  # as XLA's dump gives it
    )


def test_a_tpu_result_with_every_part_survives_its_json_and_keeps_the_documented_keys():
    result = full_tpu_result()
    data = result.to_json()
    assert list(data) == DOCUMENTED_KEYS + ["cross_check"]
    assert through_json(result) == result
    # The dump gives no generated-code size: the cross-check's JSON leaves the key out, and reads it back as None.
    assert "generated_code_bytes" not in data["cross_check"]["memory"]
    assert CrossCheck.from_json(CrossCheck(MEMORY, 1.0).to_json()).memory == dataclasses.replace(MEMORY, generated_code_bytes=None)
    assert data["collectives"][0]["mesh_axes"] == ["data"] and data["collectives"][0]["link"] == "ici"


def test_a_refused_program_keeps_xlas_figures_and_has_no_cross_check():
    """E1000: not compiled, the memory from XLA's dump (what it gave; None for the rest), the refusal's own figures."""
    result = compile_result(
        compiled=False,
        fits=False,
        fits_device=False,
        memory=Memory(peak_bytes=25 * 2**30),
        memory_source="e1000",
        headroom_bytes=-9 * 2**30,
        oom=Oom(25 * 2**30, 16911433728, "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom"),
        flops_source="hlo_matmuls",
    )
    data = result.to_json()
    assert "cross_check" not in data and data["oom"]["available_bytes"] == 16911433728
    assert data["memory"] == {**dict.fromkeys(Memory().to_json()), "peak_bytes": 25 * 2**30}
    assert result.memory.figures() == {"peak_bytes": 25 * 2**30}
    assert through_json(result) == result


def test_a_gpu_result_keeps_its_hosts_and_xlas_messages():
    """A GPU cluster's placement says hosts, GPUs per host and the link; its JSON has no cross-check."""
    placed = AxisPlacement("data", 8, ("host", "gpu"), 2, 4, "network", "data (8): 4 GPUs in each of 2 hosts, over the network")
    result = compile_result(
        "h100:2x4",
        mesh=TargetMesh((8,), ("data",), (placed,), "mesh_utils"),
        xla_messages=("Can't reduce memory use below 70.00GiB",),
        flops_source="hlo_matmuls",
        bytes_source="hlo_matmuls",
    )
    data = result.to_json()
    assert "cross_check" not in data and data["target"]["name"] == "h100:2x4"
    assert data["mesh"]["placement"][0] == {
        "axis": "data",
        "size": 8,
        "torus_axes": ["host", "gpu"],
        "hosts": 2,
        "gpus_per_host": 4,
        "link": "network",
        "text": "data (8): 4 GPUs in each of 2 hosts, over the network",
    }
    assert through_json(result) == result


def test_an_extrapolated_result_says_from_which_depths_and_the_command_lines_cached_key_is_passed_over():
    result = compile_result(extrapolated=Extrapolated((1, 2), 32, ("layers",)), donated=False)
    data = result.to_json()
    assert list(data)[-1] == "extrapolated" and data["extrapolated"] == {"depths": [1, 2], "depth": 32, "options": ["layers"]}
    assert TargetCompile.from_json(data | {"cached": True}) == result


def test_a_multislice_results_json_keeps_its_slices_and_dcn_marking():
    target = parse_target("2xv5e:2x2")
    across = Collective("all-reduce", 2, 1024, ("data",), 2, 0, 1, 2)
    result = compile_result(
        "2xv5e:2x2",
        mesh=TargetMesh(
            (2, 4), ("data", "model"), (AxisPlacement("data", 2, (), None, None, "dcn", "data (2): across", 2),), "hybrid_mesh"
        ),
        collectives=(CollectiveCost.of(across, target),),
    )
    data = json.loads(json.dumps(result.to_json()))
    assert data["target"]["slices"] == 2 and data["collectives"][0]["link"] == "dcn" and data["collectives"][0]["slices"] == 2
    assert data["mesh"]["placement"][0]["slices"] == 2 and data["mesh"]["placement"][0]["link"] == "dcn"
    back = TargetCompile.from_json(data)
    assert back == result and back.target.num_slices == 2 and back.dcn_bytes == 1024
