# Sourced by app.sh and test.sh: a virtual environment in .venv with the pinned requirements.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "${REQUIREMENTS:-requirements.txt}"
