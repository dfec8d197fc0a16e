"""Settings for executor tests that need a slow job type (scope ``slow``).

``SLOW_NOOP`` sleeps ``SLOW_HANDLER_SECONDS`` and appends its job id to ``SLOW_HANDLER_MARKER``
when it starts, so a test can act while a job is in hand. ``TEST_SQLITE_BUSY_MS`` shortens
SQLite's busy timeout so a test can make the database unavailable to the worker.
"""

import os

from config.settings import *  # noqa: F403
from config.settings import DATABASES

INBOX_JOB_TYPES = {
    "SLOW_NOOP": {
        "scope": "slow",
        "idempotent": True,
        "handler": "tests.executors.slow.slow_handler",
    },
}

_busy_ms = os.environ.get("TEST_SQLITE_BUSY_MS")
if _busy_ms and DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    _options = DATABASES["default"]["OPTIONS"]
    _options["timeout"] = int(_busy_ms) / 1000
    _options["init_command"] = _options["init_command"].replace(
        "PRAGMA busy_timeout=30000", f"PRAGMA busy_timeout={int(_busy_ms)}"
    )
