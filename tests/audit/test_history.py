"""The audit history cannot be rewritten or rolled away (events are never updated or deleted).

- SQLite: ``INSERT OR REPLACE`` / ``REPLACE INTO`` over an existing event deleted it without
  firing the delete trigger; now refused (``audit_no_replace``). PostgreSQL's equivalent, an
  upsert, is an UPDATE and is refused by ``audit_no_change``.
- ``migrate audit zero`` (or any rollback of an audit migration) is refused before anything is
  unapplied, unless ``AUDIT_ALLOW_ERASING_HISTORY=1`` says the history is to be erased.
"""

from __future__ import annotations

import sqlite3

import pytest
from django.db import DatabaseError, connection, transaction

from audit.events import record_event, record_events
from audit.models import AuditEvent, EventType
from tests.support.procdb import ProcDB

COLUMNS = "event_id, job_id, run_id, event_type, actor, result_code, detail, created_at"
# (vendor, name) -> a statement that would rewrite event {pk}.
REWRITES = {
    ("sqlite", "INSERT OR REPLACE"): (
        f"INSERT OR REPLACE INTO audit_auditevent ({COLUMNS}) "
        "VALUES ({pk}, 'j-1', NULL, 'REQUESTED', 'mallory', '', '{{}}', '2020-01-01 00:00:00')"
    ),
    ("sqlite", "REPLACE INTO"): (
        f"REPLACE INTO audit_auditevent ({COLUMNS}) "
        "VALUES ({pk}, 'j-1', NULL, 'REQUESTED', 'mallory', '', '{{}}', '2020-01-01 00:00:00')"
    ),
    ("sqlite", "upsert"): (
        f"INSERT INTO audit_auditevent ({COLUMNS}) "
        "VALUES ({pk}, 'j-1', NULL, 'REQUESTED', 'mallory', '', '{{}}', '2020-01-01 00:00:00') "
        "ON CONFLICT (event_id) DO UPDATE SET actor = excluded.actor"
    ),
    ("postgresql", "upsert"): (
        f"INSERT INTO audit_auditevent ({COLUMNS}) "
        "VALUES ({pk}, 'j-1', NULL, 'REQUESTED', 'mallory', '', '{{}}', now()) "
        "ON CONFLICT (event_id) DO UPDATE SET actor = excluded.actor"
    ),
}


def _rewrites(vendor: str) -> dict[str, str]:
    return {name: sql for (v, name), sql in REWRITES.items() if v == vendor}


def _table() -> list[dict]:
    return list(AuditEvent.objects.order_by("event_id").values())


@pytest.mark.django_db
def test_replace_or_upsert_over_an_existing_event_is_refused(db_vendor) -> None:
    event = record_event(event_type=EventType.OPERATOR_ACTION, actor="op", job_id="j-1")
    statements = _rewrites(db_vendor)
    assert statements
    for name, sql in statements.items():
        before = _table()
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql.format(pk=event.pk))
        assert _table() == before, name


@pytest.mark.django_db
def test_appending_after_the_replace_guard_still_works(db_vendor) -> None:
    """The guard refuses only a taken id: new events (one, or many in one INSERT) append."""
    first = record_event(event_type=EventType.OPERATOR_ACTION, actor="op")
    from audit.events import Event

    count = record_events(
        [Event(EventType.OPERATOR_ACTION, "op", at=first.created_at) for _ in range(3)]
    )
    assert count == 3
    ids = list(AuditEvent.objects.order_by("event_id").values_list("event_id", flat=True))
    assert len(ids) == 4 and ids == sorted(set(ids))


@pytest.mark.django_db
@pytest.mark.parametrize("event_id", [0, -1, -7])
def test_sqlite_event_with_id_below_one_is_refused(db_vendor, event_id: int) -> None:
    """A row the BEFORE INSERT guard could not tell from "assign an id" (-1) never exists."""
    if db_vendor != "sqlite":
        event_id = abs(event_id) + 10_000_000  # PostgreSQL: an explicit id is just appended
    before = _table()
    sql = (
        f"INSERT INTO audit_auditevent ({COLUMNS}) "
        f"VALUES ({event_id}, 'j-1', NULL, 'REQUESTED', 'op', '', '{{}}', CURRENT_TIMESTAMP)"
    )
    if db_vendor == "sqlite":
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
        assert _table() == before
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql)
        assert len(_table()) == len(before) + 1


