"""``core.db.prepared_cursor``: the writers' cursor behaves like Django's on either database —
statements logged when queries are captured, execute wrappers run, errors translated, and on
SQLite the ``%s`` → ``?`` texts converted once."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from django.test.utils import CaptureQueriesContext
from psycopg import adapters
from psycopg.pq import Format

from core import db as core_db
from core.db import prepared_cursor

pytestmark = pytest.mark.django_db


def test_prepared_cursor_statements_are_logged_when_captured() -> None:
    with CaptureQueriesContext(connection) as captured, prepared_cursor() as cursor:
        cursor.execute("SELECT %s, '100%%'", ["x"])
        assert cursor.fetchone() == ("x", "100%")
    assert len(captured.captured_queries) == 1


def test_prepared_cursor_runs_execute_wrappers() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    sql = "INSERT INTO inbox_scopepause (scope, paused, reason, changed_by, changed_at) "
    sql += "VALUES (%s, %s, '', 'x', CURRENT_TIMESTAMP)"
    with connection.execute_wrapper(wrapper), prepared_cursor() as cursor:
        cursor.execute("SELECT %s", [1])
        cursor.executemany(sql, [["a", True], ["b", False]])
    assert seen == ["SELECT %s", sql]


def test_prepared_cursor_translates_errors() -> None:
    with pytest.raises(IntegrityError), transaction.atomic(), prepared_cursor() as cursor:
        # The same primary key twice: the driver's error comes out as Django's.
        cursor.execute(
            "INSERT INTO inbox_scopepause (scope, paused, reason, changed_by, changed_at) "
            "VALUES (%s, %s, '', 'x', CURRENT_TIMESTAMP)",
            ["dup", True],
        )
        cursor.execute(
            "INSERT INTO inbox_scopepause (scope, paused, reason, changed_by, changed_at) "
            "VALUES (%s, %s, '', 'x', CURRENT_TIMESTAMP)",
            ["dup", True],
        )


@pytest.mark.sqlite
def test_sqlite_texts_converted_once_and_bounded(monkeypatch) -> None:
    monkeypatch.setattr(core_db, "_QMARK_TEXTS", {})
    monkeypatch.setattr(core_db, "_QMARK_TEXTS_MAX", 3)
    with prepared_cursor() as cursor:
        for n in range(2):
            cursor.execute("SELECT %s + %s", [n, 1])
            assert cursor.fetchone() == (n + 1,)
    assert core_db._QMARK_TEXTS == {"SELECT %s + %s": "SELECT ? + ?"}
    with prepared_cursor() as cursor:
        for n in range(5):
            cursor.execute(f"SELECT %s + {n}", [n])
            assert cursor.fetchone() == (2 * n,)
    assert 1 <= len(core_db._QMARK_TEXTS) <= 3


def _timestamps(cursor) -> tuple:
    cursor.execute(
        "SELECT %s::timestamptz, NULL::timestamptz", ["2026-12-03 10:11:12.345678+01:00"]
    )
    return cursor.fetchone()


@pytest.mark.postgresql
def test_prepared_cursor_times_are_djangos() -> None:
    """Read by psycopg's own loader (the session is in Django's time zone), a timestamp comes
    back as Django's cursor gives it: the same instant, aware, in Django's zone."""
    with connection.cursor() as cursor:
        expected = _timestamps(cursor)
    with prepared_cursor() as cursor:
        got = _timestamps(cursor)
        loader = cursor.cursor.adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT)
    # Not Django's Python wrapper around it (a call per value).
    assert not issubclass(loader, BaseTzLoader)
    assert got == expected
    assert got[0].tzinfo == expected[0].tzinfo == connection.timezone
    assert got[0].isoformat() == "2026-12-03T09:11:12.345678+00:00"


@pytest.mark.postgresql
def test_prepared_cursor_times_when_the_session_zone_differs() -> None:
    """A session put in another time zone by hand: psycopg's loader would answer in that
    zone, so the cursor keeps Django's loader and reads exactly what Django's cursors read."""
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
        expected = _timestamps(cursor)
    try:
        connection._console_prepared_cursor = None  # made anew for this session's zone
        with prepared_cursor() as cursor:
            got = _timestamps(cursor)
        assert got == expected
        assert got[0].tzinfo == connection.timezone
        assert got[0].utcoffset() == expected[0].utcoffset()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
        connection._console_prepared_cursor = None
