"""Fixtures shared by the tests (the devices are configured in the top-level conftest.py)."""

import copy
import itertools

import pytest

from explorer import caches
from explorer.layout import SEED_LAYOUT


@pytest.fixture
def seed_dict():
    """A fresh copy of the Flax guide's layout in file form, safe to mutate."""
    return copy.deepcopy(SEED_LAYOUT)


@pytest.fixture
def own_compile_cache(tmp_path, monkeypatch):
    """Target compiles cached in a folder of this test's own: each test compiles as on a fresh machine."""
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def cleared():
    """Every cache in memory cleared first (``explorer.caches.clear``): the test starts as a new process would."""
    caches.clear()


# The order pytest-xdist's loadfile hands whole files to its workers (``--no-loadscope-reorder`` in
# scripts/test.sh keeps it; by default xdist sorts files by their number of tests, which put every browser file, each
# a few long tests, at the end, both workers driving Chromium and Streamlit servers at once on two cores). The longest
# first, so that no long file runs alone at the end, and a browser file beside a CPU-bound one, so that one worker's
# waits for the page are the other's compile time. Seconds from a local run of the whole suite; the other files follow
# in the collection's order.
CPU_FILES = (
    "tests/explorer/advisor/test_advisor_models.py",  # ~160 s
    "tests/explorer/advisor/test_pipeline_search.py",  # ~110 s CPU (stage 1 over two slices; three compiles of a 1.8 B model on 4xv5e:1x1)
    "tests/explorer/compile/test_xla_results.py",  # ~40 s (of test_target_compile.py's ~60 s before the split)
    "tests/test_ground_truth.py",  # ~56 s
    "tests/test_ground_truth_sources.py",  # ~40 s (three bare compiles and a TPU slice's)
    "tests/explorer/analysis/test_presets.py",  # ~53 s
    "tests/explorer/advisor/test_advisor.py",  # ~50 s
    "tests/explorer/compile/test_cluster.py",  # ~65 s (a two-node Ray cluster; measured on a loaded machine)
    "tests/pages/test_sessions.py",  # ~59 s (eight sessions compiling; measured on a loaded machine)
    "tests/explorer/compile/test_compile_pool.py",  # ~61 s (measured on a loaded machine)
    "tests/explorer/compile/test_compiled.py",  # ~38 s
    "tests/explorer/hardware/test_gpu_targets.py",  # ~37 s
    "tests/explorer/timing/test_workers.py",  # ~33 s
    "tests/explorer/timing/test_pipeline_timing.py",  # ~55 s (a pipelined layout timed live)
    "tests/explorer/models/test_pipeline.py",  # ~60 s (pipelined compiles and gradients on Auto and Explicit axes, CPU compiles of one)
    "tests/explorer/predict/test_pipeline_bubble.py",  # ~45 s (a pipelined d_model-1024 transformer compiled for v5e-8)
    "tests/explorer/reading/test_types.py",  # ~28 s
    "tests/explorer/timing/test_timing.py",  # ~24 s
    "tests/explorer/predict/test_tpu_kernels.py",  # ~25 s (three TPU programs compiled in one child)
    "tests/pages/test_compile_again.py",  # ~25 s (two compiles for a 1-chip slice)
    "tests/explorer/models/test_maxtext.py",  # ~22 s with MaxText installed (a ground-truth child, two configs)
    "tests/explorer/advisor/test_maxtext_space.py",  # ~30 s with MaxText installed (stage 1 over ten MaxText configs); skips without
)
BROWSER_FILES = (
    "tests/browser/test_journeys.py",  # ~63 s
    "tests/browser/test_share.py",  # ~46 s
    "tests/browser/test_layout.py",  # ~42 s
    "tests/browser/test_navigation.py",  # ~40 s
    "tests/browser/test_explicit.py",  # ~40 s
    "tests/browser/test_screens.py",  # ~38 s
    "tests/browser/test_gpu_target.py",  # ~35 s
    "tests/browser/test_target.py",  # ~30 s
    "tests/browser/test_advisor.py",  # ~25 s
    "tests/browser/test_arrays.py",  # ~20 s
    "tests/browser/test_target_names.py",  # ~70 s on a loaded machine (three compiles: v5e:4x4 twice, h100:3x8)
)
FILE_ORDER = tuple(f for pair in itertools.zip_longest(CPU_FILES, BROWSER_FILES) for f in pair if f)  # none dropped


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return FILE_ORDER.index(path) if path in FILE_ORDER else len(FILE_ORDER)

    items.sort(key=rank)  # stable: within a file, and among the other files, the collection's order
