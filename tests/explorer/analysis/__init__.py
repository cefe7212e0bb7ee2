"""Tests of ``explorer/analysis/``: one file per module."""
