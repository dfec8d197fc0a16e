"""Refuse to run workers on a database configuration that cannot keep claims safe."""

from __future__ import annotations

from django.db import connection

from inbox.errors import ConfigurationError


def check_worker_database() -> str:
    """Return a one-line description of the database, or raise ``ConfigurationError``.

    SQLite is safe for several worker processes on one host only in WAL mode with IMMEDIATE
    transactions (DESIGN §1.4); anything else could hand one job to two workers or fail with
    "database is locked".
    """
    vendor = connection.vendor
    if vendor == "postgresql":
        return f"PostgreSQL {connection.settings_dict.get('NAME')}"
    if vendor != "sqlite":
        raise ConfigurationError(f"workers support PostgreSQL and SQLite, not {vendor}")
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
    if problems:
        raise ConfigurationError(
            "this SQLite database is not safe for workers: " + "; ".join(problems)
        )
    return f"SQLite {connection.settings_dict.get('NAME')} (WAL, IMMEDIATE)"
