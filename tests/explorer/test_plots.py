"""Figures from plain data: the device grid shows exactly the tiles, with one colour per device."""

import pytest

from explorer import plots
from explorer.analysis import analyze
from explorer.compile_result import Memory
from explorer.layout import parse_layout
from explorer.tiles import grid_view

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"


def kernel_view(seed_dict):
    report = analyze(parse_layout(seed_dict))
    info = report.array(KERNEL)
    return report, grid_view(info.shape, info.spec, report.mesh, 0, 1)


def test_grid_draws_each_replica_as_a_stripe_of_its_device(seed_dict):
    report, view = kernel_view(seed_dict)
    figure = plots.sharding_grid(view, report.mesh, 4, ["rows", "cols"])
    heatmap = figure.data[0]
    assert [list(row) for row in heatmap.z] == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert [a.text for a in figure.layout.annotations] == ["0,4", "1,5", "2,6", "3,7"]
    hover = heatmap.text[0][0]
    assert "index [0:1024 × 0:256]" in hover and "shard shape (1024, 256) · 1.0 MiB" in hover
    assert "device 0</b> (data=0, model=0)" in hover and "held by 2 device(s): 0,4" in hover


def test_device_colours_are_the_same_in_every_figure(seed_dict):
    report, view = kernel_view(seed_dict)
    grid = plots.sharding_grid(view, report.mesh, 4, ["rows", "cols"]).data[0]
    mesh = plots.mesh_figure(report.mesh).data[0]

    def colour(trace, device):
        """The discrete colorscale holds two stops per z value, in z order."""
        return trace.colorscale[2 * device][1]

    for device in range(8):
        assert colour(grid, device) == colour(mesh, device) == plots.device_color(device, 8)


def test_mesh_highlight_fades_the_other_devices(seed_dict):
    report, _ = kernel_view(seed_dict)
    z = plots.mesh_figure(report.mesh, highlight={0, 4}).data[0].z
    faded = report.mesh.size
    assert [list(row) for row in z] == [[0, faded, faded, faded], [4, faded, faded, faded]]


def test_many_replicas_draw_one_grey_block_with_a_count():
    layout = parse_layout({"mesh": {"shape": [32], "axes": ["data"]}, "rules": [], "model": {"name": "mlp"}})
    report = analyze(layout)
    info = report.array(KERNEL)
    view = grid_view(info.shape, info.spec, report.mesh, 0, 1)
    figure = plots.sharding_grid(view, report.mesh, 4, ["rows", "cols"])
    assert [list(row) for row in figure.data[0].z] == [[report.mesh.size]]
    assert figure.layout.annotations[0].text == "0,1,2…31 (32)"


@pytest.mark.parametrize(("count", "step"), [(1, 1), (3, 1), (10, 1), (11, 2), (30, 5), (1000, 100)])
def test_step_and_round_axes_tick_whole_numbers(count, step):
    figure = plots.step_times_figure([0.01] * count)
    assert (figure.layout.xaxis.tickmode, figure.layout.xaxis.tick0, figure.layout.xaxis.dtick) == ("linear", 0, step)
    race = plots.race_figure(["a", "b"], [[0.01] * count, [0.02] * count])
    assert race.layout.xaxis.dtick == step


# --- huge planned meshes: bounded shapes and bytes, cached by meaning -------------------------------


def planned_256x256():
    return analyze(
        parse_layout(
            {
                "name": "huge",
                "mesh": {"shape": [256, 256], "axes": ["data", "model"]},
                "rules": [["batch", "data"], ["hidden", "model"]],
                "model": {"name": "mlp", "options": {"batch": 256, "layers": 1, "depth": 1024}},
            }
        )
    )


def test_the_256x256_mesh_figure_is_one_heatmap_with_ids_on_hover():
    report = planned_256x256()
    figure = plots.mesh_figure(report.mesh, highlight={0, 65535})
    assert len(figure.data) == 1 and not figure.layout.shapes and not figure.layout.annotations
    heatmap = figure.data[0]
    assert heatmap.text is None and "%{customdata}" in heatmap.hovertemplate
    assert (heatmap.customdata == report.mesh.ids_array()).all()
    assert len(figure.to_json()) < 2_000_000
    z = heatmap.z
    assert z[0][0] == plots._color_bin(0) and z[255][255] == plots._color_bin(65535) and z[0][1] == plots.COLOR_BINS


