"""The notebook API: ``explorer.analyze`` on a path, a dict or a Layout; DataFrame, HTML summary, device grids."""

import doctest
import json
import os
import re
import subprocess
import sys

import pytest

import explorer
from explorer import notebook
from explorer.analysis.analyzer import analyze as analyze_layout
from explorer.analysis.analyzer import report_to_dict
from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, parse_layout
from tests.paths import ROOT

SEED_FILE = ROOT / "layouts" / "seed-2x4.json"
W2 = "params/LogicalDotReluDot_0/W2"


def test_the_docs_notebook_example_runs(monkeypatch):
    """Every ``>>>`` example in docs/notebook.md runs, from the project folder as a reader would."""
    monkeypatch.chdir(ROOT)
    page = ROOT / "docs" / "notebook.md"
    # A code fence right after an example's output would read as part of the output: fences become blank lines.
    text = re.sub(r"^```.*$", "", page.read_text(), flags=re.MULTILINE)
    test = doctest.DocTestParser().get_doctest(text, {}, "docs/notebook.md", str(page), 0)
    assert len(test.examples) >= 8  # the notebook section is there and parsed
    output = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test, out=output.append)
    assert result.failed == 0, "".join(output)


def test_a_path_a_dict_and_a_layout_give_the_same_report(tmp_path):
    from_dict = explorer.analyze(SEED_LAYOUT)
    assert isinstance(from_dict, notebook.NotebookReport)
    assert report_to_dict(from_dict) == report_to_dict(analyze_layout(parse_layout(SEED_LAYOUT)))
    assert report_to_dict(explorer.analyze(SEED_FILE)) == report_to_dict(from_dict)
    assert report_to_dict(explorer.analyze(str(SEED_FILE))) == report_to_dict(from_dict)
    assert report_to_dict(explorer.analyze(parse_layout(SEED_LAYOUT))) == report_to_dict(from_dict)


@pytest.mark.parametrize("bad,field", [(42, "layout"), (["mesh"], "layout"), ("no-such-file.json", "layout file")])
def test_what_is_not_a_layout_is_one_message(bad, field):
    with pytest.raises(ExplorerError) as raised:
        explorer.analyze(bad)
    assert raised.value.field == field
    assert str(bad) in str(raised.value)


def test_a_bad_dict_names_the_field():
    layout = json.loads(json.dumps(SEED_LAYOUT))
    layout["mesh"]["shape"] = [2, -4]
    with pytest.raises(ExplorerError, match=r"mesh\.shape\[1\]: -4"):
        explorer.analyze(layout)


def test_to_pandas_has_one_row_per_array_with_the_reports_values():
    report = explorer.analyze(SEED_LAYOUT)
    frame = report.to_pandas()
    assert list(frame.path) == [a.path for a in report.arrays]
    assert list(frame.columns) == list(notebook.FRAME_COLUMNS)
    w2 = frame.set_index("path").loc[W2]
    info = report.array(W2)
    assert (w2["spec"], w2["shape"], w2["shard_shape"], w2["bytes_per_device"], w2["replication"]) == (
        "P('model', None)",
        (1024, 1024),
        (256, 1024),
        info.bytes_per_device,
        2,
    )
    assert frame.bytes_per_device.sum() == sum(a.bytes_per_device for a in report.arrays)


def test_the_html_summary_escapes_every_name():
    layout = json.loads(json.dumps(SEED_LAYOUT))
    layout["name"] = "<script>alert('name')</script>"
    layout["rules"].append(["<img src=x onerror=alert(1)>", None])  # a rule no array uses: a finding quotes it
    html = explorer.analyze(layout)._repr_html_()
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&#x27;name&#x27;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "params/LogicalDotReluDot_0/W2" in html and "P(&#x27;model&#x27;, None)" in html
    tags = set(re.findall(r"</?([a-z]+)", html))
    assert tags <= {"div", "p", "b", "code", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}


