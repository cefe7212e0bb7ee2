"""``python -m explorer``: tables, JSON, and exit code 2 with one message for bad input."""

import json
import subprocess
import sys

import jax
import pytest

from tests.paths import ROOT

SEED = ROOT / "layouts" / "seed-2x4.json"


def run(*args, env_extra=None):
    import os

    env = {**os.environ, "EXPLORER_CPU_DEVICES": "8", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "explorer", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_analyze_prints_a_table_with_the_guide_specs():
    result = run("analyze", str(SEED))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("params/LogicalDotReluDot_0/Dense_0/kernel"))
    assert "param" in lines[at] and "1.0 MiB" in lines[at]
    assert "P(None, 'model')" in lines[at + 1] and "(1024, 256)" in lines[at + 1]  # how it is sharded: the line below it
    assert "real devices" in result.stdout
    assert max(map(len, lines)) <= 120  # issue 45 item 13: the table ran to 158 characters, the rules line to 178


def test_analyze_fits_its_explicit_transformer_and_origins_in_120_columns():
    """The built-in transformer's paths are long: its table ran to 205 characters and its origins to 205."""
    for args in (["layouts/transformer-explicit-2x4.json"], ["layouts/seed-2x4.json", "--origins", "LogicalDotReluDot_1"]):
        result = run("analyze", *args)
        assert result.returncode == 0, result.stderr
        assert max(map(len, result.stdout.splitlines())) <= 120, max(result.stdout.splitlines(), key=len)


def test_analyze_json_with_tiles():
    result = run("analyze", str(SEED), "--json", "--tiles")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    w2 = next(a for a in report["arrays"] if a["path"] == "params/LogicalDotReluDot_0/W2")
    assert w2["spec"] == ["model", None]
    assert [t["devices"] for t in w2["tiles"]] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert report["mesh"]["abstract"] is False


