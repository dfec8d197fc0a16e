"""The only creator of audit events (DESIGN §2).

Call it inside the transaction of the change it describes, so the event and the change commit or
roll back together.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from audit.models import AuditEvent, EventType

# The longest operator reason an event records: the console forms and the commands both cut
# or refuse at this length.
REASON_MAX = 2000


@dataclass(frozen=True, slots=True)
class Event:
    """An event not yet written; used for bulk writes (a batch claim)."""

    event_type: EventType | str
    actor: str
    job_id: str | None = None
    run_id: str | None = None
    result_code: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    at: dt.datetime | None = None

    def to_model(self) -> AuditEvent:
        kwargs: dict[str, Any] = {
            "event_type": str(self.event_type),
            "actor": self.actor,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "result_code": self.result_code or "",
            "detail": self.detail or {},
        }
        if self.at is not None:
            kwargs["created_at"] = self.at
        return AuditEvent(**kwargs)


def record_event(
    *,
    event_type: EventType | str,
    actor: str,
    job_id: str | None = None,
    run_id: str | None = None,
    result_code: str = "",
    detail: dict[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> AuditEvent:
    """Append one event. ``at`` is the database time of the change (tests may pin it)."""
    if not actor:
        raise ValueError("an audit event needs an actor")
    event = Event(event_type, actor, job_id, run_id, result_code, detail or {}, at).to_model()
    event.save(force_insert=True)
    return event


def record_events(events: Iterable[Event]) -> int:
    """Append many events in one INSERT (batch claims, batched job steps, sweeps).

    Events that carry their time (every transition's do) go in as one plain
    ``INSERT … SELECT`` from a JSON array: the executor's hot path writes two to twenty rows per
    statement, and building model instances for ``bulk_create`` cost more than the insert
    itself. Rows are inserted in the given order. Returns the number of rows written.
    """
    items = list(events)
    if not items:
        return 0
    if any(not item.actor for item in items):
        raise ValueError("an audit event needs an actor")
    if any(item.at is None for item in items):
        # The database clock must stamp these: let the column default do it.
        return len(AuditEvent.objects.bulk_create(e.to_model() for e in items))
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        {
            "job_id": item.job_id,
            "run_id": item.run_id,
            "event_type": str(item.event_type),
            "actor": item.actor,
            "result_code": item.result_code or "",
            "detail": item.detail or {},
            "created_at": str(adapt(item.at)),
        }
        for item in items
    ]
    columns = "job_id, run_id, event_type, actor, result_code, detail, created_at"
    # The rows travel as one JSON array: the statement text is the same for any number of
    # rows (the driver parses and caches it once), and one json.dumps in C encodes them all.
    if connection.vendor == "postgresql":
        source = (
            f"SELECT {columns} FROM jsonb_to_recordset(%s::jsonb) AS x(job_id text, "
            "run_id text, event_type text, actor text, result_code text, detail jsonb, "
            "created_at timestamptz)"
        )
    else:
        picks = ", ".join(f"json_extract(value, '$.{c}')" for c in columns.split(", "))
        source = f"SELECT {picks} FROM json_each(%s) ORDER BY key"
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) {source}", [json.dumps(rows)])
    return len(items)
