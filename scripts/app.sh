#!/usr/bin/env bash
# Install the app's requirements into .venv and start the dashboard on http://localhost:8501
set -euo pipefail
source "$(dirname "$0")/setup.sh"
exec .venv/bin/streamlit run app.py "$@"
