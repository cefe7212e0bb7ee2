"""Box-drawing grids against jax.debug.visualize_array_sharding (the ``op`` command that prints them: ``test_ops.py``)."""

import dataclasses
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from explorer.meshes import mesh_info
from explorer.layout import MeshSpec
from explorer.text import sharding_text

MESH = MeshSpec(shape=(4, 2), axes=("a", "b"))


def cells(text):
    """The grid's cell labels, row by row (JAX pads tall cells with blank lines)."""
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]
    return [row for row in rows if any(row)]


@pytest.mark.parametrize(
    "shape,spec",
    [
        ((8, 8), ("a", "b")),
        ((8, 8), ("b", "a")),
        ((8, 8), ("a", None)),
        ((8, 8), (None, "b")),
        ((8, 8), (None, "a")),
        ((8, 8), (("a", "b"), None)),
        ((8, 16), (None, ("b", "a"))),
        ((8,), (("a", "b"),)),
        ((8,), ("a",)),
        ((8,), ("b",)),
        ((8, 8), ()),
        ((8,), ()),
    ],
)
def test_grids_are_what_jax_draws(shape, spec, capsys):
    mesh = jax.make_mesh(MESH.shape, MESH.axes, axis_types=(jax.sharding.AxisType.Auto,) * 2)
    array = jax.device_put(jnp.zeros(shape), NamedSharding(mesh, PartitionSpec(*spec)))
    capsys.readouterr()
    jax.debug.visualize_array_sharding(array, use_color=False)
    expected = cells(capsys.readouterr().out)
    assert cells(sharding_text(shape, spec, mesh_info(MESH))) == expected


def test_higher_ranks_draw_the_most_cut_dimensions_slice_by_slice():
    text = sharding_text((4, 6, 8), ("b", None, "a"), mesh_info(MESH))
    assert text.splitlines()[0] == "rows: dim 0 (4, 2 block(s)) · columns: dim 2 (8, 4 block(s))"
    assert "slice dim 1 block 0 of 1 (0:6)" in text
    assert cells(text) == [["CPU 0", "CPU 2", "CPU 4", "CPU 6"], ["CPU 1", "CPU 3", "CPU 5", "CPU 7"]]
    cube = mesh_info(MeshSpec(shape=(2, 2, 2), axes=("a", "b", "c")))
    sliced = sharding_text((4, 6, 8), ("a", "b", "c"), cube)
    assert "slice dim 0 block 0 of 2 (0:2)" in sliced and "slice dim 0 block 1 of 2 (2:4)" in sliced
    assert cells(sliced) == [["CPU 0", "CPU 1"], ["CPU 2", "CPU 3"], ["CPU 4", "CPU 5"], ["CPU 6", "CPU 7"]]


def test_more_than_eight_replicas_are_abbreviated():
    planned = mesh_info(MeshSpec(shape=(4, 4, 512), axes=("a", "b", "c")))
    assert cells(sharding_text((8, 8), ("a",), planned, "dev")) == [
        [f"dev {4 * 512 * i},{4 * 512 * i + 1}…{4 * 512 * (i + 1) - 1} (2048)"] for i in range(4)
    ]


def test_the_compile_summary_shows_the_prediction_under_the_bound_with_its_scope():
    from explorer.predict.roofline import Estimate
    from explorer.predict.step_model import SCOPE
    from explorer.target_text import compile_text
    from tests.explorer import compile_result

    lines = compile_text(compile_result("h200:1x1", estimate=Estimate(1e-3, 2e-3, 0.0, 5e-3))).splitlines()
    assert lines[-3].startswith("roofline lower bound (not a measurement)") and "step >= 2.00 ms" in lines[-3]
    assert lines[-2] == f"predicted step: 5.00 ms (the step model, kernel by kernel; {SCOPE})"
    assert lines[-1] == "compiled: under no LIBTPU_INIT_ARGS or XLA_FLAGS"  # the flags next to the prediction
    assert "predicted" not in compile_text(compile_result("h200:1x1", estimate=Estimate(1e-3, 2e-3, 0.0)))