def test_a_65536_block_grid_is_bounded_and_a_256_block_grid_keeps_labels():
    report = planned_256x256()
    every_device = grid_view((1024, 1024), ("data", "model"), report.mesh, 0, 1)
    figure = plots.sharding_grid(every_device, report.mesh, 4, ["rows", "cols"])
    assert len(figure.data) == 1 and not figure.layout.annotations  # no selection markers, no labels
    assert len(figure.layout.shapes) <= 2 * plots.MAX_EDGE_LINES
    assert figure.data[0].text is None and len(figure.to_json()) < 2_000_000
    one_row = grid_view((1024, 1024), (None, "model"), report.mesh, 0, 1)
    labelled = plots.sharding_grid(one_row, report.mesh, 4, ["rows", "cols"])
    assert len(labelled.layout.annotations) == 256 and len(labelled.to_json()) < 2_000_000


def test_figures_and_grid_views_are_cached_by_meaning():
    report = planned_256x256()
    # Cached by meaning, returned fresh: equal figures, never the same object (see the next test).
    first_mesh, second_mesh = plots.mesh_figure(report.mesh, [3, 1]), plots.mesh_figure(report.mesh, {1, 3})
    assert first_mesh is not second_mesh and first_mesh.to_plotly_json() == second_mesh.to_plotly_json()
    first = grid_view((1024, 1024), ("data", "model"), report.mesh, 0, 1)
    assert grid_view([1024, 1024], ["data", "model"], report.mesh, 0, 1, {}) is first


def _drawers(seed_dict):
    from explorer.notebook import NotebookReport

    report, view = kernel_view(seed_dict)
    return {
        "sharding_grid": lambda: plots.sharding_grid(view, report.mesh, 4, ["rows", "cols"], title="kernel"),
        "mesh_figure": lambda: plots.mesh_figure(report.mesh, highlight={0, 4}),
        "device_grid": lambda: NotebookReport.of(report).device_grid(KERNEL),
    }


@pytest.mark.parametrize("name", ["sharding_grid", "mesh_figure", "device_grid"])
def test_a_changed_figure_does_not_change_the_next_one(seed_dict, name):
    """Issue 28: the cached grid was handed out as is, so ``device_grid(path).update_layout(...)`` in a
    notebook changed every later figure of that array (and the Layout page's)."""
    draw = _drawers(seed_dict)[name]
    before = draw()
    title, height = before.layout.title.text, before.layout.height
    before.update_layout(title="changed by the user", height=999)
    before.data[0].update(zmin=-7)
    again = draw()
    assert (again.layout.title.text, again.layout.height) == (title, height)
    assert again.data[0].zmin != -7 and again is not before


def test_memory_bars_of_a_huge_mesh_are_one_bar_per_kind():
    report = planned_256x256()
    figure = plots.memory_bars(report.mesh.ids_array().reshape(-1).tolist(), report.totals)
    assert all(len(bar.x) == 1 for bar in figure.data)


def test_memory_axes_use_a_unit_that_fits_the_numbers():
    """Issue 18 item 9: 150,000 MiB is drawn as about 146 GiB, not as ticks "50k 100k 150k" of MiB."""
    from explorer.analysis import Totals

    big = Totals(
        param_bytes=50_000 * 2**20, opt_state_bytes=100_000 * 2**20, input_bytes=0, activation_bytes=0, global_param_bytes=0, param_count=0
    )
    figure = plots.memory_bars([0, 1], big)
    assert figure.layout.yaxis.title.text == "GiB per device"
    assert max(max(bar.y) for bar in figure.data) < 1024
    assert plots.compare_memory(["a"], [big]).layout.yaxis.title.text == "GiB per device"


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
    figure = plots.target_memory_figure(memory, 16 * 2**30)
    assert figure.layout.barmode != "stack" and len(figure.data) == 1
    bars = dict(zip(figure.data[0].y, figure.data[0].x))
    assert bars["peak"] == pytest.approx(11.8) and bars["temporaries"] == pytest.approx(11.9)
    assert figure.layout.xaxis.title.text == "GiB per chip"


def test_on_a_gpu_the_memory_figure_draws_the_share_the_verdict_uses_beside_the_whole_memory():
    """A GPU's verdict compares the peak with JAX's 75% of its memory: the chart draws that line too, per GPU."""
    memory = Memory(argument_bytes=2**30, output_bytes=2**30, alias_bytes=2**30, temp_bytes=3 * 2**30, peak_bytes=4 * 2**30)
    figure = plots.target_memory_figure(memory, 80 * 2**30, "GPU", (60 * 2**30, "JAX's 75%: 60.0 GiB"))
    assert sorted(shape.x0 for shape in figure.layout.shapes) == [60, 80]
    assert [a.text for a in figure.layout.annotations] == ["HBM 80.0 GiB", "JAX's 75%: 60.0 GiB"]
    assert figure.layout.xaxis.title.text == "GiB per GPU"