def test_replace_against_a_migrated_database_is_refused(proc_db: ProcDB) -> None:
    """The REPLACE guard comes from the migrations, not from the test harness."""
    proc_db.python(
        "from audit.events import record_event\n"
        "record_event(event_type='OPERATOR_ACTION', actor='op', detail={})"
    )
    (pk,) = proc_db.query("SELECT event_id FROM audit_auditevent")[0]
    refused: tuple[type[Exception], ...]
    if proc_db.vendor == "postgresql":
        import psycopg

        refused = (psycopg.Error,)
    else:
        refused = (sqlite3.Error,)
    for sql in _rewrites(proc_db.vendor).values():
        with pytest.raises(refused, match="append-only"):
            proc_db.execute(sql.format(pk=pk))
    assert proc_db.query("SELECT actor FROM audit_auditevent") == [("op",)]


# --- rolling the migrations back --------------------------------------------------------------


def _seed_event(db: ProcDB) -> None:
    db.python(
        "from audit.events import record_event\n"
        "record_event(event_type='OPERATOR_ACTION', actor='op', detail={'why': 'history'})"
    )


def _applied(db: ProcDB, app: str) -> list[str]:
    rows = db.query("SELECT name FROM django_migrations WHERE app = %s ORDER BY name", (app,))
    return [name for (name,) in rows]


@pytest.mark.parametrize(
    "target", ["zero", "0005_partial_subject_indexes", "0002_append_only_triggers", "0001_initial"]
)
def test_migrate_audit_backwards_is_refused_and_unapplies_nothing(proc_db, target) -> None:
    _seed_event(proc_db)
    before = {app: _applied(proc_db, app) for app in ("audit", "console", "inbox", "runs")}
    proc = proc_db.manage("migrate", "audit", target, check=False)
    assert proc.returncode == 1
    assert "would erase the audit history" in proc.stderr
    assert "AUDIT_ALLOW_ERASING_HISTORY=1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert {app: _applied(proc_db, app) for app in before} == before
    assert proc_db.query("SELECT actor FROM audit_auditevent") == [("op",)]
    # The triggers are still there.
    with pytest.raises(Exception, match="append-only"):
        proc_db.execute("DELETE FROM audit_auditevent")


def test_migration_executor_backwards_is_refused_by_the_migration_itself(proc_db) -> None:
    """Without the migrate command (no pre_migrate signal), 0003's reverse still refuses."""
    _seed_event(proc_db)
    out = proc_db.python(
        "from django.db import connection\n"
        "from django.db.migrations.executor import MigrationExecutor\n"
        "from audit.history import HistoryErasureRefused\n"
        "try:\n"
        "    MigrationExecutor(connection).migrate([('audit', '0002_append_only_triggers')])\n"
        "except HistoryErasureRefused as exc:\n"
        "    print('refused:', exc)\n"
    )
    assert out.startswith("refused: refused: unapplying the audit migrations")
    assert "0003_refuse_replace_and_rollback" in _applied(proc_db, "audit")
    assert proc_db.query("SELECT actor FROM audit_auditevent") == [("op",)]


def test_migrate_audit_zero_with_the_setting_erases_the_history(proc_db) -> None:
    _seed_event(proc_db)
    proc_db.extra_env["AUDIT_ALLOW_ERASING_HISTORY"] = "1"
    proc = proc_db.manage("migrate", "audit", "zero", check=False)
    assert proc.returncode == 0, proc.stderr
    assert _applied(proc_db, "audit") == []
    if proc_db.vendor == "postgresql":
        exists = proc_db.scalar("SELECT to_regclass('audit_auditevent') IS NOT NULL")
    else:
        exists = proc_db.scalar(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'audit_auditevent'"
        )
    assert not exists


def test_migrate_other_app_backwards_is_not_refused(proc_db) -> None:
    proc = proc_db.manage("migrate", "console", "0001_roles", check=False)
    assert proc.returncode == 0, proc.stderr


