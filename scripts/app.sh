#!/usr/bin/env bash
# Install the app's requirements into .venv and start the dashboard on http://localhost:8501
set -euo pipefail
source "$(dirname "$0")/setup.sh"
# Bound to this machine only (127.0.0.1); pass --server.address to serve others.
echo "app: starting the dashboard (streamlit run app.py); it prints its address when it is up, Ctrl+C stops it"
exec .venv/bin/streamlit run app.py --server.address 127.0.0.1 "$@"