def test_the_compile_text_names_the_target_once_and_rounds_no_figure_to_zero():
    """Issue 38: `target h100:1x8 (h100:1x8, …)`, `0.0000 TFLOP`, `compute 0.000 ms`, and a cached compile's time read
    as this run's."""
    from explorer.predict.roofline import Estimate
    from explorer.target_text import compile_text
    from tests.explorer import compile_result

    result = compile_result("h100:1x8", compile_s=2.83, flops=3.2e7, bytes_accessed=2e6, estimate=Estimate(4.1e-8, 1e-6, 0.0))
    fresh, cached = compile_text(result).splitlines(), compile_text(result, cached=True).splitlines()
    assert fresh[0].startswith("target h100:1x8 (8 x ") and fresh[0].count("h100:1x8") == 1
    assert fresh[1] == "compile 2.83 s; train state donated"
    assert cached[1] == "read from the disk cache (the compile that wrote it took 2.83 s); train state donated"
    dated = dataclasses.replace(result, compiled_at="2026-11-27T18:02:11+00:00")
    assert (
        compile_text(dated, cached=True)
        .splitlines()[1]
        .startswith("read from the disk cache (the compile that wrote it on 2026-11-27 18:02:11 UTC took 2.83 s)")
    )
    assert "per device per step: 32.0 MFLOP, " in fresh[4]
    roofline = fresh[-2]
    assert "compute 41.0 ns, memory 1.00 µs, collectives 0 s -> step >= 1.00 µs" in roofline, roofline
    tpu = compile_text(compile_result("v5litepod-8")).splitlines()[0]
    assert tpu.startswith("target v5litepod-8 (v5e:2x4, 8 x ")  # a slice's name and its topology differ: both said


def test_short_paths_keep_every_array_of_the_built_in_mlp_apart():
    """The Layout and Compare tables show paths shortened to fit 1024 px: each still names one array."""
    from explorer.analysis.analyzer import analyze
    from explorer.layout import seed_layout
    from explorer.formats import short_path

    paths = [a.path for a in analyze(seed_layout()).arrays]
    shown = [short_path(p) for p in paths]
    assert len(set(shown)) == len(paths) and all(len(s) <= 40 for s in shown)
    assert all(s.rsplit("/", 1)[-1] == p.rsplit("/", 1)[-1] for s, p in zip(shown, paths))  # the leaf whole


def test_prediction_gap_says_why_the_prediction_is_far_above_the_bound_or_equal_to_it():
    """Issue 45: h100:3x8 predicted 49.1 us beside a 1.75 us bound, and a v5e layout's prediction equalled its bound, and
    neither said why. A loop of 24 runs of a 4 MiB f32 kernel and 25 of a 5-byte one on an H200 (``LOOP``): each kernel
    its bytes at 4.217 TB/s plus a 1 us launch, then 30 us of host dispatch."""
    from explorer.predict import step_model
    from explorer.predict.roofline import Estimate
    from explorer.target_text import prediction_gap
    from tests.explorer.predict.test_step_model import H200, LOOP

    kernels = 24 * (2 * 1024 * 1024 * 4 / 4.217e12 + 1e-6) + 25 * (5 / 4.217e12 + 1e-6)
    assert f"{kernels * 1e6:.1f}" == "96.7"
    above = step_model.with_prediction(Estimate(1e-9, 2e-6, 0.0), LOOP, H200)
    assert prediction_gap(above) == (
        "why the prediction is above the bound (2.00 µs): it adds host dispatch 30.0 µs + other kernels 96.7 µs, one after "
        "another, 49 kernel launches (49.0 µs) among them; the bound has only flops, bytes and collective bandwidth, at peak "
        "and overlapped"
    )
    floored = step_model.with_prediction(Estimate(1.0, 2.0, 0.0), LOOP, H200)
    assert floored.predicted_s == floored.step_s == 2.0
    assert prediction_gap(floored) == (
        "why the prediction is the bound: the program's kernels add up to 127 µs (host dispatch included), under the bound's "
        "2.00 s (XLA's cost_analysis() counts more bytes than the kernels the program shows move in HBM); a prediction is "
        "never below the bound"
    )
    assert prediction_gap(Estimate(1e-9, 2e-6, 0.0, predicted_s=1e-4)) == ""  # parts unknown (a cached result of before, an extrapolation)


