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

    Events that carry their time (every transition's do) go in as one plain multi-row
    ``INSERT … VALUES``: the executor's hot path writes two to twenty rows per statement, and
    building model instances for ``bulk_create`` cost more than the insert itself. Returns the
    number of rows written.
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
    detail = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    row = f"(%s, %s, %s, %s, %s, {detail}, %s)"
    adapt = connection.ops.adapt_datetimefield_value
    params: list[Any] = []
    for item in items:
        params += [
            item.job_id,
            item.run_id,
            str(item.event_type),
            item.actor,
            item.result_code or "",
            json.dumps(item.detail or {}),
            adapt(item.at),
        ]
    sql = (
        f"INSERT INTO {table} (job_id, run_id, event_type, actor, result_code, detail, created_at) "
        f"VALUES {', '.join([row] * len(items))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return len(items)
