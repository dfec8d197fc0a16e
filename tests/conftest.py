"""Test harness.

- ``CONSOLE_REQUIRE_ALL=1`` (set by CI) turns every skipped test into a failure, so a missing
  browser or database can never pass silently.
- Django's test flush (transactional tests) must empty the append-only audit table; the flush
  drops the audit triggers, deletes, and reinstalls them. Nothing else is exempt.
- Playwright's sync API keeps an event loop running; allow the ORM in that process (tests only).
- Live regions are not shared between polls (``CONSOLE_LIVE_CACHE = 0``): a test that changes
  something and polls expects to see it at once. tests/console/test_livecache.py turns sharing
  on and tests it.
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


@pytest.fixture(autouse=True)
def _live_regions_read_afresh(settings):
    from console import livecache

    settings.CONSOLE_LIVE_CACHE = 0
    livecache.SHARED.clear()
    yield
    livecache.SHARED.clear()


def _suite_vendor() -> str:
    url = os.environ.get("DATABASE_URL", "").strip()
    return "postgresql" if url.startswith(("postgres://", "postgresql://")) else "sqlite"


_DESELECTED: list[str] = []


def pytest_collection_modifyitems(config, items) -> None:
    # Tests of one database's behaviour (``@pytest.mark.postgresql`` / ``sqlite``) run in that
    # database's pass of the suite; the other pass deselects them and says so in its summary.
    # CI runs both passes, so every test runs; none is skipped.
    vendor = _suite_vendor()
    kept, dropped = [], []
    for item in items:
        wanted = {m for m in ("postgresql", "sqlite") if item.get_closest_marker(m)}
        (dropped if wanted and vendor not in wanted else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
        _DESELECTED.extend(item.nodeid for item in dropped)
    if not REQUIRE_ALL:
        return
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("default"))


def pytest_terminal_summary(terminalreporter) -> None:
    if _DESELECTED:
        other = "SQLite" if _suite_vendor() == "postgresql" else "PostgreSQL"
        terminalreporter.write_line(
            f"{len(_DESELECTED)} {other}-only tests were deselected here: they run in the "
            f"suite's {other} pass (CI runs both)."
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        # CI must run everything: a skip (no browser, no database) is a failure there.
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under CONSOLE_REQUIRE_ALL=1: {reason}"


@pytest.fixture(params=["direct", pytest.param("pgbouncer", marks=pytest.mark.postgresql)])
def proc_db_via(request):
    """A fresh process database reached directly, and (PostgreSQL pass) through PgBouncer in
    transaction-pooling mode: the test runs once each way."""
    return request.getfixturevalue("proc_db" if request.param == "direct" else "bouncer_db")


@pytest.fixture
def db_vendor() -> str:
    from django.db import connection

    return connection.vendor


from tests.support.pgbouncer import bouncer_db, own_bouncer, pgbouncer  # noqa: E402, F401
from tests.support.procdb import _proc_db_templates, proc_db  # noqa: E402, F401
