"""The README's setup refuses a Python older than 3.12 with a message, and docs/versions.md states the versions it supports."""

import glob
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.paths import ROOT

TOOLS = ("bash", "dirname", "cat", "rm")  # what scripts/setup.sh runs before it has a Python


def _old_python(tmp_path: Path) -> str:
    """A Python 3.11: pyenv's or Debian's where this machine has one, else a stand-in that fails every version check."""
    found = sorted(glob.glob("/root/.pyenv/versions/3.11*/bin/python")) + sorted(glob.glob("/usr/bin/python3.11"))
    if found:
        return found[0]
    stand_in = tmp_path / "python3.11"
    stand_in.write_text("#!/bin/sh\nexit 1\n")
    stand_in.chmod(0o755)
    return str(stand_in)


def _setup_copy(tmp_path: Path) -> Path:
    """The setup script in a folder of its own (no .venv), as on a fresh clone."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", project / "scripts" / "setup.sh")
    shutil.copy(ROOT / "requirements.txt", project / "requirements.txt")
    return project


def _run_setup(project: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(project / "scripts" / "setup.sh")], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


def test_setup_refuses_an_old_python_named_by_PYTHON(tmp_path):
    project = _setup_copy(tmp_path)
    old = _old_python(tmp_path)
    result = _run_setup(project, {**os.environ, "PYTHON": old})
    assert result.returncode != 0
    assert f"setup: PYTHON={old} is not Python 3.12 or newer" in result.stderr
    assert "pyenv install 3.12" in result.stderr and "PYTHON=/path/to/python3.12" in result.stderr
    assert not (project / ".venv").exists()


def test_setup_without_any_suitable_python_says_how_to_get_one(tmp_path):
    """Only an old `python3` on PATH and an empty pyenv: setup stops before making .venv, and says why and how."""
    project = _setup_copy(tmp_path)
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in TOOLS:
        (tools / tool).symlink_to(shutil.which(tool))
    (tools / "python3").symlink_to(_old_python(tmp_path))
    env = {"PATH": str(tools), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    result = _run_setup(project, env)
    assert result.returncode != 0
    assert "setup: no Python 3.12 or newer found" in result.stderr
    assert "JAX 0.11+ and Flax 0.12.9+ need Python 3.12 or newer" in result.stderr
    assert not (project / ".venv").exists()


def test_the_docs_state_the_supported_versions():
    readme = (ROOT / "README.md").read_text()
    versions = (ROOT / "docs" / "versions.md").read_text()
    pins = dict(re.findall(r"^([a-z]+)==([\w.]+)", (ROOT / "requirements.txt").read_text(), flags=re.MULTILINE))
    minimum = re.search(r'^MIN_PYTHON="([\d.]+)"', (ROOT / "scripts" / "setup.sh").read_text(), flags=re.MULTILINE).group(1)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"] == f">={minimum}"
    assert "(docs/versions.md)" in readme  # linked from the two commands' section
    assert f"**Python {minimum} or newer**" in versions
    assert f"with Python {minimum} or newer" in readme  # the two commands' section
    assert "**JAX 0.12**" in versions and "**Flax 0.12.12**" in versions
    for name, label in (("jax", "jax/jaxlib"), ("flax", "flax"), ("optax", "optax"), ("libtpu", "libtpu")):
        assert f"{label} {pins[name]}" in versions, f"docs/versions.md does not say {label} {pins[name]}"
    assert pins["jax"] == pins["jaxlib"]
    assert "3.11+" not in readme + versions and "0.10.2" not in readme + versions


@pytest.mark.parametrize("script", ["app.sh", "test.sh"])
def test_the_two_commands_go_through_setup(script):
    """Both README commands source setup.sh, so both refuse an old Python the same way."""
    assert 'source "$(dirname "$0")/setup.sh"' in (ROOT / "scripts" / script).read_text()


def test_setup_says_what_it_is_doing_while_it_installs(tmp_path):
    """Issue 55 item 7: the app's install ran about 2 minutes without a line from the project. A stand-in .venv whose
    Python records what it is asked (no download): setup says each step before it runs it, and when it is done."""
    project = _setup_copy(tmp_path)
    (project / ".venv" / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    stand_in = project / ".venv" / "bin" / "python"
    stand_in.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 0\n')
    stand_in.chmod(0o755)
    result = _run_setup(project, dict(os.environ))
    assert result.returncode == 0, result.stderr
    said = result.stdout.splitlines()
    assert said[0].startswith("setup: installing requirements.txt into .venv (JAX, libtpu, the CUDA plugin"), said
    assert "a few minutes the first time" in said[0]
    assert re.fullmatch(r"setup: installed in \d+ s; byte-compiling the checkout", said[1]) and said[2] == "setup: .venv is ready", said
    asked = calls.read_text().splitlines()
    assert [line.split()[:3] for line in asked if "pip" in line] == [["-m", "pip", "install"]]  # the step said, then run