def test_a_tpu_compiles_text_judges_the_peak_in_hbm_and_says_memory_analysis_peak_beside_it():
    """MaxText's Llama 3.1 8B on v6e-8 (recorded): it offloads activations to host memory, so memory_analysis()'s peak
    (32.2 GiB) is over the 31.24 GiB XLA lets a program use while its HBM total (22.6 GiB) is under it; it ran."""
    import json
    import pathlib

    from explorer.compile.compile_result import TargetCompile
    from explorer.target_text import compile_text, judged_peak_note

    path = pathlib.Path(__file__).parents[1] / "data" / "maxtext_published" / "v6e-llama3_1-8b-8chips.result.json"
    result = TargetCompile.from_json(json.loads(path.read_text()))
    text = compile_text(result)
    assert "XLA's peak in HBM 22.6 GiB fits in the 31.2 GiB XLA lets a program use of the 32.0 GiB HBM per chip" in text
    assert judged_peak_note(result) in text and "memory_analysis()'s peak (32.2 GiB)" in judged_peak_note(result)
    # issue 55 item 5: each peak has one name where it stands: memory_analysis()'s in its line, XLA's in HBM in the verdict
    assert "memory per device (XLA's memory_analysis()): " in text and ", peak 32.2 GiB," in text
    from explorer.compile.xla_results import with_verdict

    same = with_verdict(dataclasses.replace(result, cross_check=None), result.target)  # no dump read: memory_analysis()'s
    assert judged_peak_note(same) is None and "XLA's peak 32.2 GiB does NOT fit" in compile_text(same)


def test_the_compile_text_names_the_program_its_flags_and_a_flag_left_out():
    """Issue 52: which program was compiled and under which flags, beside the prediction; a flag libtpu refused, one line."""
    from explorer.target_text import compile_text
    from tests.explorer import compile_result

    result = compile_result(
        "v6e-8",
        program="MaxText's own train step",
        flags=(("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=98304"),),
        refused_flags=("LIBTPU_INIT_ARGS: '--2a886c8_chip_config_name=megachip_tccontrol' is a flag libtpu 0.0.50.1 refuses: left out",),
    )
    line = compile_text(result).splitlines()[-1]
    assert line == (
        "compiled: MaxText's own train step, under LIBTPU_INIT_ARGS='--xla_tpu_scoped_vmem_limit_kib=98304'; "
        "LIBTPU_INIT_ARGS: '--2a886c8_chip_config_name=megachip_tccontrol' is a flag libtpu 0.0.50.1 refuses: left out"
    )


def test_the_command_lines_compile_text_has_no_exponent_notation():
    """Issue 55: numbers in units a person reads, never "1.05e+03": every recorded compile of a published MaxText run
    (one slice and several, the DCN's figures included) said as `explorer compile` says it."""
    import json
    import pathlib
    import re

    from explorer.compile.compile_result import TargetCompile
    from explorer.target_text import compile_text

    folder = pathlib.Path(__file__).parents[1] / "data" / "maxtext_published"
    texts = [compile_text(TargetCompile.from_json(json.loads(path.read_text()))) for path in sorted(folder.glob("*.result.json"))]
    assert len(texts) >= 10 and any("slices of" in text for text in texts)  # a multi-slice run's DCN lines among them
    exponents = [found.group(0) for text in texts for found in re.finditer(r"(?<![\w.-])\d+(\.\d+)?[eE][+-]?\d+\b", text)]
    assert not exponents, exponents


def test_the_analysis_table_fits_a_terminal_on_a_mesh_with_axes_of_size_one(seed_dict):
    """Issue 55: `analyze --maxtext` wrote the 12-axis mesh as a 3-line dict, 80 rules as a 60-line list and each spec
    with every axis of size 1 (~170 characters, four lines a row). The mesh by the axes that shard, the rules on one
    line, the specs without the axes of size 1 (they shard nothing; --json has them whole)."""
    from explorer.analysis.analyzer import analyze
    from explorer.layout import parse_layout
    from explorer.formats import fit
    from explorer.text import report_table

    seed_dict["mesh"] = {"shape": [1, 2, 1, 4], "axes": ["stage", "data", "expert", "model"]}
    seed_dict["rules"] = [["batch", ["data", "stage"]], ["hidden", ["model", "expert"]]] + [[f"name_{i}", "expert"] for i in range(30)]
    report = analyze(parse_layout(seed_dict))
    text = fit(report_table(report))  # as `explorer analyze` prints it
    lines = text.splitlines()
    assert lines[0] == "layout 'seed-2x4': mesh data=2 x model=4 (and 2 axes of size 1: stage, expert), 8 devices, real devices"
    assert (
        lines[1].startswith("32 rules: [batch: data+stage, hidden: model+expert, name_0: expert")
        and "(--json lists every rule)" in lines[1]
    )
    kernel = next(i for i, line in enumerate(lines) if line.startswith("params/LogicalDotReluDot_0/Dense_0/kernel"))
    assert "P(None, 'model')" in lines[kernel + 1] and "expert" not in lines[kernel + 1]
    assert report.array("params/LogicalDotReluDot_0/Dense_0/kernel").spec_text() == "P(None, ('model', 'expert'))"  # --json: whole
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    assert sum("[rule-unused]" in line for line in lines) == 1
