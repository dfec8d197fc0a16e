"""``core.db.prepared_cursor``: the writers' cursor behaves like Django's on either database —
statements logged when queries are captured, execute wrappers run, errors translated, and on
SQLite the ``%s`` → ``?`` texts converted once."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from psycopg import adapters
from psycopg.pq import Format

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


_PAUSE = (
    "INSERT INTO inbox_scopepause (scope, paused, reason, changed_by, changed_at) "
    "VALUES (%s, %s, '', 'x', CURRENT_TIMESTAMP)"
)


def _paused() -> dict[str, bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT scope, paused FROM inbox_scopepause")
        return {scope: bool(paused) for scope, paused in cursor.fetchall()}


def test_prepared_cursor_runs_like_djangos_with_nothing_logged() -> None:
    """Nothing captured (the lean path on SQLite): literal percent signs, named and absent
    parameters, ``executemany`` over a generator, the row count."""
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s, '100%%'", ["x"])
        assert cursor.fetchone() == ("x", "100%")
        cursor.execute("SELECT %(a)s, %(b)s", {"a": 1, "b": "two"})
        assert cursor.fetchone() == (1, "two")
        cursor.execute("SELECT 7")
        assert cursor.fetchone() == (7,)
        cursor.executemany(_PAUSE, ([scope, scope == "a"] for scope in ("a", "b")))
        cursor.execute("UPDATE inbox_scopepause SET reason = %s WHERE scope <> %s", ["r", "z"])
        assert cursor.rowcount == 2
    assert _paused() == {"a": True, "b": False}


def test_prepared_cursor_runs_a_wrapper_installed_after_it_was_made() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s", [1])
        with connection.execute_wrapper(wrapper):
            cursor.execute("SELECT %s", [2])
            cursor.executemany(_PAUSE, [["w", True]])
        cursor.execute("SELECT %s", [3])
    assert seen == ["SELECT %s", _PAUSE]


def test_prepared_cursor_refuses_a_statement_in_a_broken_transaction() -> None:
    """In a transaction marked for rollback (an error escaped an inner block) the next
    statement is refused, as Django's cursor refuses it."""
    with transaction.atomic(), prepared_cursor() as cursor:
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            cursor.execute("SELECT %s", [1])
        with pytest.raises(TransactionManagementError):
            cursor.executemany(_PAUSE, [["other", True]])
    assert "other" not in _paused()


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
