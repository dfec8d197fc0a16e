"""The job and run indexes of the audit log hold only the events that have a job, or a run:
a job's event has no run, so writing it no longer adds a NULL entry to the run index (and a
run's event none to the job index). Every lookup by job or run is an equality, which
the partial indexes serve. One index write fewer per event on the hottest table.

PostgreSQL builds CONCURRENTLY (not atomic): writers go on while 30M events are indexed.
Unapplying it is refused like every audit migration (``audit.history``).
"""

from django.db import migrations, models

from audit.history import refuse_unless_allowed

SUBJECTS = (("audit_job_idx", "job_id"), ("audit_run_idx", "run_id"))


def forward(apps, schema_editor):
    _rebuild(schema_editor, partial=True)


def backward(apps, schema_editor):
    refuse_unless_allowed(apps, schema_editor)
    _rebuild(schema_editor, partial=False)


def _rebuild(schema_editor, *, partial: bool) -> None:
    run = schema_editor.execute
    pg = schema_editor.connection.vendor == "postgresql"
    for name, column in SUBJECTS:
        where = f" WHERE {column} IS NOT NULL" if partial else ""
        if pg:
            run(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_new "
                f"ON audit_auditevent ({column}, event_id){where}"
            )
            run(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            run(f"ALTER INDEX {name}_new RENAME TO {name}")
        else:
            run(f"DROP INDEX IF EXISTS {name}")
            run(f"CREATE INDEX {name} ON audit_auditevent ({column}, event_id){where}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("audit", "0004_retry_scheduled_event"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
            state_operations=[
                migrations.RemoveIndex(model_name="auditevent", name="audit_job_idx"),
                migrations.AddIndex(
                    model_name="auditevent",
                    index=models.Index(
                        condition=models.Q(("job_id__isnull", False)),
                        fields=["job_id", "event_id"],
                        name="audit_job_idx",
                    ),
                ),
                migrations.RemoveIndex(model_name="auditevent", name="audit_run_idx"),
                migrations.AddIndex(
                    model_name="auditevent",
                    index=models.Index(
                        condition=models.Q(("run_id__isnull", False)),
                        fields=["run_id", "event_id"],
                        name="audit_run_idx",
                    ),
                ),
            ],
        ),
    ]
