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
