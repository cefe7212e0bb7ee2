"""The device grid and the mesh: exactly the tiles, one colour per device, bounded on huge meshes, cached by meaning."""

import pytest

from explorer.analysis.analyzer import analyze
from explorer.layout import parse_layout
from explorer.tiles import grid_view
from explorer.plots import grid
from explorer.plots.grid import device_color, mesh_figure, sharding_grid
from tests.explorer.plots import KERNEL, kernel_view, planned_256x256


def test_grid_draws_each_replica_as_a_stripe_of_its_device(seed_dict):
    report, view = kernel_view(seed_dict)
    figure = sharding_grid(view, report.mesh, 4, ["rows", "cols"])
    heatmap = figure.data[0]
    assert [list(row) for row in heatmap.z] == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert [a.text for a in figure.layout.annotations] == ["0,4", "1,5", "2,6", "3,7"]
    hover = heatmap.text[0][0]
    assert "index [0:1024 × 0:256]" in hover and "shard shape (1024, 256) · 1.0 MiB" in hover
    assert "device 0</b> (data=0, model=0)" in hover and "held by 2 device(s): 0,4" in hover


def test_device_colours_are_the_same_in_every_figure(seed_dict):
    report, view = kernel_view(seed_dict)
    grid = sharding_grid(view, report.mesh, 4, ["rows", "cols"]).data[0]
    mesh = mesh_figure(report.mesh).data[0]

    def colour(trace, device):
        """The discrete colorscale holds two stops per z value, in z order."""
        return trace.colorscale[2 * device][1]

    for device in range(8):
        assert colour(grid, device) == colour(mesh, device) == device_color(device, 8)


def test_mesh_highlight_fades_the_other_devices(seed_dict):
    report, _ = kernel_view(seed_dict)
    z = mesh_figure(report.mesh, highlight={0, 4}).data[0].z
    faded = report.mesh.size
    assert [list(row) for row in z] == [[0, faded, faded, faded], [4, faded, faded, faded]]


def test_many_replicas_draw_one_grey_block_with_a_count():
    layout = parse_layout({"mesh": {"shape": [32], "axes": ["data"]}, "rules": [], "model": {"name": "mlp"}})
    report = analyze(layout)
    info = report.array(KERNEL)
    view = grid_view(info.shape, info.spec, report.mesh, 0, 1)
    figure = sharding_grid(view, report.mesh, 4, ["rows", "cols"])
    assert [list(row) for row in figure.data[0].z] == [[report.mesh.size]]
    assert figure.layout.annotations[0].text == "0,1,2…31 (32)"


def test_the_256x256_mesh_figure_is_one_heatmap_with_ids_on_hover():
    report = planned_256x256()
    figure = mesh_figure(report.mesh, highlight={0, 65535})
    assert len(figure.data) == 1 and not figure.layout.shapes and not figure.layout.annotations
    heatmap = figure.data[0]
    assert heatmap.text is None and "%{customdata}" in heatmap.hovertemplate
    assert (heatmap.customdata == report.mesh.ids_array()).all()
    assert len(figure.to_json()) < 2_000_000
    z = heatmap.z
    assert z[0][0] == grid._color_bin(0) and z[255][255] == grid._color_bin(65535) and z[0][1] == grid.COLOR_BINS


def test_a_65536_block_grid_is_bounded_and_a_256_block_grid_keeps_labels():
    report = planned_256x256()
    every_device = grid_view((1024, 1024), ("data", "model"), report.mesh, 0, 1)
    figure = sharding_grid(every_device, report.mesh, 4, ["rows", "cols"])
    assert len(figure.data) == 1 and not figure.layout.annotations  # no selection markers, no labels
    assert len(figure.layout.shapes) <= 2 * grid.MAX_EDGE_LINES
    assert figure.data[0].text is None and len(figure.to_json()) < 2_000_000
    one_row = grid_view((1024, 1024), (None, "model"), report.mesh, 0, 1)
    labelled = sharding_grid(one_row, report.mesh, 4, ["rows", "cols"])
    assert len(labelled.layout.annotations) == 256 and len(labelled.to_json()) < 2_000_000


def test_figures_and_grid_views_are_cached_by_meaning():
    report = planned_256x256()
    # Cached by meaning, returned fresh: equal figures, never the same object (see the next test).
    first_mesh, second_mesh = mesh_figure(report.mesh, [3, 1]), mesh_figure(report.mesh, {1, 3})
    assert first_mesh is not second_mesh and first_mesh.to_plotly_json() == second_mesh.to_plotly_json()
    first = grid_view((1024, 1024), ("data", "model"), report.mesh, 0, 1)
    assert grid_view([1024, 1024], ["data", "model"], report.mesh, 0, 1, {}) is first


def _drawers(seed_dict):
    from explorer.notebook import NotebookReport

    report, view = kernel_view(seed_dict)
    return {
        "sharding_grid": lambda: sharding_grid(view, report.mesh, 4, ["rows", "cols"], title="kernel"),
        "mesh_figure": lambda: mesh_figure(report.mesh, highlight={0, 4}),
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


def test_sixteen_column_labels_do_not_crowd():
    """Issue 18 item 9: "10:12" "12:14" ... for 16 columns overlapped; at most 8 such labels are drawn."""
    ticks = grid._ticks([(2 * i, 2 * i + 2) for i in range(16)])
    assert len(ticks["ticktext"]) <= 8 and ticks["ticktext"][0] == "0:2"


def test_a_meshs_axes_of_size_one_are_counted_not_drawn():
    """Issue 55: MaxText's 12-axis mesh with fsdp=8 titled its picture with all eleven other axes and ticked each column
    "0,0,3,0,0,0,0,0,0,0,0"; cut at 1024 px. Drawn are the axes that shard: one row of fsdp 0..7."""
    from explorer.tiles import MeshInfo

    axes = ("diloco", "data", "stage", "fsdp", "fsdp_transpose", "context", "tensor", "expert")
    shape = (1, 1, 1, 8, 1, 1, 1, 1)
    mesh = MeshInfo(shape, axes, tuple(range(8)), abstract=False)
    figure = mesh_figure(mesh)
    assert figure.layout.xaxis.title.text == "fsdp  (and 7 axes of size 1)"
    assert list(figure.layout.xaxis.ticktext) == [str(i) for i in range(8)]
    assert [list(row) for row in figure.data[0].z] == [list(range(8))]
    assert figure.data[0].customdata[0][3] == "<b>device 3</b><br>fsdp=3"
    two = MeshInfo((1, 2, 1, 4), ("a", "data", "b", "model"), tuple(range(8)), abstract=False)
    drawn = mesh_figure(two)
    assert drawn.layout.yaxis.title.text == "data" and drawn.layout.xaxis.title.text == "model  (and 2 axes of size 1)"
    assert [list(row) for row in drawn.data[0].z] == [[0, 1, 2, 3], [4, 5, 6, 7]]
