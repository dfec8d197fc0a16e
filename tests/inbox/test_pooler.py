"""The pooler's errors explained, and the two detections behind ``inbox.E013`` / ``inbox.W014``.

The detections run against the suite's PostgreSQL reached directly and through a real PgBouncer
in transaction-pooling mode (the ``pgbouncer`` fixture); the real-process side (``manage.py
check``, a worker, a command) is tests/executors/test_pooler_processes.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, OperationalError, ProgrammingError
from psycopg import errors as pg_errors

from inbox.checks import check_pooler_setting
from inbox.errors import ConfigurationError
from inbox.pooler import explain_pooler_error, reached_directly, transaction_pooled


def _django_error(driver_error: Exception, kind: type[Exception] = ProgrammingError) -> Exception:
    """``driver_error`` as Django raises it: its own class, the driver's error as the cause."""
    try:
        try:
            raise driver_error
        except Exception as exc:
            raise kind(*exc.args) from exc
    except Exception as wrapped:
        return wrapped


# --- explain_pooler_error -------------------------------------------------------------------


@pytest.mark.parametrize(
    "driver_error",
    [
        pg_errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist'),
        pg_errors.DuplicatePreparedStatement('prepared statement "_pg3_3" already exists'),
        pg_errors.InvalidCursorName('cursor "_django_curs_1_sync_2" does not exist'),
        psycopg.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 6432 failed: '
            "FATAL:  unsupported startup parameter: options"
        ),
    ],
    ids=["statement-missing", "statement-exists", "cursor-missing", "startup-refused"],
)
def test_explain_pooler_error_session_state_lost_names_the_setting_in_one_line(
    settings, driver_error
):
    settings.DATABASE_POOLER = ""
    explained = explain_pooler_error(_django_error(driver_error))
    assert isinstance(explained, ConfigurationError)
    text = str(explained)
    assert "\n" not in text
    assert "DATABASE_POOLER is not set: set DATABASE_POOLER=pgbouncer" in text
    assert " ".join(str(driver_error).split()) in text  # what the server said, kept


def test_explain_pooler_error_keeps_the_first_line_of_a_long_error(settings):
    settings.DATABASE_POOLER = ""
    error = psycopg.OperationalError(
        "connection failed: FATAL:  unsupported startup parameter: options\n"
        "Multiple connection attempts failed. All failures were:\n- host: '127.0.0.1'"
    )
    text = str(explain_pooler_error(_django_error(error, OperationalError)))
    assert "\n" not in text
    assert text.endswith(
        "(the server said: connection failed: FATAL: unsupported startup parameter: options)"
    )


def test_explain_pooler_error_driver_error_itself_explained(settings):
    settings.DATABASE_POOLER = ""
    error = pg_errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist')
    assert "DATABASE_POOLER=pgbouncer" in str(explain_pooler_error(error))


def test_explain_pooler_error_with_the_setting_on_leaves_the_error_alone(settings):
    settings.DATABASE_POOLER = "pgbouncer"
    error = pg_errors.InvalidSqlStatementName('prepared statement "_pg3_0" does not exist')
    assert explain_pooler_error(_django_error(error)) is None


@pytest.mark.parametrize(
    ("driver_error", "kind"),
    [
        (pg_errors.UniqueViolation("duplicate key value"), IntegrityError),
        (pg_errors.UndefinedTable('relation "inbox_job" does not exist'), ProgrammingError),
        (pg_errors.InvalidSqlStatementName('portal "x" does not exist'), ProgrammingError),
        (
            pg_errors.InvalidSqlStatementName('prepared statement "mine" does not exist'),
            ProgrammingError,
        ),
        (pg_errors.InvalidCursorName('cursor "mine" does not exist'), ProgrammingError),
        (psycopg.OperationalError("server closed the connection unexpectedly"), OperationalError),
        (ValueError("prepared statement"), ValueError),
    ],
    ids=[
        "unique",
        "no-table",
        "not-a-statement",
        "not-ours-statement",
        "not-djangos-cursor",
        "dropped",
        "not-a-database-error",
    ],
)
def test_explain_pooler_error_other_errors_not_explained(settings, driver_error, kind):
    settings.DATABASE_POOLER = ""
    assert explain_pooler_error(_django_error(driver_error, kind)) is None


# --- the checks without PostgreSQL ----------------------------------------------------------


@pytest.mark.sqlite
@pytest.mark.django_db
@pytest.mark.parametrize("pooler", ["", "pgbouncer"])
def test_pooler_check_on_sqlite_reports_nothing(settings, pooler):
    settings.DATABASE_POOLER = pooler
    assert check_pooler_setting(databases=[DEFAULT_DB_ALIAS]) == []


