"""Riding out a database that went away, and telling it apart from one that never will work.

A worker meets two kinds of database error. Most say the server or the pooler cannot be reached
right now (refused, reset, restarting, a terminated session, a lock held past the busy
timeout): waiting mends them, so the worker backs off and tries again for as long as it takes,
one log line per retry with the cause and the next delay, and one when the database answers
again. A few say no wait will ever help (the credentials are refused, the database or role
does not exist, a privilege is missing, the schema is not migrated, the SQLite file cannot be
opened): retrying them would only hide the mistake behind an endless trickle of log lines, so
``unmendable`` names what to do and the worker exits non-zero with that message.

The waits grow exponentially to a cap, with jitter: after a pooler restart, eight workers
that lost their sessions together must not all come back in the same millisecond.
"""

from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.apps import apps
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, connection

from core.errors import ConfigurationError
from inbox.pooler import explain_pooler_error

log = logging.getLogger("inbox.loop")

# What a lost or ended connection raises: the server went away, the network dropped, or the
# server ended a transaction left idle too long (25P03, an InternalError). Waiting mends these
# unless ``unmendable`` says otherwise; any other database error is a bug and is raised.
DB_ERRORS = (OperationalError, InterfaceError, InternalError)
# The apps whose tables a worker writes: their migrations must all be applied before it starts.
WORKER_APPS = ("audit", "inbox", "runs")

# The first wait after a failure, the longest one, and how far each wait is spread (a share of
# it, drawn at random on each retry).
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
JITTER = 0.25

MIGRATE = "the database schema is not migrated: run `manage.py migrate` (then restart the worker)"
GRANTS = (
    "the database role lacks a privilege the workers need: apply docs/postgres-app-role.sql "
    "as the tables' owner (the README's Deployment section)"
)
CREDENTIALS = (
    "the database refused the credentials: check the user and password in DATABASE_URL "
    "(and the pooler's auth file, behind PgBouncer)"
)
NO_DATABASE = "the database or role in DATABASE_URL does not exist: create it or fix the URL"
SQLITE_FILE = (
    "SQLite cannot open or write the database file: check the path in DATABASE_URL (or "
    "CONSOLE_VAR_DIR), that its folder exists, and that this user may write to both"
)

# PostgreSQL error classes no retry mends, by SQLSTATE.
SQLSTATES = {
    "28P01": CREDENTIALS,  # invalid_password
    "28000": CREDENTIALS,  # invalid_authorization_specification (incl. no pg_hba.conf entry)
    "3D000": NO_DATABASE,  # invalid_catalog_name
    "42501": GRANTS,  # insufficient_privilege
    "42P01": MIGRATE,  # undefined_table
    "42703": MIGRATE,  # undefined_column
}
# The same, by message: a refused connection carries no SQLSTATE (libpq reports it as text),
# and SQLite has none at all.
MESSAGES = [
    (re.compile(r"password authentication failed|no such user|no pg_hba\.conf entry"), CREDENTIALS),
    (re.compile(r'(database|role) "[^"]*" does not exist'), NO_DATABASE),
    (re.compile(r"permission denied for"), GRANTS),
    (re.compile(r"no such (table|column)"), MIGRATE),
    (re.compile(r"unable to open database file|attempt to write a readonly database"), SQLITE_FILE),
]


def unmendable(exc: BaseException) -> ConfigurationError | None:
    """A ``ConfigurationError`` saying what to do, when waiting cannot mend ``exc``; else None."""
    if not isinstance(exc, DatabaseError):
        return None
    # A transaction pooler reached without DATABASE_POOLER loses prepared statements or refuses
    # the session options: the same on every retry.
    if (pooler := explain_pooler_error(exc)) is not None:
        return pooler
    cause = exc.__cause__ or exc
    state = getattr(cause, "sqlstate", None) or getattr(exc, "sqlstate", None)
    advice = SQLSTATES.get(state or "")
    text = str(exc)
    if advice is None:
        advice = next((a for pattern, a in MESSAGES if pattern.search(text)), None)
    if advice is None:
        return None
    return ConfigurationError(f"{advice} (the database said: {cause_of(exc)})")


def cause_of(exc: BaseException) -> str:
    """The error on one line (a driver message spans several), cut to a readable length."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = " / ".join(lines) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass
class Backoff:
    """Exponential waits with jitter, from ``first`` up to ``cap`` seconds."""

    first: float = FIRST_BACKOFF
    cap: float = MAX_BACKOFF
    jitter: float = JITTER
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next(self) -> float:
        """The wait before the next try, counting this failure."""
        self.failures += 1
        base = min(self.first * 2 ** (self.failures - 1), self.cap)
        return base * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.failures = 0


class Outage:
    """One worker's view of the database being away: the retry lines and the line when it is
    back. ``failed`` either raises the ``ConfigurationError`` no wait mends or returns the wait
    before the next try."""

    def __init__(self, worker_id: str, *, first: float = FIRST_BACKOFF) -> None:
        self.worker_id = worker_id
        self.backoff = Backoff(first=max(first, 0.05))
        self.since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException, *, doing: str) -> float:
        fatal = unmendable(exc)
        if fatal is not None:
            raise fatal from exc
        if not isinstance(exc, DB_ERRORS):
            raise exc
        if self.since is None:
            self.since = time.monotonic()
        delay = self.backoff.next()
        log.error(
            "%s: database unavailable while %s (%s); retry %d in %.1fs",
            self.worker_id,
            doing,
            cause_of(exc),
            self.backoff.failures,
            delay,
        )
        return delay

    def ended(self) -> None:
        """The database answered: say so once after an outage, and start the waits afresh."""
        if self.since is not None:
            log.warning(
                "%s: database is back after %d retr%s (%.1fs unavailable)",
                self.worker_id,
                self.backoff.failures,
                "y" if self.backoff.failures == 1 else "ies",
                time.monotonic() - self.since,
            )
        self.since = None
        self.backoff.reset()


def require_migrated() -> None:
    """Refuse to start on a schema that is behind the code: a worker on it would fail on its
    first write to a missing column, or worse, on a rare path hours later.

    The migration files are listed on disk and compared with the database's record, one query
    and no import of the migration modules (a worker's start-up stays cheap).
    """
    names = {}
    for label in WORKER_APPS:
        folder = Path(apps.get_app_config(label).path) / "migrations"
        names[label] = {p.stem for p in folder.glob("[0-9]*.py")}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT app, name FROM django_migrations WHERE app IN (%s, %s, %s)", WORKER_APPS
        )
        applied = set(cursor.fetchall())
    missing = sorted(
        f"{label}.{name}"
        for label, found in names.items()
        for name in found
        if (label, name) not in applied
    )
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise ConfigurationError(f"{MIGRATE}; not applied: {shown}")