def test_a_small_program_is_drawn_in_its_own_unit_with_the_far_memory_lines_said_in_the_title():
    """Issue 38: MiB-sized bars on a GiB axis (to reach a GPU's 79.1 GiB line) were invisible."""
    memory = Memory(argument_bytes=24 * 2**20, output_bytes=24 * 2**20, alias_bytes=24 * 2**20, temp_bytes=2**20, peak_bytes=49 * 2**20)
    figure = plots.target_memory_figure(memory, int(79.1 * 2**30), "GPU", (int(59.3 * 2**30), "JAX's 75%: 59.3 GiB"))
    assert figure.layout.xaxis.title.text == "MiB per GPU"
    assert dict(zip(figure.data[0].y, figure.data[0].x))["peak"] == pytest.approx(49)
    assert not figure.layout.shapes  # neither line squeezes the bars
    assert figure.layout.title.text == "Off the scale: HBM 79.1 GiB; JAX's 75%: 59.3 GiB: the largest bar is 0.06% of it"


def test_compared_rooflines_share_one_axis_one_bar_per_layout_and_term_the_bound_outlined():
    """Compare drew one roofline per layout in columns, each on its own scale, cut at 1024 px: now one grouped chart."""
    from explorer.roofline import Estimate

    figure = plots.compare_roofline_figure(["a", "b"], [Estimate(1e-3, 2e-3, 4e-3), Estimate(3e-3, 1e-3, 0.0)])
    assert figure.layout.barmode == "group" and len(figure.data) == 2
    assert [list(bar.x) for bar in figure.data] == [["compute", "memory", "collective"]] * 2
    assert [list(bar.y) for bar in figure.data] == [pytest.approx([1, 2, 4]), pytest.approx([3, 1, 0])]
    assert [bar.name for bar in figure.data] == ["a: ≥ 4 ms, collective-bound", "b: ≥ 3 ms, compute-bound"]
    outlined = [[term for term, color in zip(bar.x, bar.marker.line.color) if color == "#222"] for bar in figure.data]
    assert outlined == [["collective"], ["compute"]]
    assert [list(bar.text) for bar in figure.data] == [["1 ms", "2 ms", "4 ms"], ["3 ms", "1 ms", ""]]  # no label on a bar of 0


def test_sixteen_column_labels_do_not_crowd():
    """Issue 18 item 9: "10:12" "12:14" ... for 16 columns overlapped; at most 8 such labels are drawn."""
    ticks = plots._ticks([(2 * i, 2 * i + 2) for i in range(16)])
    assert len(ticks["ticktext"]) <= 8 and ticks["ticktext"][0] == "0:2"


def test_op_times_name_each_median_in_the_legend_not_on_the_chart():
    """Two medians close together printed their labels on top of each other (Arrays page, 2026-11-24)."""
    figure = plots.op_times_figure(
        {"sharded": [0.0046, 0.0048, 0.0047], "single": [0.0043, 0.0044, 0.0042]},
        {"sharded": "sharded over 8 devices", "single": "one device"},
    )
    assert [trace.name for trace in figure.data] == [
        "sharded over 8 devices · median 4.70 ms (dotted)",
        "one device · median 4.30 ms (dotted)",
    ]
    assert not figure.layout.annotations and len(figure.layout.shapes) == 2


def test_compare_memory_keeps_each_label_inside_its_bar_or_leaves_it_to_the_hover():
    """Labels of small bars printed outside them ran together ("16.0 KiB80.0 KiB") at 1024 px."""
    from explorer.analysis import Totals

    totals = [Totals(8 << 20, 16 << 20, 16 << 10, 80 << 10, 64 << 20, 1 << 21)] * 2
    figure = plots.compare_memory(["a", "b"], totals)
    assert all(bar.textposition == "inside" for bar in figure.data)
    assert figure.layout.uniformtext.mode == "hide"
    assert "16.0 KiB" in figure.data[2].text  # the value is still there, for the hover


def test_advisor_figure_draws_one_trace_per_kind_in_a_fixed_order_from_plain_points():
    """The Advisor's chart from plain points (ui.advisor_view only turns candidates into them)."""
    points = [
        plots.AdvisorPoint("est", "estimate", 0.002, 2**30),
        plots.AdvisorPoint("a", "xla", 0.01, 2**31),
        plots.AdvisorPoint("x", "extrapolated", 0.1, 2**29),
        plots.AdvisorPoint("b", "xla", 0.02, 2**32),
    ]
    figure = plots.advisor_figure(points, 16 * 2**30)
    assert [t.name for t in figure.data] == [name for name, _ in plots.ADVISOR_KINDS.values()]
    assert list(figure.data[0].text) == ["a", "b"] and list(figure.data[0].y) == [2, 4] and list(figure.data[0].x) == [10, 20]
    assert figure.layout.annotations[0].text == "HBM 16.0 GiB per device"
    with pytest.raises(ValueError, match="verified"):
        plots.advisor_figure([plots.AdvisorPoint("a", "verified", 0.01, 1)], 2**30)
