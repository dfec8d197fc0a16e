"""The type index leaves out the routine events: the REQUESTED, READY, CLAIMED,
STARTED, AUTHORIZED, EXECUTED and SUCCEEDED rows every job writes, and lease renewals, about
seven of every eight rows of the log. Those types are too common to need an index (a filter on
one reads the newest events by id and keeps about one in seven); the rare ones an operator
looks for stay indexed. Every job's events skip an index entry each: on SQLite an enqueue's
commit writes two or three WAL pages fewer of about twenty, and the index shrinks by about as
much as the log is routine.

PostgreSQL builds the new index CONCURRENTLY before dropping the old one (not atomic): writers
go on while 30M events are indexed. Unapplying it is refused like every audit migration
(``audit.history``).
"""

from django.db import migrations, models

from audit.history import refuse_unless_allowed

ROUTINE = (
    "REQUESTED",
    "READY",
    "CLAIMED",
    "STARTED",
    "AUTHORIZED",
    "EXECUTED",
    "SUCCEEDED",
    "LEASE_RENEWED",
)


def _index(name: str, *, partial: bool) -> models.Index:
    condition = ~models.Q(event_type__in=ROUTINE) if partial else None
    return models.Index(fields=["event_type", "event_id"], condition=condition, name=name)


def forward(apps, schema_editor):
    _rebuild(apps, schema_editor, partial=True)


def backward(apps, schema_editor):
    refuse_unless_allowed(apps, schema_editor)
    _rebuild(apps, schema_editor, partial=False)


def _rebuild(apps, schema_editor, *, partial: bool) -> None:
    model = apps.get_model("audit", "AuditEvent")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX CONCURRENTLY IF EXISTS audit_type_idx_new")
        schema_editor.add_index(model, _index("audit_type_idx_new", partial=partial), True)
        schema_editor.execute("DROP INDEX CONCURRENTLY IF EXISTS audit_type_idx")
        schema_editor.execute("ALTER INDEX audit_type_idx_new RENAME TO audit_type_idx")
    else:
        # Django's own SQL for the index, so its condition reads as the ORM writes the
        # query's (SQLite matches a partial index's WHERE against the query's terms).
        schema_editor.execute("DROP INDEX IF EXISTS audit_type_idx")
        schema_editor.add_index(model, _index("audit_type_idx", partial=partial))


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("audit", "0006_event_id_without_autoincrement"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
            state_operations=[
                migrations.RemoveIndex(model_name="auditevent", name="audit_type_idx"),
                migrations.AddIndex(
                    model_name="auditevent",
                    index=_index("audit_type_idx", partial=True),
                ),
            ],
        ),
    ]
