"""Readings of global live regions shared by the operators of one web process.

Every operator's dashboard shows the same alerts, counts, runs, throughput and READY ages, and
each region polls on its own interval. Without sharing, 50 dashboards read the database 50
times per interval for the same answer. A region's reading (the data the template renders,
its version and when it was read) is kept in the process for ``CONSOLE_LIVE_CACHE`` × the
region's poll interval (half by default: 2.5 s for a region that polls every 5 s); a poll in
that window is answered from it:

- the operator's region shows this reading's version → 204, nothing rendered;
- the operator's region was read *after* this reading (its token carries the read time: a
  fresh full page, an action's answer, another web process) → 204 as well: what it shows is
  newer, and at most the window old, so a poll never moves an operator's view backwards;
- else the reading is rendered for this operator (permissions and the CSRF token are the
  request's own; only the data is shared).

After the window the next poll reads the database again. A full page load always reads afresh
(and refreshes the shared reading). So what an operator sees is at most one window older than
the database, and the database is read at most once per window per region and process,
however many operators watch. ``CONSOLE_LIVE_CACHE=0`` turns sharing off (every poll reads).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest

# Readings kept at most (regions × stores); a flood of made-up keys cannot grow the process.
MAX_READINGS = 256
# Wall-clock seconds: comparable between the web processes of one host (tests move it).
clock = time.time


@dataclass(frozen=True)
class Reading:
    """One read of a region: what the template renders, its version and when it was read."""

    context: dict[str, Any]
    version: str
    # clock() just before the database was read: the data is at least this new.
    stamp: float

    @property
    def token(self) -> str:
        return token(self.version, self.stamp)

    def for_render(self) -> dict[str, Any]:
        """The context, its ``now`` moved on by the reading's age (lease bars count from it)."""
        now = self.context.get("now")
        if not isinstance(now, dt.datetime):
            return self.context
        return {**self.context, "now": now + dt.timedelta(seconds=clock() - self.stamp)}


def token(version: str, stamp: float) -> str:
    """A region's ``data-v``: its version and its read time (ms), sent back by polls."""
    return f"{version}.{round(stamp * 1000)}"


def parse_token(value: str) -> tuple[str, float | None]:
    """(version, read time in seconds or None) from a poll's ``v``; anything else is a version
    that matches nothing and a time older than every reading."""
    version, _dot, stamp = value.partition(".")
    try:
        return version, int(stamp) / 1000 if stamp else None
    except (ValueError, OverflowError):  # not a number, or too many digits for a float
        return version, None


class SharedReadings:
    """The process's readings by key; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: dict[str, Reading] = {}

    def fresh(self, key: str, window: float) -> Reading | None:
        with self._lock:
            reading = self._readings.get(key)
        if reading is None or not 0 <= clock() - reading.stamp < window:
            return None
        return reading

    def keep(self, key: str, reading: Reading) -> None:
        """Keep ``reading`` unless a newer one is kept already."""
        with self._lock:
            kept = self._readings.get(key)
            if kept is not None and kept.stamp >= reading.stamp:
                return
            if kept is None and len(self._readings) >= MAX_READINGS:
                self._readings.clear()
            self._readings[key] = reading

    def clear(self) -> None:
        with self._lock:
            self._readings.clear()


SHARED = SharedReadings()


def window(every: float) -> float:
    """How long a reading of a region that polls every ``every`` seconds is shared."""
    return settings.CONSOLE_LIVE_CACHE * every


def read(key: str, reader: Callable[[], tuple[dict[str, Any], str]]) -> Reading:
    """Read the region afresh (``reader`` returns its context and version) and share it."""
    stamp = clock()
    context, version = reader()
    reading = Reading(context, version, stamp)
    SHARED.keep(key, reading)
    return reading


def poll(
    request: HttpRequest,
    key: str,
    every: float,
    reader: Callable[[], tuple[dict[str, Any], str]],
) -> Reading | None:
    """The reading a poll of region ``key`` renders, or None when the answer is 204."""
    sent_version, sent_stamp = parse_token(request.GET.get("v", ""))
    shared = SHARED.fresh(key, window(every))
    if shared is not None:
        if sent_version == shared.version or (
            sent_stamp is not None and sent_stamp >= shared.stamp
        ):
            return None
        return shared
    reading = read(key, reader)
    return None if sent_version == reading.version else reading
