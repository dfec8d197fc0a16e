"""The only creator of audit events; events are never updated or deleted.

Call it inside the transaction of the change it describes, so the event and the change commit or
roll back together.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from audit.models import AuditEvent, EventType
from core.db import prepared_cursor

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

    Events that carry their time (every transition's do) go in as plain INSERTs, not model
    instances (``bulk_create`` cost more than the insert itself): on PostgreSQL one
    ``INSERT … SELECT`` from a JSON array, on SQLite one prepared row INSERT per event. Rows
    are inserted in the given order. Returns the number of rows written.
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
    columns = "job_id, run_id, event_type, actor, result_code, detail, created_at"
    if connection.vendor != "postgresql":
        return _insert_sqlite(items, table, columns)
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
    # PostgreSQL: the rows travel as one JSON array, so the statement text is the same for
    # any number of rows (prepared once), and one json.dumps in C encodes them all.
    source = (
        f"SELECT {columns} FROM jsonb_to_recordset(%s::jsonb) AS x(job_id text, "
        "run_id text, event_type text, actor text, result_code text, detail jsonb, "
        "created_at timestamptz)"
    )
    with prepared_cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) {source}", [json.dumps(rows)])
    return len(items)


def _insert_sqlite(items: list[Event], table: str, columns: str) -> int:
    """SQLite: one prepared single-row INSERT run for each row (executemany). Reading the
    rows out of one JSON text with json_extract would parse it once per column. The events of
    one change share their time: it is adapted once."""
    adapt = connection.ops.adapt_datetimefield_value
    texts: dict[dt.datetime, str] = {}
    params = []
    for item in items:
        if (text := texts.get(item.at)) is None:
            text = texts[item.at] = str(adapt(item.at))
        params.append(
            (
                item.job_id,
                item.run_id,
                str(item.event_type),
                item.actor,
                item.result_code or "",
                json.dumps(item.detail or {}),
                text,
            )
        )
    with prepared_cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s)", params
        )
    return len(items)


def joined_insert_sql(events: Sequence[Event], *, rows: str, time_column: str) -> tuple[str, str]:
    """PostgreSQL: ``events`` as an ``INSERT … SELECT`` for a data-modifying CTE of the very
    statement that makes the change they describe — the event and its change are then one
    statement, one round trip. Each event is written only if its job is among the rows the CTE
    named ``rows`` returns (a guarded UPDATE's RETURNING: a row the guards refused gets no
    event), stamped with that row's ``time_column`` (the change's database time), in the given
    order. Returns (the INSERT's SQL, its one parameter: the events as a JSON array).
    """
    if any(not item.actor or not item.job_id for item in events):
        raise ValueError("an audit event needs an actor, and a joined one its job")
    table = AuditEvent._meta.db_table
    payload = json.dumps(
        [
            {
                "n": n,
                "job_id": item.job_id,
                "event_type": str(item.event_type),
                "actor": item.actor,
                "result_code": item.result_code or "",
                "detail": item.detail or {},
            }
            for n, item in enumerate(events)
        ]
    )
    sql = (
        f'INSERT INTO "{table}" (job_id, run_id, event_type, actor, result_code, detail, '
        f"created_at) SELECT e.job_id, NULL, e.event_type, e.actor, e.result_code, e.detail, "
        f"r.{time_column} FROM jsonb_to_recordset(%s::jsonb) AS e(n integer, job_id text, "
        "event_type text, actor text, result_code text, detail jsonb) "
        f"JOIN {rows} AS r ON r.job_id = e.job_id ORDER BY e.n"
    )
    return sql, payload


@dataclass(frozen=True, slots=True)
class RowEvent:
    """An event a data-modifying statement writes for each row it changed: its type, and its
    detail and result code as SQL expressions over that row (alias ``r``). For the few
    transitions whose events are a function of the row itself, so they ride in the statement
    that makes the change."""

    event_type: str
    detail_sql: str
    result_code_sql: str = "''"


def row_events_insert_sql(
    events: Sequence[RowEvent], *, rows: str, time_column: str, order_by: str
) -> str:
    """PostgreSQL: an ``INSERT … SELECT`` writing ``events`` for every row the CTE named
    ``rows`` returns (stamped with its ``time_column``, ordered by ``order_by`` and then the
    events' order), for a data-modifying CTE of the statement that makes the change. Its one
    parameter is the actor."""
    if not events:
        raise ValueError("no events to write")
    table = AuditEvent._meta.db_table
    kinds = ", ".join(f"({k}, '{e.event_type}')" for k, e in enumerate(events, start=1))
    detail = " ".join(f"WHEN {k} THEN {e.detail_sql}" for k, e in enumerate(events, start=1))
    code = " ".join(f"WHEN {k} THEN {e.result_code_sql}" for k, e in enumerate(events, start=1))
    return (
        f'INSERT INTO "{table}" (job_id, run_id, event_type, actor, result_code, detail, '
        f"created_at) SELECT r.job_id, NULL, e.event_type, %s::text, CASE e.k {code} END, "
        f"CASE e.k {detail} END, r.{time_column} FROM {rows} AS r "
        f"CROSS JOIN (VALUES {kinds}) AS e(k, event_type) ORDER BY {order_by}, e.k"
    )


@dataclass(frozen=True, slots=True)
class PairedEvents:
    """Up to two events for each row a statement moves, known before the write but different
    from row to row (a finished job's EXECUTED and its outcome), for ``paired_insert_sql``.

    Each event's detail is the row's own detail object with ``from`` (``frm``) and ``to``
    (the row's new state) set: those two always tell the move. ``rows`` holds, per row in the
    order the events are written: (job id, first result code, first detail or None for no
    first event, second result code, second detail)."""

    actor: str
    frm: str
    first_type: str
    second_type: str
    rows: Sequence[tuple[str, str, dict[str, Any] | None, str, dict[str, Any]]]

    def params(self) -> list[Any]:
        """``paired_insert_sql``'s parameters: one JSON array for all the rows."""
        if not self.actor:
            raise ValueError("an audit event needs an actor")
        items = [
            {"n": n, "j": job_id, "fc": fc, "f": first, "sc": sc, "s": second}
            for n, (job_id, fc, first, sc, second) in enumerate(self.rows)
        ]
        return [self.first_type, self.second_type, self.actor, self.frm, json.dumps(items)]


def paired_insert_sql(*, rows: str, time_column: str) -> str:
    """PostgreSQL: ``PairedEvents`` as an ``INSERT … SELECT`` for a data-modifying CTE of the
    statement that makes the change, like ``joined_insert_sql``: only the rows the CTE named
    ``rows`` returns get theirs, stamped with its ``time_column``. The rows travel as one
    compact JSON array and the common parts as parameters (``PairedEvents.params``): the
    statement text is the same for every batch, and there is no event object to build or
    encode per event."""
    table = AuditEvent._meta.db_table
    return (
        f'INSERT INTO "{table}" (job_id, run_id, event_type, actor, result_code, detail, '
        "created_at) SELECT r.job_id, NULL, CASE e.k WHEN 1 THEN %s::text ELSE %s::text END, "
        "%s::text, CASE e.k WHEN 1 THEN x.fc ELSE x.sc END, "
        f"CASE e.k WHEN 1 THEN x.f ELSE x.s END "
        "|| jsonb_build_object('from', %s::text, 'to', r.state), "
        f"r.{time_column} "
        "FROM jsonb_to_recordset(%s::jsonb) AS x(n integer, j text, fc text, f jsonb, sc text, "
        f"s jsonb) JOIN {rows} AS r ON r.job_id = x.j CROSS JOIN (VALUES (1), (2)) AS e(k) "
        "WHERE e.k = 2 OR x.f IS NOT NULL ORDER BY x.n, e.k"
    )
