"""Memory figures: bytes per device by kind, layouts side by side, XLA's figures against the device's memory, each in the unit of its data."""

import pytest

from explorer.compile.compile_result import Memory
from explorer.plots.memory import compare_memory, memory_bars, target_memory_figure
from tests.explorer.plots import planned_256x256


def test_memory_bars_of_a_huge_mesh_are_one_bar_per_kind():
    report = planned_256x256()
    figure = memory_bars(report.mesh.ids_array().reshape(-1).tolist(), report.totals)
    assert all(len(bar.x) == 1 for bar in figure.data)


def test_memory_axes_use_a_unit_that_fits_the_numbers():
    """Issue 18 item 9: 150,000 MiB is drawn as about 146 GiB, not as ticks "50k 100k 150k" of MiB."""
    from explorer.analysis.report import Totals

    big = Totals(
        param_bytes=50_000 * 2**20, opt_state_bytes=100_000 * 2**20, input_bytes=0, activation_bytes=0, global_param_bytes=0, param_count=0
    )
    figure = memory_bars([0, 1], big)
    assert figure.layout.yaxis.title.text == "GiB per device"
    assert max(max(bar.y) for bar in figure.data) < 1024
    assert compare_memory(["a"], [big]).layout.yaxis.title.text == "GiB per device"


def test_xlas_memory_figures_are_drawn_as_they_are_not_stacked_past_the_peak():
    """Issue 18 item 4: temporaries larger than the peak (Llama-2-7B on v5litepod-256) are two bars, not a stack."""
    memory = Memory(
        argument_bytes=2 * 2**30,
        output_bytes=2 * 2**30,
        alias_bytes=2 * 2**30,
        temp_bytes=int(11.9 * 2**30),
        peak_bytes=int(11.8 * 2**30),
        generated_code_bytes=0,
    )
    figure = target_memory_figure(memory, 16 * 2**30)
    assert figure.layout.barmode != "stack" and len(figure.data) == 1
    bars = dict(zip(figure.data[0].y, figure.data[0].x))
    assert bars["peak"] == pytest.approx(11.8) and bars["temporaries"] == pytest.approx(11.9)
    assert figure.layout.xaxis.title.text == "GiB per chip"


def test_on_a_gpu_the_memory_figure_draws_the_share_the_verdict_uses_beside_the_whole_memory():
    """A GPU's verdict compares the peak with JAX's 75% of its memory: the chart draws that line too, per GPU."""
    memory = Memory(argument_bytes=2**30, output_bytes=2**30, alias_bytes=2**30, temp_bytes=3 * 2**30, peak_bytes=4 * 2**30)
    figure = target_memory_figure(memory, 80 * 2**30, "GPU", (60 * 2**30, "JAX's 75%: 60.0 GiB"))
    assert sorted(shape.x0 for shape in figure.layout.shapes) == [60, 80]
    assert [a.text for a in figure.layout.annotations] == ["HBM 80.0 GiB", "JAX's 75%: 60.0 GiB"]
    assert figure.layout.xaxis.title.text == "GiB per GPU"


def test_on_a_tpu_the_peak_the_verdict_judges_in_hbm_is_drawn_beside_memory_analysis_peak_with_xlas_limit():
    """MaxText's Llama 3.1 8B on v6e-8 offloads activations: memory_analysis()'s peak (32.2 GiB) is over the 31.24 GiB
    XLA lets a program use, its HBM total (28.1 GiB) under it. Both bars, and the line the verdict judges against."""
    memory = Memory(
        argument_bytes=11 * 2**30, output_bytes=11 * 2**30, alias_bytes=11 * 2**30, temp_bytes=21 * 2**30, peak_bytes=int(32.2 * 2**30)
    )
    figure = target_memory_figure(memory, 32 * 2**30, "chip", (int(31.24 * 2**30), "XLA lets a program use 31.2 GiB"), int(28.1 * 2**30))
    bars = dict(zip(figure.data[0].y, figure.data[0].x))
    assert list(bars)[:2] == ["peak in HBM", "memory_analysis() peak"]  # issue 55: two peaks, each named
    assert bars["peak in HBM"] == pytest.approx(28.1) and bars["memory_analysis() peak"] == pytest.approx(32.2)
    assert sorted(round(shape.x0, 2) for shape in figure.layout.shapes) == [31.24, 32]
    same = target_memory_figure(memory, 32 * 2**30, judged_peak=memory.peak_bytes)  # the same figure: one bar
    assert "peak in HBM" not in same.data[0].y and "peak" in same.data[0].y


def test_a_small_program_is_drawn_in_its_own_unit_with_the_far_memory_lines_said_in_the_title():
    """Issue 38: MiB-sized bars on a GiB axis (to reach a GPU's 79.1 GiB line) were invisible."""
    memory = Memory(argument_bytes=24 * 2**20, output_bytes=24 * 2**20, alias_bytes=24 * 2**20, temp_bytes=2**20, peak_bytes=49 * 2**20)
    figure = target_memory_figure(memory, int(79.1 * 2**30), "GPU", (int(59.3 * 2**30), "JAX's 75%: 59.3 GiB"))
    assert figure.layout.xaxis.title.text == "MiB per GPU"
    assert dict(zip(figure.data[0].y, figure.data[0].x))["peak"] == pytest.approx(49)
    assert not figure.layout.shapes  # neither line squeezes the bars
    assert figure.layout.title.text == "Off the scale: HBM 79.1 GiB; JAX's 75%: 59.3 GiB: the largest bar is 0.06% of it"


def test_compare_memory_keeps_each_label_inside_its_bar_or_leaves_it_to_the_hover():
    """Labels of small bars printed outside them ran together ("16.0 KiB80.0 KiB") at 1024 px."""
    from explorer.analysis.report import Totals

    totals = [Totals(8 << 20, 16 << 20, 16 << 10, 80 << 10, 64 << 20, 1 << 21)] * 2
    figure = compare_memory(["a", "b"], totals)
    assert all(bar.textposition == "inside" for bar in figure.data)
    assert figure.layout.uniformtext.mode == "hide"
    assert "16.0 KiB" in figure.data[2].text  # the value is still there, for the hover
