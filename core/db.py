"""Row locks and bounded waits: the project's one load-and-lock helper and its timeouts.

PostgreSQL takes ``FOR UPDATE`` row locks; SQLite has none (``select_for_update`` is a no-op
there) and relies on its IMMEDIATE transactions, which hold the database's write lock from the
first statement. Either way the guarded UPDATE that follows re-checks every condition.

No wait is unbounded (a worker frozen inside a transaction must not freeze anyone else): every
PostgreSQL session runs with ``lock_timeout``, ``statement_timeout`` and
``idle_in_transaction_session_timeout`` (settings ``DB_*``). Directly connected they are
connection options; behind PgBouncer in transaction-pooling mode
(``DATABASE_POOLER=pgbouncer``) a server connection is shared, so they are set with
``SET LOCAL`` at the start of every transaction instead (``install_session_settings``).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections
from django.db.backends.signals import connection_created
from django.db.backends.sqlite3 import base as sqlite_base
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX, SQLiteCursorWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Model, QuerySet
from django.db.models.base import ModelState
from psycopg.pq import TransactionStatus

from core.errors import Busy

# SQLSTATE 55P03: a lock could not be had within lock_timeout (or NOWAIT).
LOCK_NOT_AVAILABLE = "55P03"


def locked[M: Model](qs: QuerySet[M], *, skip_locked: bool = False) -> QuerySet[M]:
    """``qs`` locking its rows until the end of the transaction (PostgreSQL); with
    ``skip_locked``, rows another transaction holds right now are left out instead of waited on."""
    if connection.vendor == "postgresql":
        return qs.select_for_update(skip_locked=skip_locked)
    return qs


def is_lock_timeout(exc: BaseException) -> bool:
    """Did PostgreSQL give up waiting for a row lock (``lock_timeout``)?"""
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) == LOCK_NOT_AVAILABLE


@contextlib.contextmanager
def bounded(what: str) -> Iterator[None]:
    """Turn a lock wait that hit ``lock_timeout`` into ``Busy``: nothing was written (the
    transaction or savepoint around the wait rolls back) and the caller may try again."""
    try:
        yield
    except OperationalError as exc:
        if is_lock_timeout(exc):
            raise Busy(
                f"{what}: a worker holds it right now (locked for more than "
                f"{settings.DB_LOCK_TIMEOUT_MS / 1000:g} s); nothing was changed, try again"
            ) from exc
        raise


def _set_local_timeouts(execute, sql, params, many, context):
    """PgBouncer mode: open every transaction with SET LOCAL of the session timeouts."""
    conn = context["connection"]
    raw = conn.connection
    if not conn.get_autocommit() and raw is not None:
        if raw.info.transaction_status == TransactionStatus.IDLE:
            values = settings.DB_SESSION_TIMEOUTS_MS.items()
            # Wrappers run outside Django's error translation: without it a dropped session
            # surfaces as a raw psycopg error that no worker's database-error backoff catches.
            with conn.wrap_database_errors:
                raw.execute("; ".join(f"SET LOCAL {k} = {int(v)}" for k, v in values))
    return execute(sql, params, many, context)


def _on_connect(sender, connection, **kwargs) -> None:
    if connection.vendor == "postgresql" and settings.DATABASE_POOLER == "pgbouncer":
        if _set_local_timeouts not in connection.execute_wrappers:
            connection.execute_wrappers.append(_set_local_timeouts)


def install_session_settings() -> None:
    """Hook the PgBouncer-mode timeouts onto every new connection (called once at start)."""
    connection_created.connect(_on_connect, dispatch_uid="core.db.session_settings")


def prepared_cursor():  # -> django.db.backends.utils.CursorWrapper
    """A cursor for the statements a worker repeats thousands of times (the job writer's
    UPDATE, the audit INSERT, the claim): on PostgreSQL it binds parameters on the server, so
    psycopg prepares a statement text once per connection after ``DB_PREPARE_THRESHOLD``
    executions and PostgreSQL stops planning it per call. Django's own cursors bind on the
    client (its ORM SQL is not always preparable), so nothing else changes. Behind PgBouncer
    (transaction pooling) the threshold is off and this is server-side binding without
    prepared statements. On SQLite it is Django's cursor with the statement texts converted
    once and, when no query is logged, the driver called directly (``_sqlite_cursor``).

    Only for hand-written SQL whose parameters all carry their types (casts where PostgreSQL
    could not infer one); it goes through Django's execute wrappers, error translation and
    query log like any cursor. The driver's cursor is kept with the connection and reused
    (leaving ``with`` does not close it): making one per statement cost more than a short
    UPDATE.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "sqlite":
        return _sqlite_cursor(db)
    if db.vendor != "postgresql":
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = getattr(db, "_console_prepared_cursor", None)
    if raw is None or raw.closed or raw.connection is not db.connection:
        from django.db.backends.postgresql.base import ServerBindingCursor
        from django.db.backends.postgresql.psycopg_any import register_tzloader
        from psycopg import adapters
        from psycopg.pq import Format

        with db.wrap_database_errors:
            raw = ServerBindingCursor(db.connection)
            oid = adapters.types["timestamptz"].oid
            if db.connection.info.timezone == db.timezone:
                # The session's time zone is Django's (UTC): psycopg's own loader (C) already
                # gives the aware datetimes Django's wrapper would; the wrapper's Python call
                # per value was a tenth of an executor's Python (five timestamps a row).
                raw.adapters.register_loader(oid, adapters.get_loader(oid, Format.TEXT))
            elif db.timezone != db.connection.adapters.get_loader(oid, Format.TEXT).timezone:
                register_tzloader(db.timezone, raw)
        db._console_prepared_cursor = raw
    return _KeptDebugCursor(raw, db) if db.queries_logged else _KeptCursor(raw, db)


