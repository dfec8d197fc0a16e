"""What the fenced uses of Django's private parts rely on, checked in one place: if a Django
upgrade changes one of these, this file fails and names it (``docs/performance.md`` says what
each use buys and how to drop it)."""

from __future__ import annotations

import copy
import functools
import inspect

import django
import pytest
from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from core.db import is_new, mark_saved, shallow_copy
from inbox.models import Job
from tests.factories import make_job


def test_the_django_release_is_in_the_tested_range() -> None:
    """pyproject.toml pins Django to a range this file was last checked against."""
    assert (6, 1) <= django.VERSION[:2] < (6, 2)


def test_model_state_flags_are_where_the_writer_sets_them() -> None:
    """``is_new``/``mark_saved`` read and set ``Model._state.adding`` and ``.db``."""
    job = Job(job_id="contract-1")
    assert is_new(job) and job._state.db is None
    mark_saved(job)
    assert (job._state.adding, job._state.db) == (False, "default")


@pytest.mark.django_db
def test_mark_saved_leaves_an_instance_as_save_does() -> None:
    stored = make_job("noop", "READY")
    inserted = Job.objects.get(job_id=stored.job_id)
    fresh = Job(**{f.attname: getattr(inserted, f.attname) for f in Job._meta.concrete_fields})
    mark_saved(fresh)
    assert (fresh._state.adding, fresh._state.db) == (inserted._state.adding, inserted._state.db)


@pytest.mark.django_db
def test_shallow_copy_is_copy_copy() -> None:
    """``shallow_copy`` (no pickling protocol) must give what ``copy.copy`` gives: a model
    instance is its ``__dict__`` and nothing more."""
    job = Job.objects.get(job_id=make_job("noop", "READY").job_id)
    ours, theirs = shallow_copy(job), copy.copy(job)
    assert type(ours) is Job and ours is not job
    assert {k: v for k, v in vars(ours).items() if k not in ("_state", "_django_version")} == {
        k: v for k, v in vars(theirs).items() if k not in ("_state", "_django_version")
    }
    assert Job.__reduce__ is django.db.models.Model.__reduce__  # no state of its own to copy


def test_cursor_wrappers_take_a_driver_cursor_and_a_connection() -> None:
    """``prepared_cursor`` keeps the driver's cursor with the connection and wraps it in
    subclasses of Django's wrappers whose ``__exit__`` does not close it."""
    for wrapper in (CursorWrapper, CursorDebugWrapper):
        assert list(inspect.signature(wrapper.__init__).parameters)[1:3] == ["cursor", "db"]
        assert callable(wrapper.__exit__)


@pytest.mark.postgresql
def test_postgresql_server_binding_cursor_and_time_zone_loader_exist() -> None:
    from django.db.backends.postgresql.base import ServerBindingCursor
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg import Cursor

    assert issubclass(ServerBindingCursor, Cursor)
    assert list(inspect.signature(register_tzloader).parameters)[:2] == ["tz", "context"]
    assert connection.timezone is not None


def test_the_sqlite_json_probe_is_a_cached_property_of_the_features_class() -> None:
    """``declare_sqlite_json_probe`` replaces ``DatabaseFeatures.supports_json_field`` with a
    lock-free probe of the same kind: a cached property on the features class."""
    from django.db.backends.sqlite3.base import DatabaseWrapper

    probe = vars(DatabaseWrapper.features_class)["supports_json_field"]
    assert isinstance(probe, functools.cached_property)
    assert probe.func.__module__ == "core.db"


def test_sqlite_statement_texts_convert_as_djangos_own_cursor_does() -> None:
    """The SQLite cursor of ``prepared_cursor`` overrides ``convert_query`` (positional
    parameters only) and calls the driver with the converted text: it must give exactly the
    text Django's own ``SQLiteCursorWrapper`` would, and the override's signature must still be
    Django's."""
    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    from core.db import _qmark

    params = list(inspect.signature(SQLiteCursorWrapper.convert_query).parameters)
    assert params == ["self", "query", "param_names"]
    for text in (
        "SELECT %s",
        "UPDATE t SET a = %s WHERE b IN (%s, %s) AND c LIKE '10%%'",
        "INSERT INTO t VALUES (%s, %s) RETURNING id",
        "SELECT 1",
    ):
        assert _qmark(text) == SQLiteCursorWrapper.convert_query(None, text)


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_sqlite_cursor_goes_through_djangos_error_translation() -> None:
    """The lean SQLite cursor calls the driver directly but inside ``wrap_database_errors``:
    a failing statement still raises Django's exception classes."""
    from django.db import OperationalError

    from core.db import prepared_cursor

    with pytest.raises(OperationalError), prepared_cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table WHERE a = %s", [1])


def test_sqlite_transaction_start_and_commit_are_the_methods_the_lean_backend_overrides() -> None:
    """``LeanSQLiteDatabaseWrapper`` replaces two private methods of Django's SQLite
    connection: they must still exist with no arguments, still be what ``atomic()`` and
    ``commit()`` call, and Django's start must still send ``BEGIN`` plus the transaction mode,
    which the override sends itself."""
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.sqlite3.base import DatabaseWrapper

    for name in ("_start_transaction_under_autocommit", "_commit"):
        assert list(inspect.signature(getattr(DatabaseWrapper, name)).parameters) == ["self"]
    assert "_commit()" in inspect.getsource(BaseDatabaseWrapper.commit)
    start = inspect.getsource(DatabaseWrapper._start_transaction_under_autocommit)
    assert 'f"BEGIN {self.transaction_mode}"' in start
    assert "self.transaction_mode is None" in start


@pytest.mark.sqlite
@pytest.mark.django_db
def test_the_sqlite_clock_read_goes_through_djangos_error_translation() -> None:
    """``sqlite_read_one`` reads on the driver's connection inside ``wrap_database_errors``,
    so a failing read still raises Django's exception classes, not the driver's."""
    import sqlite3

    from django.db import DatabaseError

    from core.db import sqlite_read_one

    assert sqlite_read_one(connection, "SELECT 41 + 1") == 42
    with pytest.raises(DatabaseError) as raised:
        sqlite_read_one(connection, "SELECT * FROM no_such_table")
    assert not type(raised.value).__module__.startswith("sqlite3")
    assert isinstance(raised.value.__cause__, sqlite3.Error)
