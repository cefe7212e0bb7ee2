"""Tests of ``explorer/predict/``: one file per module."""
