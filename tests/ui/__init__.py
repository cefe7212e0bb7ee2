"""Tests of the page helpers in ``ui/``: ``ui/<module>.py`` is tested in ``tests/ui/test_<module>.py``."""
