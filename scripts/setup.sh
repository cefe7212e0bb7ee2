# Sourced by app.sh and test.sh: a virtual environment in .venv with the pinned requirements.
# JAX 0.11+ and Flax 0.12.9+ need Python 3.12 or newer: the first suitable interpreter is used
# ($PYTHON if set, else python3.13, python3.12, python3, then pyenv's installs), or it stops and says how to get one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MIN_PYTHON="3.12"

python_ok() {  # runs, and is at least $MIN_PYTHON
  "$1" -c "import sys; sys.exit(0 if sys.version_info >= tuple(map(int, '$MIN_PYTHON'.split('.'))) else 1)" >/dev/null 2>&1
}

how_to_get_python() {
  cat >&2 <<MESSAGE
JAX 0.11+ and Flax 0.12.9+ need Python $MIN_PYTHON or newer. Install one, for example:
  pyenv install 3.12     (or: apt-get install python3.12 python3.12-venv, or python.org's installer)
then run this again, or point PYTHON at it: PYTHON=/path/to/python3.12 bash $0
MESSAGE
}

find_python() {
  if [ -n "${PYTHON:-}" ]; then
    if python_ok "$PYTHON"; then echo "$PYTHON"; return 0; fi
    echo "setup: PYTHON=$PYTHON is not Python $MIN_PYTHON or newer (or does not run)." >&2
    how_to_get_python
    return 1
  fi
  local candidate
  for candidate in python3.13 python3.12 python3 \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[3-9]*/bin/python \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
    if python_ok "$candidate"; then echo "$candidate"; return 0; fi
  done
  echo "setup: no Python $MIN_PYTHON or newer found (tried python3.13, python3.12, python3 and pyenv's installs)." >&2
  how_to_get_python
  return 1
}

if [ -x .venv/bin/python ] && ! python_ok .venv/bin/python; then
  echo "setup: .venv has Python older than $MIN_PYTHON; making it again" >&2
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  PYTHON_FOUND="$(find_python)"
  echo "setup: making a virtual environment in .venv with $PYTHON_FOUND"
  "$PYTHON_FOUND" -m venv .venv
fi
# Say what runs: a first install downloads JAX, libtpu and the CUDA plugin (~1 GB) and takes minutes, silently.
echo "setup: installing ${REQUIREMENTS:-requirements.txt} into .venv (JAX, libtpu, the CUDA plugin, Flax, Streamlit:" \
  "a few minutes the first time, seconds once installed)"
started=$SECONDS
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r "${REQUIREMENTS:-requirements.txt}"
echo "setup: installed in $((SECONDS - started)) s; byte-compiling the checkout"
# Byte-compile the checkout as pip does an installed package: every process then starts without compiling it
# (where PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile it again in every process).
.venv/bin/python -m compileall -q -x '/\.venv/|/tests/external/' explorer ui views app.py benchmarks >/dev/null
echo "setup: .venv is ready"
