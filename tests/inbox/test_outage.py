"""The outage rules on their own: which database errors a wait mends, the waits, the lines.

The real-process side (a worker started while the pooler is down, one running through a pooler
restart, the stop signal during a wait, every worker command on an unmigrated schema) is in
tests/executors/test_outage.py.
"""

from __future__ import annotations

import logging
import random

import pytest
from django.db import DatabaseError, IntegrityError, OperationalError, connection, transaction

from core.errors import ConfigurationError
from inbox import outage
from inbox.outage import Backoff, Outage, require_migrated, unmendable


def test_the_waits_double_to_the_cap_each_spread_below_its_step() -> None:
    backoff = Backoff(first=0.5, cap=8.0, jitter=0.25, rng=random.Random(7))
    waits = [backoff.next() for _ in range(8)]
    steps = [0.5, 1, 2, 4, 8, 8, 8, 8]
    for wait, step in zip(waits, steps, strict=True):
        assert step * 0.75 <= wait <= step
    # Jitter: two workers that failed together do not retry together.
    other = Backoff(first=0.5, cap=8.0, jitter=0.25, rng=random.Random(8))
    assert [other.next() for _ in range(8)] != waits
    backoff.reset()
    assert backoff.next() <= 0.5


@pytest.mark.django_db
def test_a_missing_table_is_unmendable_and_says_migrate() -> None:
    with (
        pytest.raises(DatabaseError) as caught,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT * FROM no_such_table_for_the_outage_test")
    fatal = unmendable(caught.value)
    assert isinstance(fatal, ConfigurationError)
    assert "manage.py migrate" in str(fatal) and "no_such_table_for_the_outage_test" in str(fatal)


@pytest.mark.parametrize(
    "message",
    [
        'connection failed: connection to server at "127.0.0.1", port 6432 failed: '
        "Connection refused\nIs the server running on that host?",
        "server closed the connection unexpectedly",
        "database is locked",
        "FATAL:  the database system is starting up",
        "terminating connection due to administrator command",
    ],
)
def test_what_a_wait_mends_is_not_unmendable(message: str) -> None:
    assert unmendable(OperationalError(message)) is None


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ('FATAL:  password authentication failed for user "app"', "credentials"),
        ('FATAL:  role "nobody" does not exist', "does not exist"),
        ('FATAL:  database "console_gone" does not exist', "does not exist"),
        ("permission denied for table inbox_job", "privilege"),
        ("no such column: inbox_job.priority", "manage.py migrate"),
        ("unable to open database file", "SQLite cannot open"),
    ],
)
def test_what_no_wait_mends_says_what_to_do(message: str, says: str) -> None:
    fatal = unmendable(OperationalError(message))
    assert fatal is not None and says in str(fatal) and message.split("  ")[-1] in str(fatal)


def test_an_outage_counts_its_retries_and_says_when_the_database_is_back(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="inbox.loop")
    down = Outage("w-1")
    first = down.failed(OperationalError("Connection refused"), doing="starting")
    second = down.failed(OperationalError("Connection refused"), doing="starting")
    assert first <= outage.FIRST_BACKOFF < second
    assert "retry 2 in" in caplog.records[-1].getMessage()
    down.ended()
    assert "database is back after 2 retries" in caplog.records[-1].getMessage()
    count = len(caplog.records)
    down.ended()  # a turn that went well, no outage: nothing said
    assert len(caplog.records) == count
    assert down.failed(OperationalError("Connection refused"), doing="working") <= 0.5


def test_an_outage_raises_what_it_must_not_retry() -> None:
    down = Outage("w-1")
    with pytest.raises(ConfigurationError, match="credentials"):
        down.failed(OperationalError("password authentication failed"), doing="starting")
    with pytest.raises(IntegrityError):  # a bug, never waited out
        down.failed(IntegrityError("duplicate key"), doing="working")


@pytest.mark.django_db
def test_the_start_up_refuses_a_schema_behind_the_code() -> None:
    require_migrated()  # the test database is migrated
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(name) FROM django_migrations WHERE app = 'runs'")
        (latest,) = cursor.fetchone()
        cursor.execute("DELETE FROM django_migrations WHERE app = 'runs' AND name = %s", [latest])
    with pytest.raises(ConfigurationError, match=f"not applied: runs.{latest}"):
        require_migrated()
