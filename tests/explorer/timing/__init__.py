"""Tests of ``explorer/timing/``: one file per module."""
