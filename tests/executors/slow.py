"""Handlers used by executor tests (see ``slow_settings``).

``slow_handler`` records that it started (``SLOW_HANDLER_MARKER``), then sleeps
``SLOW_HANDLER_SECONDS`` or, with ``SLOW_HANDLER_GATE``, waits until that file exists.
"""

from __future__ import annotations

import os
import time

from inbox.handlers import HandlerResult


def slow_handler(job) -> HandlerResult:
    marker = os.environ.get("SLOW_HANDLER_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(job.job_id + "\n")
    gate = os.environ.get("SLOW_HANDLER_GATE")
    if gate:
        # Hold the job until the test opens the gate (never longer than a minute).
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(float(os.environ.get("SLOW_HANDLER_SECONDS", "0.3")))
    return HandlerResult("OK", {"slept": True})


def boom_handler(job) -> HandlerResult:
    raise RuntimeError(f"boom on {job.job_id}")
