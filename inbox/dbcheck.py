"""Is this database fit for worker processes? (DESIGN §1.4)

SQLite is safe for several worker processes on one host only in WAL mode with IMMEDIATE
transactions; anything else could hand one job to two workers or fail with "database is
locked". ``inbox.checks`` reports these problems as system-check errors; workers run that check
before they start.
"""

from __future__ import annotations

from django.db import connection

from inbox.errors import ConfigurationError


def worker_database_problems() -> list[str]:
    """What makes the default database unsafe for workers (empty: nothing)."""
    vendor = connection.vendor
    if vendor == "postgresql":
        return []
    if vendor != "sqlite":
        return [f"workers support PostgreSQL and SQLite, not {vendor}"]
    options = connection.settings_dict.get("OPTIONS", {})
    mode = str(options.get("transaction_mode", "")).upper()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        journal = str(cursor.fetchone()[0]).lower()
    problems = []
    if mode != "IMMEDIATE":
        problems.append(f"OPTIONS['transaction_mode'] is {mode or 'unset'}; set it to 'IMMEDIATE'")
    if journal != "wal":
        problems.append(
            f"journal_mode is {journal}; add 'PRAGMA journal_mode=WAL' to OPTIONS['init_command']"
        )
    return problems


def describe_database() -> str:
    """A one-line description of the default database, for a worker's start line."""
    if connection.vendor == "postgresql":
        return f"PostgreSQL {connection.settings_dict.get('NAME')}"
    return f"SQLite {connection.settings_dict.get('NAME')} (WAL, IMMEDIATE)"


def check_worker_database() -> str:
    """Return ``describe_database()``, or raise ``ConfigurationError`` naming every problem."""
    problems = worker_database_problems()
    if problems:
        raise ConfigurationError(
            "this SQLite database is not safe for workers: " + "; ".join(problems)
        )
    return describe_database()
