"""Is this database fit for worker processes? (Two workers must never both hold one job.)

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


def _worker_privileges() -> list[tuple[str, str]]:
    """(table, privilege) pairs every worker needs: the job path, its counts, its audit rows
    and its heartbeat; approvals and pauses are only read."""
    from audit.models import AuditEvent
    from inbox.models import Approval, FinishedCount, Job, ScopePause, Worker

    needs = {
        Job: ("SELECT", "INSERT", "UPDATE"),
        FinishedCount: ("SELECT", "INSERT", "UPDATE"),
        Worker: ("SELECT", "INSERT", "UPDATE"),
        AuditEvent: ("SELECT", "INSERT"),
        Approval: ("SELECT",),
        ScopePause: ("SELECT",),
    }
    return [(model._meta.db_table, p) for model, privileges in needs.items() for p in privileges]


def missing_privileges() -> list[str]:
    """PostgreSQL: what the connecting role may not do to the tables a worker writes (empty:
    nothing missing, or SQLite). A table a migration added after the grants were last applied
    (docs/postgres-app-role.sql) shows here at start-up instead of failing every finish."""
    if connection.vendor != "postgresql":
        return []
    tables, privileges = zip(*_worker_privileges(), strict=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, t, p FROM unnest(%s::text[], %s::text[]) AS x(t, p) "
            "WHERE to_regclass(t) IS NOT NULL AND NOT has_table_privilege(t, p)",
            [list(tables), list(privileges)],
        )
        rows = cursor.fetchall()
    return [f"role {user} may not {privilege} on {table}" for user, table, privilege in rows]


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
