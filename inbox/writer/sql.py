"""The statement text both databases share: the guarded UPDATE with every guard in its
WHERE clause, the claim's choice of rows, what an UPDATE assigns and returns."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection

from inbox.jobtypes import IMMUTABLE_COLUMNS, IMMUTABLE_PAYLOAD_FIELDS
from inbox.models import Job, ScopePause
from inbox.writer.rows import ATTNAME, COLUMNS
from inbox.writer.values import UNSEALED_STATES, DbClock, Pick, Sql

if TYPE_CHECKING:
    from inbox.writer.plan import Plan

RANDOM_TOKEN_SQL = {
    "postgresql": "replace(gen_random_uuid()::text, '-', '')",
    "sqlite": "lower(hex(randomblob(16)))",
}


def _seal_payload_sql() -> str:
    """Only the payload keys a seal needs: a SAVE's payload carries its content (megabytes)."""
    if connection.vendor == "postgresql":
        pairs = ", ".join(f"'{k}', payload -> '{k}'" for k in IMMUTABLE_PAYLOAD_FIELDS)
        return f"jsonb_build_object({pairs})"
    pairs = ", ".join(f"'{k}', json_extract(payload, '$.{k}')" for k in IMMUTABLE_PAYLOAD_FIELDS)
    return f"json_object({pairs})"


def update_sql(plan: Plan, *, picked: str | None) -> tuple[str, list[Any]]:
    """The guarded UPDATE … RETURNING of one plan: every guard in its WHERE clause. ``picked``
    names the CTE of ids a claim chose (PostgreSQL); without it a claim chooses inline."""
    move, now = plan.move, plan.now
    assignments = dict(plan.assigned)
    if move.to is not None:
        assignments["state"] = move.to
    assignments["updated_at"] = now
    sets, params = _assign(assignments)
    # ``state || ''`` keeps the planner on the primary key: every transition leaves a dead
    # entry in the state indexes, so on a busy queue "state = 'CLAIMED'" walks thousands.
    where = [f"state || '' IN ({', '.join(['%s'] * len(move.allowed))})"]
    params += list(move.allowed)
    if move.pick is not None:
        if picked is not None:
            where.append(f"job_id IN (SELECT job_id FROM {picked})")
        else:
            chosen, pick_params = pick_sql(move.pick, now, plan.excluded)
            where.append(f"job_id IN ({chosen})")
            params += pick_params
    elif move.fence is not None:
        where.append(f"(job_id, claim_id) IN ({_pairs_sql()})")
        pairs = [{"j": t.job_id, "c": t.claim_id or ""} for t in plan.candidates]
        params.append(json.dumps(pairs))
    else:
        where.append(f"job_id IN ({_ids_sql()})")
        params.append(_ids_param([t.job_id for t in plan.candidates]))
    if move.lease is not None:
        clock, clock_params = _time_sql(now)
        where.append(f"lease_until {'>=' if move.lease == 'running' else '<'} {clock}")
        params += clock_params
    if move.seal and move.pick is None:
        # (A picked row is READY, so sealed: its seal is checked on what the UPDATE returns.)
        unsealed = ", ".join(f"'{s}'" for s in UNSEALED_STATES)
        where.append(f"(fingerprint <> '' OR state IN ({unsealed}))")
    # Copies of every row in hand: only what the write changed comes back.
    lean = not move.full and all(item.job is not None for item in plan.candidates)
    table = connection.ops.quote_name(Job._meta.db_table)
    sql = (
        f"UPDATE {table} SET {', '.join(sets)} WHERE {' AND '.join(where)} "
        f"{_returning(move.full, assignments if lean else None)}"
    )
    return sql, params


# Claim order, over a moved row ``r`` (the order a claim's events are written in).
CLAIM_ORDER = "r.created_at, r.job_id"


def pick_sql(pick: Pick, now: dt.datetime | DbClock, excluded: Sequence[str]) -> tuple[str, list]:
    """The claim's choice of rows (see ``Pick``): a SELECT of job ids and its parameters."""
    clock, params = _time_sql(now)
    table = connection.ops.quote_name(Job._meta.db_table)
    pg = connection.vendor == "postgresql"
    scope, scope_params = (_literal(pick.scope), []) if pg else ("%s", [pick.scope])
    where = [
        "state = 'READY'",
        f"scope = {scope}",
        f"(run_after IS NULL OR run_after <= {clock})",
    ]
    params = [*scope_params, *params]
    if excluded:
        where.append(f"job_id NOT IN ({_ids_sql()})")
        params.append(_ids_param(list(excluded)))
    if pick.unless_paused:
        pauses = connection.ops.quote_name(ScopePause._meta.db_table)
        where.append(f"NOT EXISTS (SELECT 1 FROM {pauses} WHERE scope = {scope} AND paused)")
        params += scope_params
    if not pg:
        sql = (
            f"SELECT job_id FROM {table} WHERE {' AND '.join(where)} "
            "ORDER BY created_at, job_id LIMIT %s"
        )
        return sql, [*params, pick.limit]
    # PostgreSQL: the order only ``job_claim_order_idx`` provides (inbox 0012), the scope and
    # the limit in the text. No plan of the statement can then depend on a parameter's value
    # or pick another index, so PostgreSQL plans it once per connection, not per execution.
    sql = (
        f"SELECT job_id FROM {table} WHERE {' AND '.join(where)} "
        f"ORDER BY {CLAIM_ORDER_SQL}, job_id LIMIT {int(pick.limit)} FOR UPDATE SKIP LOCKED"
    )
    return sql, params


