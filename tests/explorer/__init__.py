"""Tests of the core, one file per module: ``explorer/<module>.py`` is tested in ``tests/explorer/test_<module>.py``."""