def test_pooler_check_without_the_database_reports_nothing(settings):
    settings.DATABASE_POOLER = "pgbouncer"
    assert check_pooler_setting(databases=None) == []


# --- against a real PgBouncer (PostgreSQL pass) -----------------------------------------------


def _url(port: int | None = None) -> str:
    """The suite's server's maintenance database (``postgres``: PgBouncer's idle server
    connections there never keep a test database from being dropped); through ``port``
    (PgBouncer) when given."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    host = f"{parts.username or 'postgres'}@127.0.0.1:{port or parts.port or 5432}"
    return urlunsplit((parts.scheme, host, "/postgres", "", ""))


def _connector(url: str) -> Callable[[], Any]:
    return lambda: psycopg.connect(url, autocommit=True)


@pytest.fixture
def opened() -> Iterator[list[psycopg.Connection]]:
    conns: list[psycopg.Connection] = []
    yield conns
    for conn in conns:
        conn.close()


@pytest.mark.postgresql
def test_transaction_pooled_through_pgbouncer_detected(pgbouncer):
    assert transaction_pooled(_connector(_url(pgbouncer))) is True


@pytest.mark.postgresql
def test_transaction_pooled_direct_connection_not_detected():
    assert transaction_pooled(_connector(_url()), rounds=10) is False


@pytest.mark.postgresql
def test_reached_directly_tells_direct_from_pgbouncer(pgbouncer, opened):
    direct = psycopg.connect(_url(), autocommit=True)
    bounced = psycopg.connect(_url(pgbouncer), autocommit=True)
    opened.extend([direct, bounced])
    assert reached_directly(direct) is True
    assert reached_directly(bounced) is False


@pytest.mark.postgresql
@pytest.mark.django_db
def test_pooler_check_direct_connection_with_the_setting_warns(settings):
    settings.DATABASE_POOLER = "pgbouncer"
    found = check_pooler_setting(databases=[DEFAULT_DB_ALIAS])
    assert [m.id for m in found] == ["inbox.W014"]
    assert "unset DATABASE_POOLER" in found[0].msg


@pytest.mark.postgresql
@pytest.mark.django_db
def test_pooler_check_direct_connection_without_the_setting_clean(settings):
    settings.DATABASE_POOLER = ""
    assert check_pooler_setting(databases=[DEFAULT_DB_ALIAS]) == []


def _lost_statement(url: str, opened: list[psycopg.Connection]) -> psycopg.Error:
    """A real "prepared statement" error through a transaction pooler: one client prepares a
    statement on a backend, a second client holds that backend in a transaction, the first
    runs its statement again and lands on a backend that never saw it (or one where another
    client's statement of that name already lives)."""
    for _ in range(5):
        first = psycopg.connect(url, autocommit=True)
        holder = psycopg.connect(url, autocommit=True)
        opened.extend([first, holder])
        try:
            first.execute("SELECT 1", prepare=True)
            holder.execute("BEGIN")
            holder.execute("SELECT 1")  # the backend freed last: the one first prepared on
            first.execute("SELECT 1", prepare=True)
        except (pg_errors.InvalidSqlStatementName, pg_errors.DuplicatePreparedStatement) as exc:
            return exc
        finally:
            holder.execute("ROLLBACK")
    raise AssertionError("five tries through PgBouncer and the prepared statement never failed")


@pytest.mark.postgresql
def test_explain_pooler_error_real_lost_prepared_statement_explained(settings, pgbouncer, opened):
    settings.DATABASE_POOLER = ""
    error = _lost_statement(_url(pgbouncer), opened)
    explained = explain_pooler_error(_django_error(error))
    assert explained is not None
    assert "prepared statement" in str(explained)
    assert "set DATABASE_POOLER=pgbouncer" in str(explained)


@pytest.mark.postgresql
def test_a_worker_outage_ends_on_a_lost_statement_instead_of_retrying_it(
    settings, pgbouncer, opened
):
    """The worker loop's outage rule: a lost prepared statement is no outage, the same happens
    on every retry, so the worker stops with the one line naming the setting."""
    from inbox.outage import Outage

    settings.DATABASE_POOLER = ""
    error = _django_error(_lost_statement(_url(pgbouncer), opened))
    with pytest.raises(ConfigurationError, match="set DATABASE_POOLER=pgbouncer"):
        Outage("w-pooler").failed(error, doing="working")
