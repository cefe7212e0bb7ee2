#!/usr/bin/env bash
# Install everything the tests need (pinned Python packages, the MaxText extra, Debian's chromium-headless-shell), lint, and
# run them all.
set -euo pipefail
REQUIREMENTS=requirements-dev.txt source "$(dirname "$0")/setup.sh"
# The MaxText extra, installed as docs/maxtext.md tells a user to (exactly its import path's packages, without their
# dependencies), so that the MaxText tests run too (tests/explorer/models/test_maxtext.py and the others that need it).
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-maxtext.txt
# The browser tests drive Debian's headless shell of Chromium (tests/browser/__init__.py says why not the whole browser).
if [ ! -x /usr/bin/chromium-headless-shell ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null
  fi
fi
# Lint and layout first (pyflakes and syntax errors, and ruff format's layout, configured in pyproject.toml): a
# finding stops the run with its file:line; `.venv/bin/ruff format .` fixes the layout.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Three workers, one test file each at a time (pytest-xdist's loadfile: a file's module fixtures, such as a
# browser test's server, stay in one process). The machine has two cores; a browser test spends much of its time
# waiting for the page, so a third worker fills them (fresh clones of one commit: tests 587 s with three, 676 s with
# two). The files go in tests/conftest.py's order (longest first, browser files beside CPU-bound ones), not xdist's
# (by number of tests).
exec .venv/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder "$@"