class _KeptCursor(CursorWrapper):
    """Leaving ``with`` keeps the driver's cursor open for the next statement."""

    def __exit__(self, *exc_info: object) -> None:
        return None


class _KeptDebugCursor(CursorDebugWrapper):
    def __exit__(self, *exc_info: object) -> None:
        return None


class _QmarkCache(SQLiteCursorWrapper):
    """Django's SQLite cursor, converting each ``%s`` statement text once: the writers' texts
    are a small set repeated for every job. Mapping parameters keep Django's own conversion."""

    def convert_query(self, query, *, param_names=None):
        if param_names is not None:
            return super().convert_query(query, param_names=param_names)
        return _qmark(query)


def _qmark(query: str) -> str:
    """``query``'s ``%s`` placeholders as ``?`` (and ``%%`` as ``%``), as Django converts
    them, looked up after the first time."""
    converted = _QMARK_TEXTS.get(query)
    if converted is None:
        if len(_QMARK_TEXTS) >= _QMARK_TEXTS_MAX:
            _QMARK_TEXTS.clear()
        converted = _QMARK_TEXTS[query] = FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")
    return converted


# Converted statement texts (hand-written, a few dozen shapes); emptied if it ever fills up.
_QMARK_TEXTS: dict[str, str] = {}
_QMARK_TEXTS_MAX = 512
# The driver's own methods, called on a _QmarkCache past its Python overrides.
_DRIVER_EXECUTE = sqlite3.Cursor.execute
_DRIVER_EXECUTEMANY = sqlite3.Cursor.executemany


class _LeanSQLiteCursor(CursorWrapper):
    """SQLite with queries not logged: a statement with positional parameters goes straight
    to the driver's method with its converted text, inside Django's error translation and
    broken-transaction check, unless an execute wrapper is installed. Django's layers around
    it (the wrapper chain, its SQLite cursor's Python ``execute``, ``executemany``'s peek at
    the parameters) were about a twentieth of a single-job enqueue. Anything else (no or
    named parameters, a wrapper) takes Django's own path."""

    def execute(self, sql, params=None):
        db = self.db
        if params is None or isinstance(params, Mapping) or db.execute_wrappers:
            return super().execute(sql, params)
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            return _DRIVER_EXECUTE(self.cursor, _qmark(sql), params)

    def executemany(self, sql, param_list):
        db = self.db
        rows = param_list if isinstance(param_list, list) else list(param_list)
        if (rows and isinstance(rows[0], Mapping)) or db.execute_wrappers:
            return super().executemany(sql, rows)
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            return _DRIVER_EXECUTEMANY(self.cursor, _qmark(sql), rows)


def _sqlite_cursor(db):  # -> django.db.backends.utils.CursorWrapper
    """``db.cursor()`` on SQLite (health check, connect, thread check, the debug wrapper when
    queries are logged) with the caching cursor class, lean when nothing is logged; execute
    wrappers, error translation and the query log work as for any cursor."""
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    with db.wrap_database_errors:
        raw = db.connection.cursor(factory=_QmarkCache)
    return CursorDebugWrapper(raw, db) if db.queries_logged else _LeanSQLiteCursor(raw, db)


class LeanSQLiteDatabaseWrapper(sqlite_base.DatabaseWrapper):
    """Django's SQLite connection, with ``BEGIN`` and ``COMMIT`` sent straight to the driver.

    Every job step on SQLite is one ``atomic()`` block, and a single-job enqueue is one block
    per job. Django sends its ``BEGIN IMMEDIATE`` through a new cursor and the whole wrapper
    chain, and wraps the ``COMMIT`` in a query-log context; going around both is about a
    twentieth of a single-job enqueue's CPU. Both still run inside Django's error translation
    (and the thread check for the ``BEGIN``). When queries are logged or an execute wrapper is
    installed, Django's own path runs, so the query log and the wrappers see what they always
    saw; ``atomic()``, savepoints, autocommit and on-commit hooks are Django's, unchanged.
    ``core/backends/sqlite3`` names this class as the project's SQLite engine."""

    def _start_transaction_under_autocommit(self) -> None:
        if self.queries_logged or self.execute_wrappers:
            return super()._start_transaction_under_autocommit()
        begin = "BEGIN" if self.transaction_mode is None else f"BEGIN {self.transaction_mode}"
        self.validate_thread_sharing()
        with self.wrap_database_errors:
            self.connection.execute(begin)
        return None

    def _commit(self) -> None:
        if self.connection is None or self.queries_logged:
            return super()._commit()
        with self.wrap_database_errors:
            return self.connection.commit()


