"""Tests of ``explorer/hardware/``: one file per module."""
