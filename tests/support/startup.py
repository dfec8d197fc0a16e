"""``manage.py check`` in a fresh process with extra environment: settings are read once per
process, so a setting that must refuse to start is tested this way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage_check(var_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``manage.py check`` with ``env`` added (development profile, ``var_dir`` as
    CONSOLE_VAR_DIR); stdout and stderr are captured as text."""
    full = {**os.environ, "CONSOLE_VAR_DIR": str(var_dir), **env}
    full.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set by conftest for Playwright only
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env=full,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
