"""SQLite transactions as the writers rely on them: an ``atomic()`` block takes SQLite's
write lock up front (IMMEDIATE), commits to disk, translates the driver's errors, and is seen
by the query log and execute wrappers."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.test.utils import CaptureQueriesContext

from inbox.models import ScopePause

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


def _other() -> sqlite3.Connection:
    """A second connection to the same file, as another process would open it."""
    other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0, isolation_level=None)
    other.execute("PRAGMA busy_timeout=0")
    return other


def _pause(scope: str) -> None:
    ScopePause.objects.create(scope=scope, paused=True, reason="", changed_by="t")


def test_the_project_runs_on_the_lean_subclass_of_djangos_sqlite_backend() -> None:
    from django.db.backends.sqlite3.base import DatabaseWrapper

    from core.db import LeanSQLiteDatabaseWrapper

    assert type(connections[DEFAULT_DB_ALIAS]) is LeanSQLiteDatabaseWrapper
    assert issubclass(LeanSQLiteDatabaseWrapper, DatabaseWrapper)
    assert connection.vendor == "sqlite"


def test_an_atomic_block_holds_the_write_lock_from_its_start_and_commits() -> None:
    assert not connection.queries_logged  # a worker's path: nothing logged
    other = _other()
    try:
        with transaction.atomic():
            # Before any write: IMMEDIATE already holds SQLite's write lock.
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
            _pause("lean")
            assert other.execute("SELECT count(*) FROM inbox_scopepause").fetchone() == (0,)
        assert other.execute("SELECT scope FROM inbox_scopepause").fetchall() == [("lean",)]
        other.execute("BEGIN IMMEDIATE")  # released at the commit
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_a_commit_is_on_disk_before_autocommit_returns() -> None:
    """``atomic()`` turns autocommit back on after its commit, and the driver commits any open
    transaction then: only a commit made with autocommit still off shows the commit itself."""
    other = _other()
    transaction.set_autocommit(False)
    try:
        _pause("manual")
        connection.commit()
        assert other.execute("SELECT scope FROM inbox_scopepause").fetchall() == [("manual",)]
    finally:
        transaction.set_autocommit(True)
        other.close()


def test_a_refused_begin_comes_out_as_djangos_error_and_leaves_no_transaction() -> None:
    connection.ensure_connection()
    raw = connection.connection
    (busy_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
    other = _other()
    other.execute("BEGIN IMMEDIATE")
    try:
        raw.execute("PRAGMA busy_timeout=50")
        with pytest.raises(OperationalError, match="locked"), transaction.atomic():
            pytest.fail("the block ran without the write lock")
        assert connection.get_autocommit()
        assert not connection.in_atomic_block
    finally:
        other.execute("ROLLBACK")
        other.close()
        raw.execute(f"PRAGMA busy_timeout={busy_ms}")
    with transaction.atomic():  # the connection is usable again
        _pause("after")
    assert ScopePause.objects.filter(scope="after").exists()


def test_a_rolled_back_block_writes_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        _pause("gone")
        raise RuntimeError("stop")
    assert not ScopePause.objects.filter(scope="gone").exists()


def test_on_commit_hooks_run_after_the_commit() -> None:
    ran: list[str] = []
    with transaction.atomic():
        _pause("hooked")
        transaction.on_commit(lambda: ran.append("after"))
        assert ran == []
    assert ran == ["after"]


def test_logged_queries_see_begin_and_commit_as_with_django() -> None:
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        _pause("logged")
    sql = [q["sql"] for q in captured.captured_queries]
    assert sql[0] == "BEGIN IMMEDIATE"
    assert sql[-1] == "COMMIT"


def test_execute_wrappers_see_the_begin() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), transaction.atomic():
        _pause("wrapped")
    assert seen[0] == "BEGIN IMMEDIATE"


def test_the_connection_is_still_refused_in_another_thread() -> None:
    connection.ensure_connection()
    # Reach the wrapper itself: in a new thread the proxy would hand out that thread's own.
    db = connections[DEFAULT_DB_ALIAS]
    caught: list[BaseException] = []

    def use() -> None:
        try:
            db._start_transaction_under_autocommit()
        except BaseException as exc:  # handed back to the test's thread
            caught.append(exc)

    thread = threading.Thread(target=use)
    thread.start()
    thread.join(timeout=10)
    assert len(caught) == 1 and isinstance(caught[0], DatabaseError)
    assert "same thread" in str(caught[0])
