"""Tests of ``explorer/ops/``: one file per module."""
