"""PostgreSQL: an index only the claim can use, so its plan is made once.

The executor's turn is one prepared statement (its outcomes and its next claim). PostgreSQL
planned it anew on every execution: the claim's scope was a parameter, and its generic plan
could not be trusted, because after a bulk load (statistics saying every row is READY) the
creation-order index ``job_created_idx`` serves the claim's ``ORDER BY created_at, job_id``
as cheaply as ``job_claim_idx`` does on paper, and in truth walks every finished job first.
Planning was a fifth of the server's CPU per job.

``job_claim_order_idx`` orders READY jobs of a scope by ``created_at AT TIME ZONE 'UTC'`` (the
same order: a one-to-one map of the instant) and ``job_id``. The claim orders by that
expression, which no other index provides, so every plan of it, generic or not, takes this
index. ``job_claim_idx`` stays for the console's READY readers (ranges on ``created_at``).

Only on PostgreSQL, outside Django's model state (like the ``_like`` indexes Django adds there
itself): SQLite plans each statement with the values in hand, so it has nothing to gain and
every enqueue would write one index more. Built CONCURRENTLY (the migration is not atomic),
so producers and executors keep writing while a large table is indexed.
"""

from django.db import migrations

NAME = "job_claim_order_idx"
CREATE = (
    f"CREATE INDEX CONCURRENTLY {NAME} ON inbox_job "
    "(scope, (created_at AT TIME ZONE 'UTC'), job_id) WHERE state = 'READY'"
)
DROP = f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}"


def create(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        # A build interrupted before may have left an invalid index of that name.
        schema_editor.execute(DROP)
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inbox", "0011_worker_index_partial"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