def test_planned_mesh_from_the_command_line(tmp_path):
    layout = json.loads(SEED.read_text())
    layout["mesh"] = {"shape": [16, 16], "axes": ["data", "model"]}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(layout))
    report = json.loads(run("analyze", str(path), "--json").stdout)
    assert report["mesh"]["abstract"] is True
    assert report["mesh"]["devices"][1][0] == 16


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("{not json", "not valid JSON"),
        ('{"mesh": {"shape": [2, 4], "axes": ["data"]}, "model": {"name": "mlp"}}', "mesh.axes"),
        ('{"mesh": {"shape": [2], "axes": ["d"]}, "rules": [["x", "nope"]], "model": {"name": "mlp"}}', "rules[0]"),
    ],
)
def test_bad_input_exits_2_with_one_message_and_no_traceback(tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = run("analyze", str(path))
    assert result.returncode == 2
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_missing_file_exits_2():
    result = run("analyze", "no-such-layout.json")
    assert result.returncode == 2 and "cannot be read" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--devices", "0"], {}, "error: --devices: 0 must be between 1 and 512 CPU devices"),
        ([], {"EXPLORER_CPU_DEVICES": "600"}, "error: EXPLORER_CPU_DEVICES: 600 must be between 1 and 512 CPU devices"),
        ([], {"EXPLORER_CPU_DEVICES": "lots"}, "error: EXPLORER_CPU_DEVICES: 'lots' is not a whole number of CPU devices"),
    ],
)
def test_a_bad_device_count_exits_2_with_one_message(args, env, message):
    result = run(*args, "analyze", str(SEED), env_extra=env)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_analyze_reads_the_layout_from_standard_input():
    import os

    result = subprocess.run(
        [sys.executable, "-m", "explorer", "analyze", "-", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=SEED.read_text(),
        env={**os.environ, "EXPLORER_CPU_DEVICES": "8"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["layout"]["name"] == "seed-2x4"


def test_strict_exits_1_only_while_an_error_level_finding_stands(tmp_path):
    layout = json.loads(SEED.read_text())
    assert run("analyze", str(SEED), "--strict").returncode == 0  # warnings only: the guide's layout is fine
    layout["model"]["options"]["depth"] = 1022  # 'hidden' over the 4-way model axis: JAX refuses it
    path = tmp_path / "indivisible.json"
    path.write_text(json.dumps(layout))
    assert run("analyze", str(path)).returncode == 0
    strict = run("analyze", str(path), "--strict", "--json")
    assert strict.returncode == 1
    assert json.loads(strict.stdout)["warnings"][0]["level"] == "error"
    assert "error-level" in strict.stderr and "1022" in strict.stderr


def jax_grid(shape, spec):
    """The device ids in each cell of jax.debug.visualize_sharding's drawing, row by row."""
    import contextlib
    import io
    import re

    from jax.sharding import NamedSharding, PartitionSpec

    from explorer.meshes import jax_mesh

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        jax.debug.visualize_sharding(shape, NamedSharding(jax_mesh((2, 4), ("data", "model")), PartitionSpec(*spec)), use_color=False)
    return [
        [sorted(int(i) for i in re.findall(r"\d+", cell)) for cell in line.split("│")[1:-1]]
        for line in printed.getvalue().splitlines()
        if "│" in line and re.search(r"\d", line)
    ]


def our_grid(text):
    import re

    return [
        [sorted(int(i) for i in re.findall(r"\d+", cell)) for cell in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line
    ]


@pytest.mark.parametrize(
    "spec", [("data", "model"), ("model", "data"), (None, "model"), ("data", None), (None, None), ((("data", "model")), None)]
)
def test_grid_text_shows_the_devices_jax_visualize_sharding_shows(spec):
    from explorer.meshes import mesh_info
    from explorer.layout import MeshSpec
    from explorer.text import grid_text

    mesh = mesh_info(MeshSpec(shape=(2, 4), axes=("data", "model")))
    assert our_grid(grid_text((16, 8), spec, mesh)) == jax_grid((16, 8), spec)


def test_array_prints_a_3d_grid_with_the_rest_sliced(tmp_path):
    layout = json.loads(SEED.read_text())
    layout["model"]["options"]["scan"] = True
    layout["rules"].append(["layer", "data"])
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(layout))
    kernel = "params/ScanLogicalDotReluDot_0/Dense_0/kernel"  # (layer 4, embed 1024, hidden 1024) -> P('data', None, 'model')
    result = run("analyze", str(path), "--array", kernel, "--dims", "1,2", "--block", "0=1")
    assert result.returncode == 0, result.stderr
    assert "P('data', None, 'model')" in result.stdout.splitlines()[0]
    assert our_grid(result.stdout) == [[[4], [5], [6], [7]]]  # layer block 1 lives on mesh row data=1
    assert "dim 0: block 1 of 2 (2:4)" in result.stdout
    default = run("analyze", str(path), "--array", kernel)
    assert our_grid(default.stdout) == [[[0], [1], [2], [3]], [[4], [5], [6], [7]]]  # the sharded dims: layer x hidden
    bad = run("analyze", str(path), "--array", "params/nope")
    assert bad.returncode == 2 and "--array: 'params/nope' is not an array" in bad.stderr


# Runs the command line exactly as `python -m explorer ...` does (runpy, `__main__`), then reports which
# heavy libraries and model modules the process imported, on stderr, after the command has finished.
IMPORTS_PROBE = (
    "import atexit, json, runpy, sys\n"
    "def report():\n"
    "    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'flax', 'optax', 'pandas', 'plotly', 'streamlit'})\n"
    "    models = sorted(m for m in sys.modules if m.startswith('explorer.models.') and m not in ('explorer.models.base', 'explorer.models.options'))\n"
    "    print('IMPORTED ' + json.dumps(heavy + models), file=sys.stderr)\n"
    "atexit.register(report)\n"
    "import os\n"
    "_exit = os._exit  # analyze ends its process with os._exit, past atexit: report there too\n"
    "os._exit = lambda code: (report(), sys.stderr.flush(), _exit(code))\n"
    "sys.argv = ['explorer', *sys.argv[1:]]\n"
    "runpy.run_module('explorer', run_name='__main__', alter_sys=True)\n"
)


def imported_by_cli(*args: str, cache_dir) -> tuple[subprocess.CompletedProcess, list[str]]:
    import os

    env = {**os.environ, "EXPLORER_CPU_DEVICES": "8", "EXPLORER_CACHE_DIR": str(cache_dir)}
    result = subprocess.run([sys.executable, "-c", IMPORTS_PROBE, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("IMPORTED "))
    return result, json.loads(line.removeprefix("IMPORTED "))


def test_a_warm_analysis_imports_no_flax_optax_models_pandas_or_plotly(tmp_path):
    """The command line on a disk-cache hit loads none of what made a warm run slow (Flax, optax, the models' code).

    The cold run traces the model (so it imports Flax) and fills the cache; ``--json`` loads neither pandas nor
    plotly even then. The warm run, a new process as a user's second command is, must import none of them.
    """
    cold, cold_imports = imported_by_cli("analyze", str(SEED), "--json", cache_dir=tmp_path)
    assert "flax" in cold_imports  # the probe sees what the cold run imported: the warm check below means something
    assert not {"pandas", "plotly", "streamlit"} & set(cold_imports)
    warm, warm_imports = imported_by_cli("analyze", str(SEED), "--json", cache_dir=tmp_path)
    assert warm_imports == []
    assert json.loads(warm.stdout) == json.loads(cold.stdout)


def test_url_starts_no_jax(tmp_path):
    import os

    probe = IMPORTS_PROBE.replace("{'flax', 'optax',", "{'jax', 'flax', 'optax',")
    result = subprocess.run(
        [sys.executable, "-c", probe, "url", str(SEED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "EXPLORER_CACHE_DIR": str(tmp_path)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("?name=seed-2x4")
    assert "IMPORTED []" in result.stderr


def test_tiles_of_a_huge_mesh_need_a_path_filter(tmp_path, capsys):
    from explorer.__main__ import main

    path = tmp_path / "huge.json"
    path.write_text(
        json.dumps(
            {
                "name": "huge",
                "mesh": {"shape": [256, 256], "axes": ["data", "model"]},
                "rules": [["batch", "data"], ["hidden", "model"]],
                "model": {"name": "mlp", "options": {"batch": 256, "layers": 2, "depth": 1024}},
            }
        )
    )
    assert main(["analyze", str(path), "--tiles"]) == 2
    assert "--tiles-for" in capsys.readouterr().err
    assert main(["analyze", str(path), "--json", "--tiles-for", "params/*_1/Dense_0/kernel"]) == 0
    arrays = json.loads(capsys.readouterr().out)["arrays"]
    tiled = [a["path"] for a in arrays if "tiles" in a]
    assert tiled == ["params/LogicalDotReluDot_1/Dense_0/kernel"]
    assert sum(len(t["devices"]) for t in arrays[[a["path"] for a in arrays].index(tiled[0])]["tiles"]) == 65536
    assert main(["analyze", str(path), "--tiles-for", "nothing*"]) == 2
    assert "matches no array" in capsys.readouterr().err


def test_analyze_ends_its_process_with_every_byte_of_its_output_and_its_exit_status(tmp_path):
    """``run`` ends an analyze with ``os._exit`` once its output is flushed (no interpreter teardown): the JSON
    arrives whole through a pipe, and the status is main's (0; 2 for bad input, with its one line)."""
    import os

    env = {**os.environ, "EXPLORER_CPU_DEVICES": "8", "EXPLORER_CACHE_DIR": str(tmp_path)}
    env.pop("PYTHONUNBUFFERED", None)  # a pipe is block-buffered, as a user's is
    done = subprocess.run(
        [sys.executable, "-m", "explorer", "analyze", str(SEED), "--json", "--tiles"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("}\n")  # block-buffered into a pipe: its last bytes were flushed before the exit
    assert json.loads(done.stdout)["layout"]["name"] == "seed-2x4"
    refused = subprocess.run(
        [sys.executable, "-m", "explorer", "analyze", str(tmp_path / "missing.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error: layout file:") and refused.stdout == ""


def test_analyze_origins_lists_each_values_propagated_sharding_and_its_origin(capsys):
    """On the guide's MLP (Auto axes): the train step's values after Shardy's propagation, each axis' origin a line."""
    from explorer.__main__ import main

    assert main(["analyze", str(ROOT / "layouts" / "seed-2x4.json"), "--origins", "LogicalDotReluDot_1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["origins"]
    assert found and all("LogicalDotReluDot_1" in json.dumps(v) for v in found)  # its op, or an origin (its parameters)
    assert any(v["described"].get("data", "").startswith("the constraint at mlp.py:") for v in found)
    assert main(["analyze", str(ROOT / "layouts" / "seed-2x4.json"), "--origins", "LogicalDotReluDot_1/dot_general"]) == 0
    text = capsys.readouterr().out
    assert "after Shardy's propagation" in text and "LogicalDotReluDot_1/dot_general (backward)" in text
    assert "data ← constraint at mlp.py:" in text  # as the page writes an origin


def test_the_progress_says_each_change_at_once_and_a_long_silence_every_30_seconds():
    """``advise``'s progress on stderr: a line when it changes; the same line again only after ``HEARTBEAT_S`` (inside
    a compile of minutes: issue 55's newcomer saw nothing for three), with the elapsed time in words."""
    import io

    from explorer.__main__ import HEARTBEAT_S, progress_printer

    clock = [0.0]
    stream = io.StringIO()
    progress = progress_printer(stream, now=lambda: clock[0])
    for second in range(0, 95):
        clock[0] = float(second)
        progress("stage 2: compiling 1 of at most 4 (fsdp8) · fsdp8: XLA compiling", second + 0.4)
    clock[0] = 95.0
    progress("stage 2: compiling 2 of at most 4 (data8) · data8: tracing the train step", 3.0)
    lines = stream.getvalue().splitlines()
    assert HEARTBEAT_S == 30.0
    assert lines == [
        "stage 2: compiling 1 of at most 4 (fsdp8) · fsdp8: XLA compiling (0.4 s)",
        "stage 2: compiling 1 of at most 4 (fsdp8) · fsdp8: XLA compiling (30 s)",
        "stage 2: compiling 1 of at most 4 (fsdp8) · fsdp8: XLA compiling (60 s)",
        "stage 2: compiling 1 of at most 4 (fsdp8) · fsdp8: XLA compiling (1 min 30 s)",
        "stage 2: compiling 2 of at most 4 (data8) · data8: tracing the train step (3.0 s)",
    ]