def sqlite_read_one(db, sql: str) -> Any:  # db: a SQLite DatabaseWrapper
    """The single value of a parameterless one-row SELECT (the clock read every job step
    makes), on the driver's connection inside Django's error translation: Django's cursor
    layers cost several times the statement, about a tenth of a single-job enqueue. When
    queries are logged or an execute wrapper is installed it goes through ``db.cursor()``,
    so the log and the wrappers see it like any other statement."""
    if db.queries_logged or db.execute_wrappers:
        with db.cursor() as cursor:
            cursor.execute(sql)
            ((value,),) = cursor.fetchall()
        return value
    db.ensure_connection()
    db.validate_thread_sharing()
    with db.wrap_database_errors:
        ((value,),) = db.connection.execute(sql).fetchall()
    return value


# --- model instances ---------------------------------------------------------------------------


def shallow_copy[M: Model](instance: M) -> M:
    """A shallow copy of a model instance as read, kept while the original is updated in place:
    the instance's ``__dict__`` copied into a new one, without ``copy.copy``'s pickling
    protocol (a twentieth of its cost). The two share Django's per-instance state object, which
    neither changes afterwards. ``tests/test_django_contract.py`` holds it equal to
    ``copy.copy``."""
    clone = instance.__class__.__new__(instance.__class__)
    clone.__dict__ = instance.__dict__.copy()
    return clone


@functools.cache
def _defaults(model: type[Model]) -> dict[str, Any]:
    """What ``model()`` sets on an instance (every field's default), read once per process."""
    values = dict(model().__dict__)
    del values["_state"]
    return values


def new_unsaved[M: Model](model: type[M], **values: Any) -> M:
    """``model(**values)`` without ``Model.__init__``'s per-field work (a sixth of a batched
    enqueue's CPU): the defaults come from one ``model()`` made per process (immutable values
    only; a model with a mutable default must not use this), the instance unsaved as
    ``model()`` leaves it. ``tests/inbox/test_turn.py`` holds the two ways equal."""
    instance = model.__new__(model)
    instance.__dict__.update(_defaults(model))
    instance.__dict__.update(values)
    instance._state = ModelState()
    return instance


def stored_from_row[M: Model](
    model: type[M], attnames: Sequence[str], row: Sequence[Any], using: str = DEFAULT_DB_ALIAS
) -> M:
    """``model.from_db`` for a row with every concrete field in model order, without
    ``Model.__init__`` (a quarter of ``from_db``'s cost; the model has no deferred fields and
    no init-signal receivers). ``tests/inbox/test_turn.py`` holds the two ways equal."""
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, row, strict=True))
    state = instance._state = ModelState()
    state.adding = False
    state.db = using
    return instance


def is_new(instance: Model) -> bool:
    """True while an instance has not been stored (Django's own flag, as ``save()`` sets it)."""
    return instance._state.adding


def mark_saved(instance: Model, using: str = DEFAULT_DB_ALIAS) -> None:
    """Tell Django an instance the writer inserted with its own SQL is now stored (as
    ``save()`` would leave it): a later ``save()`` updates it, validation treats it as stored.
    """
    instance._state.adding = False
    instance._state.db = using


# --- SQLite's JSON probe ------------------------------------------------------------------------


def _supports_json_field_without_lock(features: Any) -> bool:
    with features.connection.cursor() as cursor:
        try:
            cursor.execute("""SELECT JSON('{"a": "b"}')""")
        except OperationalError:  # this SQLite build has no JSON functions
            return False
    return True


def declare_sqlite_json_probe() -> None:
    """Make SQLite's "does it have JSON?" probe lock-free (called once, from ``apps.ready``).

    Django's own probe (``DatabaseFeatures.supports_json_field``) runs its ``SELECT JSON(...)``
    inside ``atomic()``, which with IMMEDIATE transactions needs the write lock. While another
    process held it, the probe waited out the busy timeout and concluded "no JSON": every
    command then failed its system checks with ``fields.E180 SQLite does not support
    JSONFields`` instead of saying the database was locked, and a web process could compile
    JSON lookups for a database without JSON. The same SELECT in autocommit mode needs no
    lock, so the answer no longer depends on who holds it.
    """
    from django.db.backends.sqlite3.base import DatabaseWrapper

    features = DatabaseWrapper.features_class
    probe = functools.cached_property(_supports_json_field_without_lock)
    probe.__set_name__(features, "supports_json_field")
    features.supports_json_field = probe
