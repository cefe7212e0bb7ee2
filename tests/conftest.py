"""Fixtures shared by the tests (the devices are configured in the top-level conftest.py)."""

import copy

import pytest

from explorer.layout import SEED_LAYOUT


@pytest.fixture
def seed_dict():
    """A fresh copy of the Flax guide's layout in file form, safe to mutate."""
    return copy.deepcopy(SEED_LAYOUT)
