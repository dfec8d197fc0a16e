"""Database triggers that make the audit table append-only for every client, raw SQL included.

Kept here (not inline in the migration) so the test harness can reinstall them after Django's
test flush, which must empty the table between transactional tests.
"""

TABLE = "audit_auditevent"
MESSAGE = "audit events are append-only"

SQLITE_INSTALL = [
    f"CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON {TABLE} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;",
    f"CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON {TABLE} "
    f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS audit_no_update;",
    "DROP TRIGGER IF EXISTS audit_no_delete;",
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
