"""The installable library: the wheel builds, installs in a fresh virtual environment and works outside the checkout.

How the fresh environment gets its dependencies: a user's ``pip install .`` resolves them from the
index; here, installing jax, flax, optax, pandas and plotly again would take minutes and gigabytes
for every run. So the new environment (``python -m venv``, no system site-packages, no pip of its
own) gets a ``.pth`` file naming the shared virtualenv's site-packages: the same pinned libraries,
found *after* the environment's own site-packages. The wheel is installed into it with
``--no-deps``, and ``pip check`` then confirms that the wheel's declared dependency ranges accept
the versions found there. Commands run from a folder outside the checkout with no PYTHONPATH, and
the test asserts that ``explorer`` is imported from the environment, never from the checkout.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.maxtext_tiny import TINY, needs_maxtext
from tests.paths import ROOT

KERNEL = "params/LogicalDotReluDot_0/Dense_0/kernel"


def _requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_package_ranges_accept_the_pinned_versions():
    """requirements.txt pins what the tests run on; the library's ranges must include every pin (no drift)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _requirement_pins()
    for text in project["dependencies"]:
        requirement = Requirement(text)
        assert requirement.name in pins, f"{requirement.name} is a dependency but requirements.txt does not pin it"
        assert requirement.specifier.contains(pins[requirement.name]), f"{text} excludes the pinned {pins[requirement.name]}"
    assert project["requires-python"] == ">=3.12"
    assert project["scripts"]["partition-explorer"] == "explorer.__main__:run"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtual environment outside the checkout with the wheel built from this checkout installed."""
    base = tmp_path_factory.mktemp("install")
    assert ROOT not in base.parents
    source = base / "source"  # what `pip install git+URL` sees: the package, its metadata and the README
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "explorer", source / "explorer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(source)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (base / "dist").glob("partition_explorer-*.whl")

    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    shared = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}
    (site / "shared-dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(shared)))
    install = subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "-q", str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert install.returncode == 0, install.stderr

    outside = base / "work"
    outside.mkdir()
    shutil.copy(ROOT / "layouts" / "seed-2x4.json", outside / "my-layout.json")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"EXPLORER_CACHE_DIR": str(base / "cache"), "EXPLORER_CPU_DEVICES": "8"}
    return {"venv": venv, "python": python, "site": site, "cwd": outside, "env": env, "pip": pip}


def _run(installed, *command):
    return subprocess.run(
        [str(c) for c in command], cwd=installed["cwd"], env=installed["env"], capture_output=True, text=True, timeout=600
    )


def test_the_declared_dependencies_are_satisfied(installed):
    """``pip check``'s lines about this wheel: none. (Its lines about other packages are not the wheel's: the MaxText
    extra is installed without its packages' dependencies, as docs/maxtext.md says, and pip lists those it lacks.)"""
    check = subprocess.run([*installed["pip"], "--python", str(installed["python"]), "check"], capture_output=True, text=True)
    ours = [line for line in (check.stdout + check.stderr).splitlines() if line.lower().startswith("partition-explorer ")]
    assert ours == [], check.stdout + check.stderr
    assert check.returncode == 0 or check.stdout.strip(), check.stderr  # pip ran and said what it found


def test_the_console_script_analyzes_a_layout_file(installed):
    script = installed["venv"] / "bin" / "partition-explorer"
    result = _run(installed, script, "analyze", "my-layout.json", "--json")
    assert result.returncode == 0, result.stderr
    kernel = next(a for a in json.loads(result.stdout)["arrays"] if a["path"] == KERNEL)
    assert kernel["spec"] == [None, "model"] and kernel["shard_shape"] == [1024, 256]
    bad = _run(installed, script, "analyze", "missing.json")
    assert bad.returncode == 2 and "missing.json" in bad.stderr and "Traceback" not in bad.stderr
    usage = _run(installed, script, "--help")
    assert usage.stdout.startswith("usage: partition-explorer") and "analyze" in usage.stdout


def test_import_explorer_comes_from_the_environment_and_analyzes(installed):
    probe = (
        "import json, explorer\n"
        "from explorer.hardware import devices\n"
        "devices.configure(8)\n"
        "frame = explorer.analyze('my-layout.json').to_pandas()\n"
        f"print(json.dumps([explorer.__file__, len(frame), frame.set_index('path').loc[{KERNEL!r}, 'spec']]))\n"
    )
    result = _run(installed, installed["python"], "-c", probe)
    assert result.returncode == 0, result.stderr
    location, rows, spec = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(location).is_relative_to(installed["site"]) and not Path(location).is_relative_to(ROOT)
    assert rows == 36 and spec == "P(None, 'model')"


# The MaxText extra as docs/maxtext.md installs it: `pip install -r requirements.txt && pip install --no-deps -r
# requirements-maxtext.txt`. Installing it again here would take minutes, so this process's packages stand in for the
# new environment, each import of a package that install would not bring refused (``ONLY``): what it brings is
# requirements.txt's pins with every dependency they declare (read from the installed metadata, markers evaluated)
# and requirements-maxtext.txt's pins alone (--no-deps).
ONLY = """
import importlib.abc, importlib.metadata, runpy, sys
allowed = set(sys.argv[1].split(","))
owners = importlib.metadata.packages_distributions()
canon = lambda name: name.lower().replace("_", "-").replace(".", "-")

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = {canon(d) for d in owners.get(name.partition(".")[0], ())}
        if dists and not dists & allowed:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
sys.argv = ["explorer", *sys.argv[2:]]
runpy.run_module("explorer", run_name="__main__", alter_sys=True)
"""


def _pins(path: Path) -> list[str]:
    return [line.split("#")[0].split("==")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def documented_maxtext_install() -> set[str]:
    """The distributions (canonical names) the documented install of the MaxText extra leaves in a new environment."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, todo = set(), [name for name in _pins(ROOT / "requirements.txt") if not name.startswith("-")]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found.add(name)
        for text in metadata.distribution(name).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found | {canonicalize_name(name) for name in _pins(ROOT / "requirements-maxtext.txt")}


@needs_maxtext
def test_the_maxtext_extra_installed_as_documented_runs_analyze_maxtext(tmp_path):
    """A new environment made as docs/maxtext.md says runs ``analyze --maxtext`` (before filelock was in
    requirements-maxtext.txt: "'filelock' needs MaxText, an optional extra", which the developers' environment hid, where
    Ray brings it)."""
    allowed = documented_maxtext_install()
    assert "ray" not in allowed and "pytest" not in allowed  # the developers' packages are not in it
    command = [sys.executable, "-c", ONLY, ",".join(sorted(allowed)), "analyze", "--maxtext", *TINY, "compile_topology=v5e-8", "--json"]
    env = dict(os.environ, EXPLORER_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["layout"]["model"]["name"] == "maxtext"
