"""Tests of ``explorer/sharing/``: one file per module."""
