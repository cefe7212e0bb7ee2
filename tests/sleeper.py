"""A child for the process tests (``python -m tests.sleeper SECONDS [EXIT] [VARIABLE]``): says where it runs on stdout
(its folder, ``tempfile``'s folder, ``VARIABLE``'s value), "err" on stderr, sleeps ``SECONDS`` and exits with ``EXIT``."""

import os
import sys
import tempfile
import time

if __name__ == "__main__":
    seconds, code, variable = float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0, sys.argv[3] if len(sys.argv) > 3 else ""
    print(os.getcwd(), tempfile.gettempdir(), os.environ.get(variable, "-") if variable else "-", flush=True)
    print("err", file=sys.stderr, flush=True)
    time.sleep(seconds)
    sys.exit(code)
