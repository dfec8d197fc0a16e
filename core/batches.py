"""What every batched clean-up loop shares: the cut it deletes before, and its progress pace."""

from __future__ import annotations

import datetime as dt
import time

from core.clock import db_now


def prune_cut(older_than: dt.timedelta, batch: int, at: dt.datetime | None = None) -> dt.datetime:
    """The moment before which rows may go, on the database clock (never a host's clock, so a
    skewed host cannot delete what is still young); a batch under 1 is refused."""
    if batch < 1:
        raise ValueError(f"the batch must be at least 1, got {batch}")
    return db_now(at) - older_than


class Pace:
    """A long loop's clock: seconds since it started, and whether a progress line is due (at
    most one a second, so a fast loop does not drown its own output)."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self.started = self.last = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True
