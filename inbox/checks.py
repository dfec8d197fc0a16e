"""System checks: a misconfiguration is reported by ``manage.py check`` (and by every command,
which runs the checks first), not by a worker halfway through its first job.

- ``inbox.E001`` the job-type registry (``INBOX_JOB_TYPES``) does not load;
- ``inbox.E002`` ``VAULT_ROOT`` exists but is not a directory;
- ``inbox.E003`` the production profile runs with a development secret key or DEBUG on;
- ``inbox.E010`` (tag ``workers``, needs the database) the database cannot keep claims safe
  for worker processes (SQLite without WAL or IMMEDIATE transactions). Workers run this check
  before they start; ``manage.py check --tag workers --database default`` runs it by hand;
- ``inbox.E011`` (tag ``workers``, PostgreSQL) the connecting role lacks a privilege a worker
  needs on one of its tables, typically a table a migration added after the grants
  (docs/postgres-app-role.sql) were last applied;
- ``inbox.E013`` (tag ``workers``, PostgreSQL) the database is behind a transaction pooler
  (PgBouncer) but ``DATABASE_POOLER`` is not set: workers would fail on session state the
  pooler does not keep (``prepared statement "_pg3_0" does not exist``);
- ``inbox.W014`` (tag ``workers``, PostgreSQL) ``DATABASE_POOLER=pgbouncer`` but the connection
  is direct: it works, but reads outside a transaction run without the timeouts and every
  transaction pays for its ``SET LOCAL``. ``inbox.pooler`` says how both are told.

Workers log the warnings of their checks at start and refuse to start on an error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError

from core.errors import ConfigurationError
from inbox.dbcheck import missing_privileges, worker_database_problems
from inbox.jobtypes import registry
from inbox.pooler import explain_pooler_error, missing_pooler_setting, needless_pooler_setting

WORKERS = "workers"

log = logging.getLogger("inbox.checks")


@checks.register("inbox")
def check_job_types(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        registry()
    except ConfigurationError as exc:
        return [
            checks.Error(str(exc), hint="Fix INBOX_JOB_TYPES in the settings.", id="inbox.E001")
        ]
    return []


@checks.register("inbox")
def check_vault_root(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    root = Path(settings.VAULT_ROOT)
    if root.exists() and not root.is_dir():
        return [
            checks.Error(
                f"VAULT_ROOT {str(root)!r} exists but is not a directory",
                hint="Point VAULT_ROOT at the vault's directory (it is created if missing).",
                id="inbox.E002",
            )
        ]
    return []


@checks.register("inbox")
def check_production(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if not getattr(settings, "PRODUCTION", False):
        return []
    problems = []
    if settings.DEBUG:
        problems.append("DEBUG is on")
    if settings.SECRET_KEY.startswith("dev-only-"):
        problems.append("SECRET_KEY is the development key")
    return [
        checks.Error(
            f"CONSOLE_ENV=production but {problem}",
            hint="Set DJANGO_SECRET_KEY to a long random value and leave DJANGO_DEBUG unset.",
            id="inbox.E003",
        )
        for problem in problems
    ]


@checks.register(WORKERS, checks.Tags.database)
def check_database_for_workers(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    return [
        checks.Error(
            f"this SQLite database is not safe for workers: {problem}",
            hint="Use the project's SQLITE_OPTIONS (WAL, IMMEDIATE) or PostgreSQL.",
            id="inbox.E010",
        )
        for problem in worker_database_problems()
    ]


@checks.register(WORKERS, checks.Tags.database)
def check_worker_privileges(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    try:
        missing = missing_privileges()
    except DatabaseError as exc:
        if explain_pooler_error(exc) is None:
            raise
        return []  # the pooler check (inbox.E013) reports it, with what to do
    if not missing:
        return []
    return [
        checks.Error(
            "the database role cannot do what workers do: " + "; ".join(missing),
            hint="Run docs/postgres-app-role.sql as the tables' owner after every migrate "
            "(the README's Deployment section).",
            id="inbox.E011",
        )
    ]


@checks.register(WORKERS, checks.Tags.database)
def check_pooler_setting(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    if not databases or DEFAULT_DB_ALIAS not in databases:
        return []
    missing = missing_pooler_setting()
    if missing:
        return [
            checks.Error(
                missing,
                hint="Without it, workers rely on session state the pooler does not keep and "
                "fail with errors like 'prepared statement \"_pg3_0\" does not exist' (the "
                "README's PgBouncer section).",
                id="inbox.E013",
            )
        ]
    needless = needless_pooler_setting()
    if needless:
        return [
            checks.Warning(
                needless,
                hint="It works, but reads outside a transaction then run without the lock and "
                "statement timeouts, prepared statements stay off and every transaction pays "
                "for a SET LOCAL; set DATABASE_POOLER only when DATABASE_URL names PgBouncer.",
                id="inbox.W014",
            )
        ]
    return []


def require_worker_checks() -> None:
    """Run every check a worker needs (the ``inbox`` and ``workers`` tags, with the database);
    log each warning, raise ``ConfigurationError`` naming each error."""
    found = checks.run_checks(tags=["inbox", WORKERS], databases=[DEFAULT_DB_ALIAS])
    for message in found:
        if checks.WARNING <= message.level < checks.ERROR:
            log.warning("%s: %s (%s)", message.id, message.msg, message.hint)
    errors = [m for m in found if m.level >= checks.ERROR]
    if errors:
        raise ConfigurationError(
            "; ".join(f"{m.id}: {m.msg}" + (f" ({m.hint})" if m.hint else "") for m in errors)
        )
