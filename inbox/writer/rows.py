from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from core.clock import parse_sqlite_datetime
from core.db import locked, new_unsaved, shallow_copy, stored_from_row
from inbox.jobtypes import IMMUTABLE_COLUMNS, fingerprint_from
from inbox.models import Job
from inbox.writer.values import UNSEALED_STATES, Held

COLUMNS = tuple(f.column for f in Job._meta.concrete_fields)


def fingerprint_of(job: Job) -> str:
    """Recompute a job's fingerprint from its stored columns and payload."""
    return fingerprint_from(_IMMUTABLE_OF(job), job.payload or {})


def fingerprint_ok(job: Job) -> bool:
    """True while the job is unsealed (CREATED/REJECTED before READY) or its seal still holds."""
    if not job.fingerprint and job.state in UNSEALED_STATES:
        return True
    return job.fingerprint == fingerprint_of(job)


def lock_jobs(job_ids: Iterable[str], *, skip_locked: bool = False) -> dict[str, Job]:
    """Load jobs for a write in this transaction, locked (``core.db.locked``). With
    ``skip_locked`` a row another transaction holds right now is left out (the writer then
    refuses it as busy) instead of waited on."""
    qs = Job.objects.filter(job_id__in=list(job_ids))
    return {job.job_id: job for job in locked(qs, skip_locked=skip_locked)}


def snapshot(job: Job) -> Job:
    """A copy of a row as read, kept while the original is updated in place."""
    return shallow_copy(job)


def caller_copy(item: Held) -> Job:
    """The caller's copy of a row (or a stub of its keys): what events known ahead are built
    from."""
    return item.job if item.job is not None else Job(job_id=item.job_id, claim_id=item.claim_id)


def ids_of(items: Iterable[Held]) -> list[str]:
    return [item.job_id for item in items]


_DATETIMES = tuple(
    i for i, f in enumerate(Job._meta.concrete_fields) if f.get_internal_type() == "DateTimeField"
)


_INDEX = {f.attname: i for i, f in enumerate(Job._meta.concrete_fields)}


ATTNAME = {f.column: f.attname for f in Job._meta.concrete_fields}


_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


_PAYLOAD = _INDEX["payload"]


_FINGERPRINT = _INDEX["fingerprint"]


# The immutable columns' values of a row, and of a model, in ``IMMUTABLE_COLUMNS`` order.
_IMMUTABLE_AT = operator.itemgetter(*(_INDEX[name] for name in IMMUTABLE_COLUMNS))


_IMMUTABLE_OF = operator.attrgetter(*IMMUTABLE_COLUMNS)


COL_JOB_ID = _INDEX["job_id"]


_JOB_TYPE = _INDEX["job_type"]


COL_CREATED = _INDEX["created_at"]


COL_UPDATED = _INDEX["updated_at"]


def rows_from(fetched: Iterable[Sequence[Any]]) -> dict[str, list[Any]]:
    """RETURNING rows by id, columns in model order, datetimes aware and JSON parsed (SQLite
    hands back naive datetimes and JSON text; Django has psycopg hand back JSON as text)."""
    rows: dict[str, list[Any]] = {}
    if connection.vendor == "postgresql":
        for raw in fetched:
            row = list(raw)
            if isinstance(row[_PAYLOAD], str):
                row[_PAYLOAD] = json.loads(row[_PAYLOAD])
            rows[row[COL_JOB_ID]] = row
        return rows
    for raw in fetched:
        row = list(raw)
        for i in _DATETIMES:
            if row[i] is not None:
                row[i] = parse_sqlite_datetime(row[i])
        if isinstance(row[_PAYLOAD], str):
            row[_PAYLOAD] = json.loads(row[_PAYLOAD])
        rows[row[COL_JOB_ID]] = row
    return rows


def new_job(**values: Any) -> Job:
    """An unsaved job of the fields a new job sets (``Job(**values)``, fast: see
    ``core.db.new_unsaved``)."""
    return new_unsaved(Job, **values)


def job_of(row: list[Any]) -> Job:
    """A model instance of a returned row (every column present, in model order), as the ORM
    builds one from a query (``Job.from_db``, fast: see ``core.db.stored_from_row``)."""
    return stored_from_row(Job, _ATTNAMES, row)


def update_copy(mine: Job, row: list[Any], names: Iterable[str]) -> Job:
    """Bring the caller's copy up to date with what the UPDATE wrote."""
    for name in names:
        setattr(mine, name, row[_INDEX[name]])
    return mine


def seal_holds(row: list[Any], *, required: bool = False) -> bool:
    """The seal check on a returned row (its ``state`` is already the new one). An empty
    fingerprint passes where the UPDATE's WHERE allowed it (an unsealed state); ``required``:
    the row came from a sealed state, so an empty one is a drift too."""
    sealed = row[_FINGERPRINT]
    if not sealed:
        return not required
    return sealed == fingerprint_from(_IMMUTABLE_AT(row), row[_PAYLOAD] or {})


INSERT_COLUMNS = (
    "job_id",
    "job_version",
    "mission_id",
    "job_type",
    "scope",
    "object_id",
    "vault_path",
    "payload",
    "idempotency_key",
    "requested_by",
    "max_attempts",
    "supersedes",
    "state",
    "fingerprint",
    "run_after",
    "created_at",
    "updated_at",
)