# The claim order on PostgreSQL: created_at as ``job_claim_order_idx`` holds it (inbox 0012).
CLAIM_ORDER_SQL = "(created_at AT TIME ZONE 'UTC')"


@functools.lru_cache(maxsize=256)
def _literal(value: str) -> str:
    """``value`` as a quoted SQL literal for a PostgreSQL statement text that still goes
    through ``%s`` formatting (a ``%`` doubled). Kept per value: an executor quotes its one
    scope every turn, and the quoting depends only on the server's settings."""
    from psycopg import sql

    return sql.Literal(value).as_string(connection.connection).replace("%", "%%")


def _time_sql(value: dt.datetime | DbClock) -> tuple[str, list[Any]]:
    """A time as SQL: the statement's own clock (plus its offset), or a parameter."""
    if isinstance(value, DbClock):
        if not value.offset:
            return "statement_timestamp()", []
        return "(statement_timestamp() + %s::interval)", [value.offset]
    return "%s", [connection.ops.adapt_datetimefield_value(value)]


def _assign(assignments: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    adapt = connection.ops.adapt_datetimefield_value
    sets, params = [], []
    for column, value in assignments.items():
        if isinstance(value, Sql):
            sets.append(f"{column} = {value}")
        elif isinstance(value, DbClock):
            clock, clock_params = _time_sql(value)
            sets.append(f"{column} = {clock}")
            params += clock_params
        else:
            sets.append(f"{column} = %s")
            params.append(adapt(value) if isinstance(value, dt.datetime) else value)
    return sets, params


def _ids_sql() -> str:
    # One statement text for any batch size (the driver parses and caches it once).
    if connection.vendor == "postgresql":
        return "SELECT unnest(%s::text[])"
    return "SELECT value FROM json_each(%s)"


def _ids_param(ids: list[str]) -> Any:
    return ids if connection.vendor == "postgresql" else json.dumps(ids)


def _pairs_sql() -> str:
    if connection.vendor == "postgresql":
        return "SELECT j, c FROM jsonb_to_recordset(%s::jsonb) AS x(j text, c text)"
    return "SELECT json_extract(value, '$.j'), json_extract(value, '$.c') FROM json_each(%s)"


def _returning(full: bool, lean: Iterable[str] | None = None) -> str:
    """Every column in model order; without ``full`` the payload is only its sealed keys; with
    ``lean`` (the caller holds a copy of every row and takes back only these columns) the
    others come back NULL, in place: less to send and parse (timestamps, mostly)."""
    keep = None if lean is None else frozenset(lean)
    return _returning_sql(connection.vendor, full, keep)


@functools.cache
def _returning_sql(vendor: str, full: bool, lean: frozenset[str] | None) -> str:
    """``_returning``'s text, made once per shape: a few shapes per process, and building it
    (a column type per NULL) was a tenth of an executor turn's Python."""
    if full:
        return f"RETURNING {', '.join(COLUMNS)}"
    keep = None if lean is None else {*_LEAN_ALWAYS, *lean}
    columns = [
        f"{_seal_payload_sql()} AS payload"
        if c == "payload"
        else c
        if keep is None or c in keep
        else f"{_null_of(c)} AS {c}"
        for c in COLUMNS
    ]
    return f"RETURNING {', '.join(columns)}"


def _null_of(column: str) -> str:
    """A NULL of the column's type (PostgreSQL: one statement's moves are a UNION ALL)."""
    if connection.vendor != "postgresql":
        return "NULL"
    return f"NULL::{Job._meta.get_field(ATTNAME[column]).db_type(connection)}"


# What a lean RETURNING always carries: the id, the seal's inputs, the new state and time.
_LEAN_ALWAYS = frozenset(
    {"job_id", "state", "scope", "updated_at", "fingerprint", "payload", *IMMUTABLE_COLUMNS}
)


def iso_sql(column: str) -> str:
    """``datetime.isoformat()`` of a UTC timestamp column, in SQL (the events' own format)."""
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        f"date_part('microseconds', {utc})::bigint %% 1000000 = 0 THEN '' "
        f"ELSE to_char({utc}, '.US') END || '+00:00'"
    )
