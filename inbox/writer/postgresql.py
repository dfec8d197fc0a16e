"""PostgreSQL's own statements: an attempt's moves and their events as one statement of
data-modifying CTEs, the creation of a batch of jobs with their events as another, and the
throughput counts riding in the statement that finishes the jobs."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

from audit.events import Event, joined_insert_sql, paired_insert_sql, row_events_insert_sql
from audit.models import AuditEvent
from core.db import prepared_cursor
from inbox.models import FINISHED_STATES, FinishedCount, Job
from inbox.writer.rows import INSERT_COLUMNS, rows_from
from inbox.writer.sql import CLAIM_ORDER, pick_sql, update_sql

if TYPE_CHECKING:
    from inbox.writer.plan import Plan


def count_finished_sql(moved: Sequence[str]) -> str:
    """PostgreSQL: the INSERT that adds the rows ``moved`` (CTE names) into finished states to
    this process's per-minute counts, as a CTE of the statement that moves them (no round trip
    of its own). One parameter: the shard."""
    table = FinishedCount._meta.db_table
    rows = " UNION ALL ".join(f"SELECT updated_at, scope, state FROM {name}" for name in moved)
    return (
        f"INSERT INTO {table} (minute, scope, state, shard, finished) "
        f"SELECT date_trunc('minute', updated_at, 'UTC'), scope, state, %s::integer, count(*) "
        f"FROM ({rows}) AS ended GROUP BY 1, 2, 3 "
        "ON CONFLICT (minute, scope, state, shard) "
        f"DO UPDATE SET finished = {table}.finished + EXCLUDED.finished"
    )


_PG_TYPES = {
    "job_version": "integer",
    "max_attempts": "integer",
    "payload": "jsonb",
    "run_after": "timestamptz",
}


def store(fresh: list[tuple[Job, list[Event]]], at: dt.datetime | None) -> dict[str, dt.datetime]:
    columns = [c for c in INSERT_COLUMNS if c not in ("created_at", "updated_at")]
    adapt = connection.ops.adapt_datetimefield_value
    rows, events = [], []
    for n, (job, job_events) in enumerate(fresh):
        row = {c: getattr(job, c) for c in columns}
        if row["run_after"] is not None:
            row["run_after"] = str(adapt(row["run_after"]))
        rows.append({**row, "n": n})
        events += [
            {
                "job_id": e.job_id,
                "k": k,
                "event_type": str(e.event_type),
                "actor": e.actor,
                "result_code": e.result_code or "",
                "detail": e.detail or {},
            }
            for k, e in enumerate(job_events)
        ]
    spec = ", ".join(f"{c} {_PG_TYPES.get(c, 'text')}" for c in columns)
    names = ", ".join(columns)
    table = connection.ops.quote_name(Job._meta.db_table)
    audit = connection.ops.quote_name(AuditEvent._meta.db_table)
    sql = f"""
WITH base AS (SELECT COALESCE(%s::timestamptz, statement_timestamp()) AS t),
src AS (SELECT * FROM jsonb_to_recordset(%s::jsonb) AS x({spec}, n integer)),
ins AS (
    INSERT INTO {table} ({names}, created_at, updated_at,
                         attempt_count, worker_id, claim_id, result_code, last_error, note)
    SELECT {names}, base.t + src.n * interval '1 microsecond',
           base.t + src.n * interval '1 microsecond', 0, '', '', '', '', ''
    FROM src, base ORDER BY src.n
    ON CONFLICT DO NOTHING
    RETURNING job_id, created_at
),
ev AS (
    INSERT INTO {audit} (job_id, run_id, event_type, actor, result_code, detail, created_at)
    SELECT e.job_id, NULL, e.event_type, e.actor, e.result_code, e.detail, ins.created_at
    FROM jsonb_to_recordset(%s::jsonb)
         AS e(job_id text, k integer, event_type text, actor text, result_code text, detail jsonb)
    JOIN ins ON ins.job_id = e.job_id
    ORDER BY ins.created_at, e.k
)
SELECT job_id, created_at FROM ins"""
    with prepared_cursor() as cursor:
        cursor.execute(sql, [at, json.dumps(rows), json.dumps(events)])
        return dict(cursor.fetchall())


def write(active: Sequence[tuple[int, Plan]]) -> dict[int, dict[str, list[Any]]]:
    """The one statement of an attempt: each plan's guarded UPDATE with the events that ride
    in it, as data-modifying CTEs: one round trip however many plans. One statement text per
    shape (rows travel as array parameters), run through ``prepared_cursor``: PostgreSQL plans
    it once per connection. The returned rows by id, per plan number."""
    ctes: list[str] = []
    params: list[Any] = []
    update = ""
    for n, plan in active:
        update = _add_ctes(n, plan, ctes, params)
    ended = [f"m{n}" for n, plan in active if plan.move.to in FINISHED_STATES]
    if ended:
        ctes.append(f"f AS ({count_finished_sql(ended)})")
        params.append(os.getpid())
    if len(active) == 1 and len(ctes) == 1:
        # A plain UPDATE … RETURNING.
        with prepared_cursor() as cursor:
            cursor.execute(update, params)
            return {active[0][0]: rows_from(cursor.fetchall())}
    parts = " UNION ALL ".join(f"SELECT {n} AS part, m{n}.* FROM m{n}" for n, _p in active)
    with prepared_cursor() as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} {parts}", params)
        fetched = cursor.fetchall()
    by_part: dict[int, list[Any]] = {n: [] for n, _p in active}
    for raw in fetched:
        by_part[raw[0]].append(raw[1:])
    return {n: rows_from(rows) for n, rows in by_part.items()}


def _add_ctes(n: int, plan: Plan, ctes: list[str], params: list[Any]) -> str:
    """Plan ``n``'s CTEs: its pick (a claim), its UPDATE ``m<n>`` and its events ``e<n>``;
    the UPDATE's own text (a lone one runs as a plain statement)."""
    picked = None
    if plan.move.pick is not None:
        picked = f"picked{n}"
        chosen, pick_params = pick_sql(plan.move.pick, plan.now, plan.excluded)
        ctes.append(f"{picked} AS MATERIALIZED ({chosen})")
        params += pick_params
    update, update_params = update_sql(plan, picked=picked)
    ctes.append(f"m{n} AS ({update})")
    params += update_params
    if plan.early:
        insert, rows = joined_insert_sql(plan.early, rows=f"m{n}", time_column="updated_at")
        ctes.append(f"e{n} AS ({insert})")
        params.append(rows)
    elif plan.paired is not None and plan.candidates:
        ctes.append(f"e{n} AS ({paired_insert_sql(rows=f'm{n}', time_column='updated_at')})")
        params += plan.paired.params()
    elif plan.derived:
        insert = row_events_insert_sql(
            plan.derived, rows=f"m{n}", time_column="updated_at", order_by=CLAIM_ORDER
        )
        ctes.append(f"e{n} AS ({insert})")
        params.append(plan.move.actor)
    return update
