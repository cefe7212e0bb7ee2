"""Tests of the advisor, one file per module: ``explorer/advisor/<module>.py`` in ``test_<module>.py``."""
