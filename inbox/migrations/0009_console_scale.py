"""Indexes the console needs at 10M jobs.

- ``job_held_scope_idx`` (scope) over held jobs: the workers page counts each scope's held jobs;
  the lease index has no scope, so every count read every held row from the heap (at 1M jobs
  four such counts took 330 ms, and they grow with the table).
- ``job_approval_queue_idx`` (created_at, job_id, job_type) over CREATED jobs with no approval:
  the approvals queue in its own order and its capped counts, and the dashboard's pending tile,
  which the planner otherwise answered with a sequential scan that stops early only while
  CREATED rows are common.
- ``job_supersedes_idx`` (supersedes) where it is set: the reconcile page looks up the fresh
  DELETE of each case on the page; without it that was a sequential scan of the whole table
  (300 ms at 1M jobs).

PostgreSQL builds them CONCURRENTLY (the migration is not atomic), so producers and executors
keep writing while a large table is indexed; SQLite builds them plainly.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.migrations.operations import AddIndex


class AddIndexOnline(AddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY on PostgreSQL, a plain CREATE INDEX elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inbox", "0008_lean_job_indexes"),
    ]

    operations = [
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ["CLAIMED", "EXECUTING"])),
                fields=["scope"],
                name="job_held_scope_idx",
            ),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(("approval_id__isnull", True), ("state", "CREATED")),
                fields=["created_at", "job_id", "job_type"],
                name="job_approval_queue_idx",
            ),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(("supersedes__isnull", False)),
                fields=["supersedes"],
                name="job_supersedes_idx",
            ),
        ),
    ]
