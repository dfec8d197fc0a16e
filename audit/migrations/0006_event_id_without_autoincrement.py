"""SQLite: the event id without AUTOINCREMENT (``audit.models.EventIdField``).

AUTOINCREMENT made every transaction that records an event also write the ``sqlite_sequence``
page. Without it SQLite gives a new row one more than the largest id in the table, and since no
event is ever deleted or replaced (the triggers refuse both) that is the same number
AUTOINCREMENT would have given.

SQLite cannot change a column's definition in place: Django rebuilds the table (a copy of
every event under the same ids, in this migration's transaction), which drops the table's
triggers with the old table; they are installed again right after, in the same transaction.
PostgreSQL: nothing changes. Unapplying it is refused like every audit migration.
"""

from django.db import migrations

import audit.models


def reinstall_triggers(apps, schema_editor):
    """After a rebuild of the table on SQLite (either way): its append-only triggers again."""
    from audit import triggers

    if schema_editor.connection.vendor == "sqlite":
        triggers.install(schema_editor)


def refuse(apps, schema_editor):
    from audit import history

    history.refuse_unless_allowed(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_partial_subject_indexes")]

    operations = [
        # Backwards this runs last: the rebuild back to AUTOINCREMENT dropped the triggers too.
        migrations.RunPython(migrations.RunPython.noop, reinstall_triggers, elidable=False),
        migrations.AlterField(
            model_name="auditevent",
            name="event_id",
            field=audit.models.EventIdField(primary_key=True, serialize=False),
        ),
        migrations.RunPython(reinstall_triggers, refuse, elidable=False),
    ]
