"""Tests of ``explorer/reading/``: ``reading/<module>.py`` is tested in ``tests/explorer/reading/test_<module>.py``."""
