"""Tests of ``explorer/compile/``: one file per module."""
