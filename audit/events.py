"""The only creator of audit events (DESIGN §2).

Call it inside the transaction of the change it describes, so the event and the change commit or
roll back together.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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


def record_events(events: Iterable[Event]) -> list[AuditEvent]:
    """Append many events in one INSERT (batch claims, sweeps)."""
    rows = [e.to_model() for e in events]
    if any(not row.actor for row in rows):
        raise ValueError("an audit event needs an actor")
    return AuditEvent.objects.bulk_create(rows)