# --- the event id without AUTOINCREMENT (audit 0006) -----------------------------------------


def _events(db: ProcDB) -> list[tuple]:
    return db.query(f"SELECT {COLUMNS} FROM audit_auditevent ORDER BY event_id")


def _table_sql(db: ProcDB) -> str:
    return db.scalar("SELECT sql FROM sqlite_master WHERE name = 'audit_auditevent'")


def _assert_append_only(db: ProcDB, pk: int) -> None:
    for sql in (
        "DELETE FROM audit_auditevent",
        f"UPDATE audit_auditevent SET actor = 'mallory' WHERE event_id = {pk}",
        *[rewrite.format(pk=pk) for rewrite in _rewrites(db.vendor).values()],
    ):
        with pytest.raises(Exception, match="append-only"):
            db.execute(sql)


def test_0006_keeps_every_event_its_id_and_the_triggers(proc_db) -> None:
    """SQLite rebuilds the table to drop AUTOINCREMENT: every event keeps its id, the triggers
    are back (both ways), and the next id is one above the last. PostgreSQL: nothing moves."""
    proc_db.extra_env["AUDIT_ALLOW_ERASING_HISTORY"] = "1"
    proc_db.manage("migrate", "audit", "0005_partial_subject_indexes")
    if proc_db.vendor == "sqlite":
        assert "AUTOINCREMENT" in _table_sql(proc_db)
    for _ in range(3):
        _seed_event(proc_db)
    before = _events(proc_db)
    _assert_append_only(proc_db, before[-1][0])
    proc_db.extra_env.pop("AUDIT_ALLOW_ERASING_HISTORY")

    proc_db.manage("migrate", "audit", "0006_event_id_without_autoincrement")
    assert _applied(proc_db, "audit")[-1] == "0006_event_id_without_autoincrement"
    assert _events(proc_db) == before
    _assert_append_only(proc_db, before[-1][0])
    if proc_db.vendor == "sqlite":
        assert "AUTOINCREMENT" not in _table_sql(proc_db)
    _seed_event(proc_db)
    ids = [row[0] for row in _events(proc_db)]
    assert ids == [*[row[0] for row in before], before[-1][0] + 1]


# --- the type index without the routine events (audit 0007) ----------------------------------


def _type_index(db: ProcDB) -> str:
    if db.vendor == "postgresql":
        return db.scalar("SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_type_idx'")
    return db.scalar("SELECT sql FROM sqlite_master WHERE name = 'audit_type_idx'")


def test_0007_makes_the_type_index_partial_and_keeps_every_event(proc_db) -> None:
    """Forward: the index leaves the routine types out, no event moves, the log stays
    append-only. Backward (only with the setting): the full index is back."""
    proc_db.extra_env["AUDIT_ALLOW_ERASING_HISTORY"] = "1"
    proc_db.manage("migrate", "audit", "0006_event_id_without_autoincrement")
    assert "WHERE" not in _type_index(proc_db).upper()
    _seed_event(proc_db)
    proc_db.python(
        "from audit.events import record_event\n"
        "for t in ('REQUESTED', 'CLAIMED', 'REJECTED'):\n"
        "    record_event(event_type=t, actor='w', job_id='j-1', detail={})"
    )
    before = _events(proc_db)

    proc_db.manage("migrate", "audit", "0007_type_index_without_routine_events")
    partial = _type_index(proc_db)
    assert "WHERE" in partial.upper() and "'CLAIMED'" in partial, partial
    assert _events(proc_db) == before
    _assert_append_only(proc_db, before[-1][0])
    found = proc_db.python(
        "from audit.models import AuditEvent\n"
        "print([list(AuditEvent.objects.of_type(t).values_list('actor', flat=True))"
        " for t in ('REJECTED', 'CLAIMED', 'OPERATOR_ACTION')])"
    )
    assert found.strip() == "[['w'], ['w'], ['op']]"

    proc_db.manage("migrate", "audit", "0006_event_id_without_autoincrement")
    assert "WHERE" not in _type_index(proc_db).upper()
    assert _events(proc_db) == before
