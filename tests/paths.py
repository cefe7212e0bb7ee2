"""Where the tests find the checkout: its root, and the app AppTest and the browser tests run."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
