"""Prefix search on PostgreSQL: varchar_pattern_ops indexes for object_id and
mission_id, so ``LIKE 'prefix%'`` is an index range whatever the database's collation.

job_id and idempotency_key already have one: Django creates a ``*_like`` index for every
primary-key and unique CharField on PostgreSQL. SQLite needs nothing: the console searches it
with a range on the BINARY collation, which the existing plain indexes serve.

Built CONCURRENTLY (the migration is not atomic), so producers and executors keep writing
while a large table is indexed.
"""

from django.db import migrations

INDEXES = {
    "job_object_prefix_idx": "object_id",
    "job_mission_prefix_idx": "mission_id",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, column in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} "
            f"ON inbox_job ({column} varchar_pattern_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inbox", "0005_cancel_permission"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
