"""The worker index holds only jobs that have a worker.

``job_worker_idx`` indexed every job's ``worker_id``, most of them empty: every enqueue wrote an
entry under the empty key (on SQLite a page of its own in every single-job commit), and every
claim moved it. ``job_worker_set_idx`` leaves never-claimed jobs out; the jobs list's worker
filter says ``worker_id <> ''`` so both databases use it.

PostgreSQL builds the new index and drops the old one CONCURRENTLY (the migration is not
atomic), so producers and executors keep writing on a large table; SQLite does both plainly.
"""

from importlib import import_module

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations, models
from django.db.migrations.operations import RemoveIndex

# CREATE INDEX CONCURRENTLY on PostgreSQL, plain elsewhere (defined with inbox 0009).
AddIndexOnline = import_module("inbox.migrations.0009_console_scale").AddIndexOnline


class RemoveIndexOnline(RemoveIndexConcurrently):
    """DROP INDEX CONCURRENTLY on PostgreSQL, a plain DROP INDEX elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inbox", "0010_finished_count"),
    ]

    operations = [
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(("worker_id", ""), _negated=True),
                fields=["worker_id"],
                name="job_worker_set_idx",
            ),
        ),
        RemoveIndexOnline(model_name="job", name="job_worker_idx"),
    ]
