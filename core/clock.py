"""The one clock: the database's, never a worker's wall clock. Every lease, run and heartbeat
time comes from here, so hosts with skewed wall clocks agree; ``at=`` pins it in tests."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.utils.dateparse import parse_datetime

from core.db import sqlite_read_one


def db_now(at: dt.datetime | None = None) -> dt.datetime:
    """The database's current time (or ``at``)."""
    if at is not None:
        return at
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            # statement_timestamp(), not now(): now() is frozen at the transaction's start.
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    # SQLite's clock is the host's C library clock, shared by every process on the host.
    text = sqlite_read_one(connection, _SQLITE_NOW)
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


_SQLITE_NOW = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"


def parse_sqlite_datetime(value: str | dt.datetime) -> dt.datetime:
    """A timestamp SQLite returned as text, as an aware UTC datetime."""
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime from SQLite: {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
