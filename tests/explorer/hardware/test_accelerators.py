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
