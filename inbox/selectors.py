"""Read queries behind the console's job pages and dashboard.

Everything here reads; writes go through ``inbox.transitions`` (and the reconcile service).
Queries are bounded so pages stay fast at millions of rows: counts are capped, lists are
paginated without COUNT(*), and each dashboard region is one or two indexed queries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q, QuerySet

from audit.models import AuditEvent, EventType
from core import paging
from inbox.jobtypes import registry
from inbox.models import Job, JobState, Worker, WorkerStatus
from inbox.scopes import paused_scopes

# Alert tiles stop counting here ("1,000+" is alarm enough and keeps each tile ~ms at 1M rows).
ALERT_CAP = 1_000


def expiry_behaviour(job_type: str) -> str:
    """What the sweep does to this job type when its lease lapses (DESIGN §1.3)."""
    spec = registry().get(job_type)
    return "retried" if spec is not None and spec.idempotent else "parked for reconcile"


# --- job list ---------------------------------------------------------------------------------


def search_jobs(qs: QuerySet[Job], term: str) -> QuerySet[Job]:
    """Exact match on the indexed identifiers; a substring search would scan millions of rows."""
    term = term.strip()
    if not term:
        return qs
    return qs.filter(
        Q(job_id=term) | Q(object_id=term) | Q(idempotency_key=term) | Q(mission_id=term)
    )


# --- job detail -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One claim of a job, reconstructed from its CLAIMED event and what ended it."""

    number: int
    worker_id: str
    claim_id: str
    claimed_at: dt.datetime
    ended_by: str
    ended_at: dt.datetime | None
    result_code: str


# Events that close a claim in the trail.
_ATTEMPT_ENDS = {
    EventType.RELEASED,
    EventType.SUCCEEDED,
    EventType.FAILED,
    EventType.OUTCOME_UNKNOWN,
    EventType.LEASE_EXPIRED,
    EventType.REJECTED,
    EventType.RETRY_SCHEDULED,
}


def attempts_from_trail(events: Iterable[AuditEvent]) -> list[Attempt]:
    """Each CLAIMED event opens an attempt; the next ending event closes it."""
    attempts: list[Attempt] = []
    current: dict | None = None
    for event in events:
        if event.event_type == EventType.CLAIMED:
            if current is not None:
                attempts.append(Attempt(**current, ended_by="", ended_at=None, result_code=""))
            current = {
                "number": len(attempts) + 1,
                "worker_id": event.actor,
                "claim_id": str(event.detail.get("claim_id", "")),
                "claimed_at": event.created_at,
            }
        elif current is not None and event.event_type in _ATTEMPT_ENDS:
            attempts.append(
                Attempt(
                    **current,
                    ended_by=event.event_type,
                    ended_at=event.created_at,
                    result_code=event.result_code,
                )
            )
            current = None
    if current is not None:
        attempts.append(Attempt(**current, ended_by="", ended_at=None, result_code=""))
    return attempts


# How many trail events the detail page shows (newest kept); a job rarely has more.
TRAIL_LIMIT = 500


def job_trail(job_id: str, limit: int = TRAIL_LIMIT) -> list[AuditEvent]:
    """A job's events oldest first, capped (the audit page shows the rest)."""
    newest = list(AuditEvent.objects.filter(job_id=job_id).order_by("-event_id")[:limit])
    newest.reverse()
    return newest


def allowed_actions(job: Job) -> list[str]:
    """The console actions the job's current state allows (the template shows only these)."""
    actions = []
    if job.state == JobState.FAILED:
        actions.append("retry")
    if job.state == JobState.OUTCOME_UNKNOWN:
        actions.append("reconcile")
    if job.state == JobState.CREATED and not job.approval_id:
        actions.append("approve")
    return actions


# --- dashboard --------------------------------------------------------------------------------


