"""Test harness.

- ``CONSOLE_REQUIRE_ALL=1`` (set by CI) turns every skipped test into a failure, so a missing
  browser or database can never pass silently.
- Django's test flush (transactional tests) must empty the append-only audit table; the flush
  drops the audit triggers, deletes, and reinstalls them. Nothing else is exempt.
- Playwright's sync API keeps an event loop running; allow the ORM in that process (tests only).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

REQUIRE_ALL = os.environ.get("CONSOLE_REQUIRE_ALL") == "1"


def _patch_flush() -> None:
    from django.db.backends.postgresql import base as pg_base
    from django.db.backends.sqlite3 import base as sqlite_base

    PgOps = pg_base.DatabaseWrapper.ops_class
    LiteOps = sqlite_base.DatabaseWrapper.ops_class

    from audit import triggers

    for ops_class in (PgOps, LiteOps):
        original = ops_class.sql_flush
        if getattr(original, "_audit_aware", False):
            continue

        def sql_flush(self, style, tables, *args, _original=original, **kwargs):
            statements = _original(self, style, tables, *args, **kwargs)
            if triggers.TABLE not in tables:
                return statements
            vendor = self.connection.vendor
            return [*triggers.drop_sql(vendor), *statements, *triggers.install_sql(vendor)]

        sql_flush._audit_aware = True
        ops_class.sql_flush = sql_flush


_patch_flush()


def pytest_collection_modifyitems(config, items) -> None:
    if not REQUIRE_ALL:
        return
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("default"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        # CI must run everything: a skip (no browser, no database) is a failure there.
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under CONSOLE_REQUIRE_ALL=1: {reason}"


@pytest.fixture
def db_vendor() -> str:
    from django.db import connection

    return connection.vendor


from tests.support.procdb import _proc_db_templates, proc_db  # noqa: E402, F401
