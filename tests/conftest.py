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
# waits for the page are the other's compile time. The figures are each file's CPU seconds (its worker's and the child
# processes it waited for) in one run of the whole suite on this 2-core machine under other work (2026-11-29, three
# workers, the MaxText extra installed): a ranking, not times to expect. The other files follow in the collection's
# order.
CPU_FILES = (
    "tests/explorer/advisor/test_advisor_models.py",  # 180 s (measured alone, 178-202 over two runs)
    "tests/explorer/advisor/test_pipeline_search.py",  # 125 s (measured alone, 120-127 over two runs)
    "tests/test_ground_truth.py",  # 114 s
    "tests/explorer/hardware/test_gpu_targets.py",  # 83 s
    "tests/pages/test_compare.py",  # 82 s
    "tests/test_orphans.py",  # 81 s (measured alone: built-in 19, MaxText 62)
    "tests/explorer/advisor/test_advisor.py",  # 72 s
    "tests/explorer/predict/test_pipeline_bubble.py",  # 72 s
    "tests/test_at_once.py",  # 62 s (measured alone)
    "tests/explorer/compile/test_compile_pool.py",  # 56 s
    "tests/pages/test_app.py",  # 53 s
    "tests/explorer/models/test_pipeline.py",  # 52 s
    "tests/explorer/models/test_maxtext.py",  # 50 s
    "tests/pages/test_sessions.py",  # 44 s
    "tests/explorer/timing/test_timing.py",  # 42 s
    "tests/explorer/compile/test_xla_results.py",  # 42 s
    "tests/test_ground_truth_sources.py",  # 40 s
    "tests/explorer/predict/test_tpu_published.py",  # 38 s
    "tests/explorer/hardware/test_placement.py",  # 38 s
    "tests/explorer/test_main.py",  # 37 s
    "tests/explorer/analysis/test_presets.py",  # 37 s
    "tests/explorer/compile/test_xla_compile.py",  # 34 s
    "tests/explorer/reading/test_types.py",  # 34 s
    "tests/explorer/timing/test_pipeline_timing.py",  # 30 s
    "tests/explorer/timing/test_distributed.py",  # 29 s
    "tests/explorer/compile/test_multislice.py",  # 27 s
    "tests/explorer/predict/test_tpu_steps.py",  # 27 s
    "tests/test_install.py",  # 27 s (measured alone; 136 s in the suite's run counted other files' children reaped then)
    "tests/explorer/compile/test_cluster.py",  # 26 s
    "tests/explorer/timing/test_workers.py",  # 26 s
    "tests/explorer/advisor/test_maxtext_space.py",  # 25 s
    "tests/pages/test_advisor.py",  # 25 s
    "tests/pages/test_timing.py",  # 23 s
    "tests/explorer/ops/test_ops.py",  # 23 s
    "tests/explorer/compile/test_pipeline_sends.py",  # 22 s
    "tests/explorer/predict/test_tpu_kernels.py",  # 20 s
    "tests/explorer/compile/test_compiled.py",  # 19 s
    "tests/explorer/sharing/test_library.py",  # 17 s
    "tests/explorer/compile/test_target_compile.py",  # 16 s
    "tests/pages/test_arrays.py",  # 13 s
    "tests/explorer/reading/test_disk.py",  # 11 s
    "tests/test_fuzz.py",  # 11 s (measured alone; 87 s in the suite's run counted other files' children reaped then)
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
