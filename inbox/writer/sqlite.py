"""SQLite's own statements: an attempt's one guarded UPDATE (its events follow it from
Python: SQLite has no data-modifying CTEs), the rows of a batch of new jobs, and the throughput
counts, all in the move's transaction (IMMEDIATE: writers take turns)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

from audit.events import Event, record_events
from core.clock import db_now
from core.db import prepared_cursor
from inbox.models import FinishedCount, Job
from inbox.writer.rows import INSERT_COLUMNS, rows_from
from inbox.writer.sql import update_sql

if TYPE_CHECKING:
    from inbox.writer.plan import Plan


def count_finished(jobs: Iterable[Job]) -> None:
    """SQLite: the same counts as ``count_finished_sql``, from the moved rows, in the move's
    transaction."""
    counts: dict[tuple[dt.datetime, str, str], int] = {}
    for job in jobs:
        key = (job.updated_at.replace(second=0, microsecond=0), job.scope, str(job.state))
        counts[key] = counts.get(key, 0) + 1
    table = FinishedCount._meta.db_table
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (minute, scope, state, shard, finished) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (minute, scope, state, shard) "
            "DO UPDATE SET finished = finished + excluded.finished",
            [(adapt(m), scope, state, os.getpid(), n) for (m, scope, state), n in counts.items()],
        )


def insert_jobs(jobs: list[Job]) -> set[str]:
    """SQLite: the jobs inserted one prepared row INSERT each, in the caller's transaction;
    the ids stored (a key already present is skipped: ON CONFLICT DO NOTHING). A JSON array
    read back with json_extract would be parsed once per column of every row."""
    adapt = connection.ops.adapt_datetimefield_value
    columns = ", ".join(INSERT_COLUMNS)
    table = connection.ops.quote_name(Job._meta.db_table)
    marks = ", ".join(["%s"] * len(INSERT_COLUMNS))
    sql = (
        f"INSERT INTO {table} ({columns}, attempt_count, worker_id, claim_id, result_code, "
        f"last_error, note) VALUES ({marks}, 0, '', '', '', '', '') ON CONFLICT DO NOTHING"
    )
    stored: set[str] = set()
    texts: dict[dt.datetime, str] = {}  # created_at and updated_at are one value: adapt it once
    with prepared_cursor() as cursor:
        for job in jobs:
            row = [getattr(job, c) for c in INSERT_COLUMNS]
            row[_INSERT_PAYLOAD] = json.dumps(row[_INSERT_PAYLOAD])
            for i in _INSERT_TIMES:
                if (value := row[i]) is not None:
                    if (text := texts.get(value)) is None:
                        text = texts[value] = str(adapt(value))
                    row[i] = text
            cursor.execute(sql, row)
            if cursor.rowcount == 1:
                stored.add(job.job_id)
    return stored


_INSERT_PAYLOAD = INSERT_COLUMNS.index("payload")


_INSERT_TIMES = tuple(INSERT_COLUMNS.index(c) for c in ("run_after", "created_at", "updated_at"))


def write(active: Sequence[tuple[int, Plan]]) -> dict[int, dict[str, list[Any]]]:
    """An attempt's one plan as its guarded UPDATE … RETURNING; its rows by id."""
    if len(active) > 1:
        raise ValueError("SQLite writes one move per statement")
    n, plan = active[0]
    sql, params = update_sql(plan, picked=None)
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return {n: rows_from(cursor.fetchall())}


def store(fresh: list[tuple[Job, list[Event]]], at: dt.datetime | None) -> dict[str, dt.datetime]:
    """New jobs and, for those actually stored, their creation events, in the caller's
    transaction: one INSERT per job, then the events; each stored job's ``created_at``."""
    now = db_now(at)
    stamps = {job.job_id: now + dt.timedelta(microseconds=n) for n, (job, _e) in enumerate(fresh)}
    for job, _events in fresh:
        job.created_at = job.updated_at = stamps[job.job_id]
    inserted = insert_jobs([job for job, _events in fresh])
    record_events(
        Event(
            e.event_type, e.actor, e.job_id, e.run_id, e.result_code, e.detail, stamps[job.job_id]
        )
        for job, job_events in fresh
        if job.job_id in inserted
        for e in job_events
    )
    return {job_id: stamps[job_id] for job_id in inserted}