def test_the_html_summary_lists_the_first_arrays_and_says_how_many_more(monkeypatch):
    monkeypatch.setattr(notebook, "HTML_ARRAY_ROWS", 5)
    report = explorer.analyze(SEED_LAYOUT)
    html = report._repr_html_()
    assert html.count("<tr><td>") == 5
    assert f"and {len(report.arrays) - 5:,} more arrays" in html


def test_device_grid_draws_the_blocks_and_their_devices():
    report = explorer.analyze(SEED_LAYOUT)
    figure = report.device_grid(W2)  # P('model', None) on data=2 x model=4: rows cut in 4, each on a column of the mesh
    assert [a.text for a in figure.layout.annotations] == ["0,4", "1,5", "2,6", "3,7"]
    assert figure.layout.title.text == W2
    assert figure.layout.yaxis.title.text.startswith("dim 0 'hidden' · 1024 → model")
    swapped = report.device_grid(W2, dims=(1, 0))
    assert swapped.layout.xaxis.title.text.startswith("dim 0")


def test_device_grid_of_a_higher_rank_array_cuts_the_others_at_a_block():
    layout = json.loads(json.dumps(SEED_LAYOUT))
    layout["model"]["options"] = {"batch": 8, "layers": 2, "depth": 64, "scan": True}
    layout["rules"].append(["layer", "data"])
    report = explorer.analyze(layout)
    kernel = next(a for a in report.arrays if a.kind == "param" and len(a.shape) == 3 and a.spec[0] == "data")
    first = report.device_grid(kernel.path, dims=(1, 2), blocks={0: 0})
    second = report.device_grid(kernel.path, dims=(1, 2), blocks={0: 1})
    with pytest.raises(ExplorerError, match="block of dim 0"):
        report.device_grid(kernel.path, dims=(1, 2), blocks={0: 2})  # the layer axis has 2 blocks on data=2
    texts = lambda f: [a.text for a in f.layout.annotations]  # noqa: E731
    assert texts(first) != texts(second)
    assert set(texts(first)) <= {str(d) for d in range(4)} and set(texts(second)) <= {str(d) for d in range(4, 8)}


@pytest.mark.parametrize(
    "path,dims,blocks,field",
    [
        ("params/nope", None, None, "path"),
        (W2, (0, 0), None, "dims"),
        (W2, (0, 2), None, "dims"),
        (W2, "01", None, "dims"),
        (W2, None, {5: 0}, "blocks"),
        (W2, None, {0: 0}, "blocks"),
        (W2, None, [0], "blocks"),
    ],
)
def test_device_grid_refuses_what_it_cannot_draw_with_one_message(path, dims, blocks, field):
    report = explorer.analyze(SEED_LAYOUT)
    with pytest.raises(ExplorerError) as raised:
        report.device_grid(path, dims=dims, blocks=blocks)
    assert raised.value.field == field


def test_import_explorer_is_light_and_a_warm_analysis_loads_no_flax_pandas_or_plotly():
    """``import explorer`` loads nothing heavy; the notebook analysis of a cached model loads neither Flax nor the report's extras."""
    explorer.analyze(SEED_LAYOUT)  # fills this session's trace cache (conftest.py's EXPLORER_CACHE_DIR, inherited below)
    probe = (
        "import json, sys\n"
        "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'flax', 'optax', 'pandas', 'plotly', 'pydantic'})\n"
        "import explorer\n"
        "on_import = heavy()\n"
        "from explorer.hardware import devices\n"
        "devices.configure(8)\n"
        f"report = explorer.analyze({str(SEED_FILE)!r})\n"
        "after_analysis = heavy()\n"
        "report._repr_html_()\n"
        "print(json.dumps([on_import, after_analysis, heavy()]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr
    on_import, after_analysis, after_html = json.loads(done.stdout.strip().splitlines()[-1])
    assert on_import == []
    assert after_analysis == after_html == ["jax", "pydantic"]
