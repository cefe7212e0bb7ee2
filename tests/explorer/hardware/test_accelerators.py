"""The accelerators' tables: every TPU generation's and GPU's figures with their sources, XLA's vendored GPU target
configs (package data, agreeing with NVIDIA's figures), and JAX's share of a GPU's memory."""

from __future__ import annotations

import pytest

from explorer.hardware.accelerators import CHIPS, GPUS, memory_fraction
from explorer.hardware.targets import parse_target
from tests.paths import ROOT


def test_every_chip_has_its_figures_and_sources():
    for chip in CHIPS.values():
        assert chip.hbm_bytes > 0 and chip.peak_flops > 0 and chip.hbm_bandwidth > 0 and chip.ici_link_bandwidth > 0
        assert chip.ici_links == 2 * chip.dims
        assert chip.sources and all(s.startswith("https://") for s in chip.sources)


def test_the_hbm_a_tpu_program_may_use_is_what_xlas_compiler_says_for_every_generation():
    """Each generation's ``program_hbm_bytes`` is the HBM XLA's refusal of a far too big program names (E1000, read in a
    child process that imports no explorer code), and less than the device's HBM."""
    import json
    import os
    import re
    import subprocess
    import sys

    from tests import tpu_programs

    env = dict(os.environ, JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "tests.tpu_programs", *tpu_programs.REFUSALS], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    refusals = json.loads(done.stdout)
    assert set(tpu_programs.ONE_SLICE) == set(CHIPS)
    for generation, chip in CHIPS.items():
        available = re.search(r"E1000: CompileTimeHbmOom: .* exceeds available HBM \((\d+\.\d\d)G\)", refusals[f"refused-{generation}"])
        assert available, refusals[f"refused-{generation}"][:500]
        assert chip.program_hbm_bytes == round(float(available[1]) * 2**30) < chip.device_hbm_bytes, generation


def test_the_gpu_figures_agree_with_xlas_target_configs():
    """Memory comes from the vendored config; NVIDIA's HBM bandwidth agrees with the config's within 5% (B200: 8 vs 7.67 TB/s)."""
    import re

    for gpu in GPUS.values():
        config = gpu.target_config
        assert gpu.hbm_bytes == int(re.search(r"device_memory_size: (\d+)", config)[1])
        assert gpu.hbm_bandwidth == pytest.approx(int(re.search(r"memory_bandwidth: (\d+)", config)[1]), rel=0.05)
        assert gpu.peak_flops > 0 and gpu.nvlink_bandwidth > gpu.network_bandwidth > 0
        assert gpu.sources and all(s.startswith("https://") for s in gpu.sources)
        assert config.startswith("# Copyright") and "Apache License, Version 2.0" in config
    assert [GPUS[g].hbm_bytes // 2**30 for g in GPUS] == [79, 79, 141, 178]


def test_the_vendored_configs_are_package_data():
    import tomllib

    root = ROOT
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "*.txtpb" in data["explorer.hardware.gpu_targets"] and "SOURCE.md" in data["explorer.hardware.gpu_targets"]
    assert {gpu.config_file for gpu in GPUS.values()} <= {p.name for p in (root / "explorer" / "hardware" / "gpu_targets").iterdir()}


def test_jax_takes_75_percent_of_a_gpu_unless_told(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    assert memory_fraction() == 0.75
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".9")
    assert memory_fraction() == 0.9 and parse_target("h100:1x8").to_dict()["usable_bytes"] == int(0.9 * GPUS["h100"].hbm_bytes)
    for nonsense in ("lots", "0", "1.5"):
        monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", nonsense)
        assert memory_fraction() == 0.75
