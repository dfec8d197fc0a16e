"""Database triggers that make the audit table append-only for every client, raw SQL included.

Kept here (not inline in the migration) so the test harness can reinstall them after Django's
test flush, which must empty the table between transactional tests.

SQLite's ``INSERT OR REPLACE`` / ``REPLACE INTO`` resolves a key conflict by deleting the old
row *without* firing delete triggers (unless ``recursive_triggers`` is on), so an existing event
could be rewritten. ``audit_no_replace`` refuses an insert whose ``event_id`` is already taken,
before the conflict resolution runs; ``audit_positive_id`` refuses a row with an id of zero or
below, the one value a BEFORE INSERT trigger cannot tell from "assign one for me" (-1), so no
such row can exist to be replaced. PostgreSQL has no REPLACE; its ``INSERT … ON CONFLICT DO
UPDATE`` is an UPDATE and meets ``audit_no_change``.
"""

TABLE = "audit_auditevent"
MESSAGE = "audit events are append-only"

# In a BEFORE INSERT trigger NEW.event_id is -1 when the database assigns the id.
SQLITE_REPLACE_INSTALL = [
    f"CREATE TRIGGER IF NOT EXISTS audit_no_replace BEFORE INSERT ON {TABLE} "
    f"WHEN NEW.event_id > 0 AND EXISTS (SELECT 1 FROM {TABLE} WHERE event_id = NEW.event_id) "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}: REPLACE refused'); END;",
    f"CREATE TRIGGER IF NOT EXISTS audit_positive_id AFTER INSERT ON {TABLE} "
    f"WHEN NEW.event_id <= 0 "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}: event ids start at 1'); END;",
]
SQLITE_REPLACE_DROP = [
    "DROP TRIGGER IF EXISTS audit_no_replace;",
    "DROP TRIGGER IF EXISTS audit_positive_id;",
]

SQLITE_INSTALL = [
    f"CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON {TABLE} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;",
    f"CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON {TABLE} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;",
    *SQLITE_REPLACE_INSTALL,
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS audit_no_update;",
    "DROP TRIGGER IF EXISTS audit_no_delete;",
    *SQLITE_REPLACE_DROP,
]

POSTGRES_INSTALL = [
    f"""CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION '{MESSAGE}: % refused on %', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END;
    $$ LANGUAGE plpgsql;""",
    f"DROP TRIGGER IF EXISTS audit_no_change ON {TABLE};",
    f"CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON {TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();",
    f"DROP TRIGGER IF EXISTS audit_no_truncate ON {TABLE};",
    f"CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON {TABLE} "
    "FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse_change();",
]
POSTGRES_DROP = [
    f"DROP TRIGGER IF EXISTS audit_no_change ON {TABLE};",
    f"DROP TRIGGER IF EXISTS audit_no_truncate ON {TABLE};",
]


def install_sql(vendor: str) -> list[str]:
    return {"sqlite": SQLITE_INSTALL, "postgresql": POSTGRES_INSTALL}.get(vendor, [])


def drop_sql(vendor: str) -> list[str]:
    return {"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}.get(vendor, [])


def install(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    statements = install_sql(vendor)
    if not statements:
        raise RuntimeError(f"no append-only triggers for database vendor {vendor!r}")
    for sql in statements:
        schema_editor.execute(sql, params=None)


def drop(schema_editor) -> None:
    for sql in drop_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql, params=None)


def install_replace_guard(schema_editor) -> None:
    """Migration 0003: the SQLite REPLACE guard (nothing to add on PostgreSQL)."""
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_REPLACE_INSTALL:
            schema_editor.execute(sql, params=None)


def drop_replace_guard(schema_editor) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_REPLACE_DROP:
            schema_editor.execute(sql, params=None)
