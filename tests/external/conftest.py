"""The vendored models are imported by the tests, never collected: their docstrings are their authors', not doctests."""

collect_ignore_glob = ["*.py", "*/*.py"]
