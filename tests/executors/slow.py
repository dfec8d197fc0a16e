"""The SLOW_NOOP handler used by executor tests (see ``slow_settings``)."""

from __future__ import annotations

import os
import time

from inbox.handlers import HandlerResult


def slow_handler(job) -> HandlerResult:
    marker = os.environ.get("SLOW_HANDLER_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(job.job_id + "\n")
    time.sleep(float(os.environ.get("SLOW_HANDLER_SECONDS", "0.3")))
    return HandlerResult("OK", {"slept": True})


def boom_handler(job) -> HandlerResult:
    raise RuntimeError(f"boom on {job.job_id}")
