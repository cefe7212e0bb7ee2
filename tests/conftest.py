"""Fixtures shared by the tests (the devices are configured in the top-level conftest.py)."""

import copy

import pytest

from explorer import caches
from explorer.layout import SEED_LAYOUT


@pytest.fixture
def seed_dict():
    """A fresh copy of the Flax guide's layout in file form, safe to mutate."""
    return copy.deepcopy(SEED_LAYOUT)


@pytest.fixture
def cleared():
    """Every cache in memory cleared first (``explorer.caches.clear``): the test starts as a new process would."""
    caches.clear()


# The longest files first: pytest-xdist's loadfile hands whole files to its two workers in collection order, so a long
# file collected last runs alone at the end while the other worker idles (the ground truth's was about a minute).
LONG_FILES_FIRST = (
    "tests/test_ground_truth.py",
    "tests/explorer/test_advisor_models.py",
    "tests/explorer/test_gpu_targets.py",
    "tests/explorer/test_advisor.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return LONG_FILES_FIRST.index(path) if path in LONG_FILES_FIRST else len(LONG_FILES_FIRST)

    items.sort(key=rank)  # stable: within a file, and among the other files, the collection's order
