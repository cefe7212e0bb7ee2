"""Tests of ``explorer/hlo/``: one file per module."""