def state_counts(cap: int | None = None) -> list[tuple[str, int]]:
    """Jobs per state, each capped at ``cap + 1``, in ONE query.

    A plain GROUP BY reads every row (about 100 ms at 1M rows on PostgreSQL); a capped scalar
    subquery per state stops after ``cap + 1`` entries of the (state, created_at) index, so
    the cost is bounded however large the table grows. Counts above the cap read "10,000+".
    """
    # Read at call time (not imported by value) so one setting of core.paging.COUNT_CAP rules.
    cap = paging.COUNT_CAP if cap is None else cap
    table = connection.ops.quote_name(Job._meta.db_table)
    column = connection.ops.quote_name("state")
    parts = [
        f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {column} = %s LIMIT %s) AS s{i})"
        for i in range(len(JobState))
    ]
    params: list[object] = []
    for state in JobState:
        params += [state.value, cap + 1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return [(state.value, int(n)) for state, n in zip(JobState, row, strict=True)]


@dataclass(frozen=True)
class Alerts:
    unknown: int
    lapsed: int
    dead_workers: int
    pending_approvals: int
    paused_scopes: list[str]


def dashboard_alerts(now: dt.datetime) -> Alerts:
    """The alert tiles: each one a capped, indexed count."""
    unknown = paging.capped_count(Job.objects.filter(state=JobState.OUTCOME_UNKNOWN), ALERT_CAP)
    lapsed = paging.capped_count(Job.objects.lapsed(now), ALERT_CAP)
    pending = paging.capped_count(Job.objects.awaiting_approval(), ALERT_CAP)
    dead = sum(1 for worker in _workers_alive(now) if not worker[1])
    paused = [pause.scope for pause in paused_scopes()]
    return Alerts(
        unknown=unknown,
        lapsed=lapsed,
        dead_workers=dead,
        pending_approvals=pending,
        paused_scopes=paused,
    )


def _workers_alive(now: dt.datetime) -> list[tuple[str, bool]]:
    """(worker_id, alive) for workers not cleanly stopped: a stopped worker is not dead.

    Bounded: stopped rows pile up over restarts and are never read here.
    """
    rows = Worker.objects.exclude(status=WorkerStatus.STOPPED).order_by("worker_id")[:1000]
    # Same rule as inbox.workers.is_alive: seen within 3 × poll + lease (database time).
    return [(w.worker_id, w.last_seen_at + w.dead_after() >= now) for w in rows]


# Finished = reached SUCCEEDED or FAILED (DESIGN §4 "throughput").
FINISHED_STATES = (JobState.SUCCEEDED, JobState.FAILED)


# Rows the throughput chart reads per finished state, at most. At a sustained 1,000 jobs/s the
# last hour holds 3.6M finished jobs; counting them all on every poll would be a full scan.
THROUGHPUT_CAP = 50_000


@dataclass(frozen=True)
class Throughput:
    """Jobs finished per minute, oldest first, zero-filled."""

    points: list[tuple[str, int]]
    # "HH:MM" when the cap cut the count: that minute and the ones before it are undercounted.
    partial_through: str = ""


def throughput_per_minute(
    now: dt.datetime, minutes: int = 60, cap: int = THROUGHPUT_CAP
) -> Throughput:
    """Jobs finished per minute over the last ``minutes``: one bounded query.

    A finished job's ``updated_at`` is the moment it finished. Each finished state reads at most
    its newest ``cap`` rows, a backward range scan of ``Job(state, updated_at)``
    (job_state_updated_idx, index-only on PostgreSQL); a busier hour shows its recent minutes
    exact and says from where the older ones are cut. Cheaper than the audit log (three times
    the rows). A FAILED job an operator has since retried no longer counts; the audit page has
    the full history.
    """
    start = (now - dt.timedelta(minutes=minutes - 1)).replace(second=0, microsecond=0)
    table = connection.ops.quote_name(Job._meta.db_table)
    if connection.vendor == "postgresql":
        minute = "date_trunc('minute', updated_at)"
    else:
        minute = "strftime('%%Y-%%m-%%d %%H:%%M:00', updated_at)"
    branch = (
        f"SELECT * FROM (SELECT %s AS b, updated_at FROM {table} WHERE state = %s "
        "AND updated_at >= %s ORDER BY updated_at DESC LIMIT %s) AS {name}"
    )
    sql = (
        f"SELECT b, {minute} AS m, COUNT(*) FROM ("
        + " UNION ALL ".join(branch.format(name=f"s{i}") for i in range(len(FINISHED_STATES)))
        + ") AS t GROUP BY b, m"
    )
    since = connection.ops.adapt_datetimefield_value(start)
    params: list[object] = []
    for i, state in enumerate(FINISHED_STATES):
        params += [i, str(state), since, cap]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    buckets = [0] * minutes
    oldest: dict[int, int] = {}  # per branch: its oldest minute index
    totals: dict[int, int] = {}  # per branch: rows read
    for b, minute_at, count in rows:
        if isinstance(minute_at, str):
            minute_at = dt.datetime.fromisoformat(minute_at).replace(tzinfo=dt.UTC)
        index = int((minute_at - start).total_seconds() // 60)
        oldest[b] = min(oldest.get(b, index), index)
        totals[b] = totals.get(b, 0) + count
        if 0 <= index < minutes:
            buckets[index] += count
    cut = [oldest[b] for b, total in totals.items() if total >= cap]
    labels = [(start + dt.timedelta(minutes=i)).strftime("%H:%M") for i in range(minutes)]
    partial = labels[max(cut)] if cut and 0 <= max(cut) < minutes else ""
    return Throughput(list(zip(labels, buckets, strict=True)), partial)


__all__ = [
    "ALERT_CAP",
    "Alerts",
    "Attempt",
    "allowed_actions",
    "attempts_from_trail",
    "dashboard_alerts",
    "expiry_behaviour",
    "job_trail",
    "search_jobs",
    "state_counts",
    "throughput_per_minute",
]
