"""Fewer, better-fitting indexes on the job table (the console at millions of jobs).

- ``job_lease_idx`` becomes (lease_until, job_id) over held jobs: the sweep asks for
  ``ORDER BY lease_until, job_id LIMIT n``, which this index answers in order. An ordered index
  scan stops after n rows and marks the dead entries a busy queue leaves behind; the old
  one-column index made the planner bitmap-scan every lapsed entry, dead or alive (seen: 172,578
  entries read to find none, with autovacuum behind).
- PostgreSQL: ``object_id`` and ``mission_id`` keep one index each, a varchar_pattern_ops one
  (it serves equality and ``LIKE 'prefix%'``); the plain ones of migration 0001 doubled the
  index writes of every insert and transition for no query. The pattern index of migration 0006
  is renamed, not rebuilt. SQLite keeps its plain indexes (operator classes mean nothing there).

PostgreSQL builds CONCURRENTLY (the migration is not atomic), so producers and executors keep
writing while a large table is indexed.
"""

from django.db import migrations, models

HELD = "state IN ('CLAIMED', 'EXECUTING')"


def forward(apps, schema_editor):
    run = schema_editor.execute
    if schema_editor.connection.vendor == "postgresql":
        run(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_lease_idx_new "
            f"ON inbox_job (lease_until, job_id) WHERE {HELD}"
        )
        run("DROP INDEX CONCURRENTLY IF EXISTS job_lease_idx")
        run("ALTER INDEX job_lease_idx_new RENAME TO job_lease_idx")
        for column, name in (("object_id", "job_object"), ("mission_id", "job_mission")):
            run(f"DROP INDEX CONCURRENTLY IF EXISTS {name}_idx")
            run(f"ALTER INDEX IF EXISTS {name}_prefix_idx RENAME TO {name}_idx")
            run(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_idx "
                f"ON inbox_job ({column} varchar_pattern_ops)"
            )
        return
    run("DROP INDEX IF EXISTS job_lease_idx")
    run(f"CREATE INDEX job_lease_idx ON inbox_job (lease_until, job_id) WHERE {HELD}")


def backward(apps, schema_editor):
    run = schema_editor.execute
    if schema_editor.connection.vendor == "postgresql":
        run(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS job_lease_idx_old "
            f"ON inbox_job (lease_until) WHERE {HELD}"
        )
        run("DROP INDEX CONCURRENTLY IF EXISTS job_lease_idx")
        run("ALTER INDEX job_lease_idx_old RENAME TO job_lease_idx")
        for column, name in (("object_id", "job_object"), ("mission_id", "job_mission")):
            run(f"ALTER INDEX IF EXISTS {name}_idx RENAME TO {name}_prefix_idx")
            run(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_idx ON inbox_job ({column})")
        return
    run("DROP INDEX IF EXISTS job_lease_idx")
    run(f"CREATE INDEX job_lease_idx ON inbox_job (lease_until) WHERE {HELD}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inbox", "0007_producer_token"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="job_lease_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("state__in", ["CLAIMED", "EXECUTING"])),
                        fields=["lease_until", "job_id"],
                        name="job_lease_idx",
                    ),
                ),
                migrations.RemoveIndex(model_name="job", name="job_object_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        fields=["object_id"],
                        name="job_object_idx",
                        opclasses=["varchar_pattern_ops"],
                    ),
                ),
                migrations.RemoveIndex(model_name="job", name="job_mission_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        fields=["mission_id"],
                        name="job_mission_idx",
                        opclasses=["varchar_pattern_ops"],
                    ),
                ),
            ],
        ),
    ]
