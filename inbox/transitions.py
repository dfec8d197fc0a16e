"""All writes to Job state, claim and lease fields (DESIGN §1.3–§1.6).

Every function is one guarded UPDATE — the allowed from-states (and, for worker-side writes, the
caller's ``claim_id``) in its WHERE clause — plus its audit event, in one transaction. A refused
transition raises and writes nothing. Times come from the database clock (``db_now``); every
function takes ``at=`` so tests can pin it. Callers: the executor, views, admin actions and
management commands; nothing else assigns these fields.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from audit.events import Event, record_event, record_events
from audit.models import AuditEvent, EventType
from inbox.errors import (
    IdempotencyConflict,
    ImmutableFieldDrift,
    InvalidTransition,
    JobNotFound,
    LostClaim,
)
from inbox.jobtypes import (
    IMMUTABLE_COLUMNS,
    IMMUTABLE_PAYLOAD_FIELDS,
    compute_fingerprint,
    get_job_type,
    registry,
    validate_job_document,
)
from inbox.models import HELD_STATES, Job, JobState

log = logging.getLogger(__name__)

S = JobState
# Fields an admin may edit by hand (recorded as ADMIN_EDIT). Everything else is either
# immutable, or owned by the transitions below.
EDITABLE_FIELDS = ("note", "max_attempts")
CLEARED_CLAIM: dict[str, Any] = {"worker_id": "", "claim_id": "", "lease_until": None}


# --- the clock ------------------------------------------------------------------------------


def db_now(at: dt.datetime | None = None) -> dt.datetime:
    """The database's current time (or ``at``). One clock for every host (DESIGN §1.4)."""
    if at is not None:
        return at
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
        # SQLite's clock is the host's C library clock, shared by every process on the host.
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return _parse_sqlite_datetime(cursor.fetchone()[0])


def _parse_sqlite_datetime(value: str | dt.datetime) -> dt.datetime:
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime from SQLite: {value!r}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _lease(now: dt.datetime, lease_seconds: int | float) -> dt.datetime:
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    return now + dt.timedelta(seconds=lease_seconds)


# --- fingerprints -----------------------------------------------------------------------------


def fingerprint_of(job: Job) -> str:
    """Recompute a job's fingerprint from its stored columns and payload."""
    columns = {
        "job_type": job.job_type,
        "object_id": job.object_id,
        "vault_path": job.vault_path,
        "mission_id": job.mission_id,
        "approval_id": job.approval_id,
    }
    return compute_fingerprint(columns=columns, payload=job.payload or {})


def fingerprint_ok(job: Job) -> bool:
    """True while the job is unsealed (CREATED/REJECTED before READY) or its seal still holds."""
    if not job.fingerprint and job.state in (S.CREATED, S.REJECTED):
        return True
    return job.fingerprint == fingerprint_of(job)


def _record_drift(job: Job, to_state: str, actor: str, at: dt.datetime | None) -> None:
    """Record a fingerprint refusal in its own transaction, once per run of identical drift."""
    current = fingerprint_of(job)
    with transaction.atomic():
        last = (
            AuditEvent.objects.filter(job_id=job.job_id)
            .order_by("-event_id")
            .values("event_type", "detail")
            .first()
        )
        if (
            last
            and last["event_type"] == EventType.FINGERPRINT_DRIFT
            and last["detail"].get("current") == current
        ):
            return  # the same drift was already recorded; do not flood the trail
        record_event(
            event_type=EventType.FINGERPRINT_DRIFT,
            actor=actor,
            job_id=job.job_id,
            result_code="FINGERPRINT_DRIFT",
            detail={
                "state": job.state,
                "to": to_state,
                "sealed": job.fingerprint,
                "current": current,
            },
            at=at,
        )
    log.error("job %s: fingerprint drift, transition to %s refused", job.job_id, to_state)


def _record_stale_write(job: Job, to_state: str, claim_id: str, actor: str, at) -> None:
    with transaction.atomic():
        record_event(
            event_type=EventType.STALE_WRITE_REJECTED,
            actor=actor,
            job_id=job.job_id,
            result_code="LOST_CLAIM",
            detail={
                "state": job.state,
                "to": to_state,
                "claim_id": claim_id,
                "current_claim_id": job.claim_id,
                "current_worker_id": job.worker_id,
            },
            at=at,
        )
    log.warning(
        "job %s: write to %s by stale claim %s refused (now %s, held by %r)",
        job.job_id,
        to_state,
        claim_id,
        job.state,
        job.worker_id,
    )


# --- the one guarded write --------------------------------------------------------------------


@dataclass
class _Change:
    """What one transition writes besides ``state`` and ``updated_at``."""

    values: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


def _load_locked(job_id: str) -> Job:
    qs = Job.objects.filter(job_id=job_id)
    if connection.vendor == "postgresql":
        qs = qs.select_for_update()
    job = qs.first()
    if job is None:
        raise JobNotFound(job_id)
    return job


def _transition(
    job_id: str,
    *,
    to: str,
    from_states: Iterable[str],
    actor: str,
    build: Callable[[Job, dt.datetime], _Change],
    claim_id: str | None = None,
    guard: Q | None = None,
    guard_why: str = "",
    at: dt.datetime | None = None,
) -> Job:
    """Move one job ``from_states`` → ``to``; the only code path that writes ``Job.state``.

    ``claim_id`` fences worker-side writes; ``guard`` adds conditions to the WHERE clause (for
    example "the lease has lapsed"). Refusals raise with nothing written; a fingerprint drift
    and a stale holder's write are each recorded as their own event afterwards.
    """
    allowed = tuple(from_states)
    drifted: Job | None = None
    stale: Job | None = None
    try:
        with transaction.atomic():
            job = _load_locked(job_id)
            now = db_now(at)
            # The claim first: a stale holder must hear that it lost the claim (and the write
            # is recorded), whatever state the new holder has moved the job to.
            if claim_id is not None and job.claim_id != claim_id:
                stale = job
                raise LostClaim(
                    job_id,
                    job.state,
                    to,
                    claim_id=claim_id,
                    why=f"claim {claim_id} is no longer held (held by {job.worker_id or 'nobody'})",
                )
            if job.state not in allowed:
                raise InvalidTransition(
                    job_id, job.state, to, f"allowed only from {', '.join(allowed)}"
                )
            if not fingerprint_ok(job):
                drifted = job
                raise ImmutableFieldDrift(job_id, job.fingerprint, fingerprint_of(job))
            change = build(job, now)
            where = Q(job_id=job_id, state=job.state, fingerprint=job.fingerprint)
            if claim_id is not None:
                where &= Q(claim_id=claim_id)
            if guard is not None:
                where &= guard
            values = {**change.values, "state": to, "updated_at": now}
            if Job.objects.filter(where).update(**values) != 1:
                raise InvalidTransition(job_id, job.state, to, guard_why or "lost a race")
            record_events(change.events)
    except ImmutableFieldDrift:
        assert drifted is not None
        _record_drift(drifted, to, actor, at)
        raise
    except LostClaim:
        assert stale is not None
        _record_stale_write(stale, to, claim_id or "", actor, at)
        raise
    for name, value in values.items():
        setattr(job, name, value)
    return job


def _event(
    job: Job, event_type: str, actor: str, now: dt.datetime, to: str, **detail: Any
) -> Event:
    result_code = detail.pop("result_code", "")
    return Event(
        event_type=event_type,
        actor=actor,
        job_id=job.job_id,
        result_code=result_code,
        detail={"from": job.state, "to": to, **detail},
        at=now,
    )


# --- creation and validation -----------------------------------------------------------------


def build_job(
    data: dict[str, Any],
    *,
    requested_by: str,
    supersedes: str | None = None,
    at: dt.datetime | None = None,
) -> tuple[Job, list[Event]]:
    """Validate a document into an unsaved Job and the events its creation records.

    Types that need no approval are built READY with their seal (the same outcome as
    CREATED → READY, one write fewer); a DELETE is built CREATED, awaiting approval. Only
    ``create_job`` (and bulk loaders that insert exactly what it would) store the result.
    """
    job_type, doc = validate_job_document(data)
    if not requested_by:
        raise ValueError("create_job needs requested_by")
    job = Job(
        job_id=doc["job_id"],
        job_version=doc["job_version"],
        mission_id=doc["mission_id"],
        job_type=job_type.name,
        scope=job_type.scope,
        object_id=doc["object_id"],
        vault_path=doc["vault_path"],
        payload=doc,
        idempotency_key=doc["idempotency_key"],
        requested_by=requested_by,
        max_attempts=job_type.max_attempts or settings.INBOX_MAX_ATTEMPTS,
        supersedes=supersedes,
    )
    if at is not None:
        job.created_at = job.updated_at = at
    events = [
        Event(
            EventType.REQUESTED,
            requested_by,
            job_id=job.job_id,
            detail={
                "job_type": job.job_type,
                "object_id": job.object_id,
                "to": S.CREATED,
                **({"supersedes": supersedes} if supersedes else {}),
            },
            at=at,
        )
    ]
    if not job_type.needs_approval:
        job.state = S.READY
        job.fingerprint = fingerprint_of(job)
        events.append(
            Event(
                EventType.READY,
                requested_by,
                job_id=job.job_id,
                detail={"from": S.CREATED, "to": S.READY, "fingerprint": job.fingerprint},
                at=at,
            )
        )
    return job, events


def create_job(
    data: dict[str, Any],
    *,
    requested_by: str,
    supersedes: str | None = None,
    at: dt.datetime | None = None,
) -> tuple[Job, bool]:
    """Validate and store a job; return (job, created). A safe replay returns the existing job.

    Types that need no approval become READY in the same transaction (REQUESTED and READY
    both recorded); a DELETE stays CREATED until an approval decides it.
    """
    job, events = build_job(data, requested_by=requested_by, supersedes=supersedes, at=at)
    try:
        with transaction.atomic():
            job.save(force_insert=True)
            record_events(events)
    except IntegrityError:
        return _existing_for_replay(job), False
    return job, True


def _existing_for_replay(new: Job) -> Job:
    matches = list(
        Job.objects.filter(Q(job_id=new.job_id) | Q(idempotency_key=new.idempotency_key))
    )
    if not matches:
        # The conflict was not on our keys (should not happen): let the caller see it.
        raise IntegrityError(f"job {new.job_id!r} could not be stored")
    for existing in matches:
        same = (
            existing.job_id == new.job_id
            and existing.idempotency_key == new.idempotency_key
            and existing.payload == new.payload
        )
        if not same:
            key = new.idempotency_key if existing.idempotency_key == new.idempotency_key else ""
            raise IdempotencyConflict(key or new.job_id, existing.job_id)
    return matches[0]


def mark_ready(
    job_id: str,
    *,
    actor: str,
    approval_id: str | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CREATED → READY; attach the approval (DELETE) and seal the fingerprint."""

    def build(job: Job, now: dt.datetime) -> _Change:
        job_type = get_job_type(job.job_type)
        if job_type.needs_approval and not approval_id:
            raise InvalidTransition(job_id, job.state, S.READY, "this job type needs an approval")
        if approval_id and job.approval_id and job.approval_id != approval_id:
            raise InvalidTransition(job_id, job.state, S.READY, "another approval is attached")
        job.approval_id = approval_id or job.approval_id
        sealed = fingerprint_of(job)
        return _Change(
            values={"approval_id": job.approval_id, "fingerprint": sealed},
            events=[
                _event(
                    job,
                    EventType.READY,
                    actor,
                    now,
                    S.READY,
                    fingerprint=sealed,
                    approval_id=job.approval_id,
                )
            ],
        )

    return _transition(job_id, to=S.READY, from_states=[S.CREATED], actor=actor, build=build, at=at)


def reject_job(
    job_id: str,
    *,
    actor: str,
    reason: str,
    result_code: str = "REJECTED",
    claim_id: str | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CREATED → REJECTED (validation/approval), or a holder's EXECUTING → REJECTED when the
    authorization re-check fails right before execution. The reason is kept."""
    if not reason:
        raise ValueError("reject_job needs a reason")
    from_states = [S.CREATED] if claim_id is None else [S.CLAIMED, S.EXECUTING]

    def build(job: Job, now: dt.datetime) -> _Change:
        return _Change(
            values={"result_code": result_code, "last_error": reason, **CLEARED_CLAIM},
            events=[
                _event(
                    job,
                    EventType.REJECTED,
                    actor,
                    now,
                    S.REJECTED,
                    reason=reason,
                    result_code=result_code,
                )
            ],
        )

    return _transition(
        job_id,
        to=S.REJECTED,
        from_states=from_states,
        actor=actor,
        build=build,
        claim_id=claim_id,
        at=at,
    )


# --- claims and leases ------------------------------------------------------------------------

_RANDOM_TOKEN_SQL = {
    "postgresql": "replace(gen_random_uuid()::text, '-', '')",
    "sqlite": "lower(hex(randomblob(16)))",
}


def claim_next_jobs(
    *,
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int = 1,
    at: dt.datetime | None = None,
) -> list[Job]:
    """Claim up to ``limit`` READY jobs of ``scope`` in claim order, atomically.

    PostgreSQL locks the ids with FOR UPDATE SKIP LOCKED and then updates exactly those ids;
    SQLite's IMMEDIATE transactions serialise claimers and the same guarded UPDATE keeps it
    right. Jobs whose fingerprint drifted are skipped (and recorded), never claimed.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not worker_id:
        raise ValueError("claim_next_jobs needs a worker_id")
    drifted: list[Job] = []
    with transaction.atomic():
        now = db_now(at)
        lease_until = _lease(now, lease_seconds)
        good: list[Job] = []
        for _round in range(3):
            qs = Job.objects.filter(state=S.READY, scope=scope).order_by("created_at", "job_id")
            if drifted:
                qs = qs.exclude(job_id__in=[j.job_id for j in drifted])
            if connection.vendor == "postgresql":
                qs = qs.select_for_update(skip_locked=True)
            candidates = list(qs[: limit - len(good)])
            for job in candidates:
                (good if fingerprint_ok(job) else drifted).append(job)
            if len(good) >= limit or len(candidates) < limit or not drifted:
                break
        claimed = _claim_rows(good, worker_id=worker_id, now=now, lease_until=lease_until)
        record_events(
            _event(
                job,
                EventType.CLAIMED,
                worker_id,
                now,
                S.CLAIMED,
                claim_id=job.claim_id,
                attempt=job.attempt_count,
                lease_until=lease_until.isoformat(),
            )
            for job in claimed
        )
        for job in claimed:
            job.state = S.CLAIMED
    for job in drifted:
        _record_drift(job, S.CLAIMED, worker_id, at)
    return claimed


def _claim_rows(
    jobs: list[Job], *, worker_id: str, now: dt.datetime, lease_until: dt.datetime
) -> list[Job]:
    """One guarded UPDATE … RETURNING for the chosen ids; returns the jobs it changed."""
    if not jobs:
        return []
    table = Job._meta.db_table
    adapt = connection.ops.adapt_datetimefield_value
    token = _RANDOM_TOKEN_SQL[connection.vendor]
    params: list[Any] = [S.CLAIMED, worker_id, adapt(now), adapt(lease_until), adapt(now), S.READY]
    if connection.vendor == "postgresql":
        chosen = "= ANY(%s::text[])"  # one statement text for any batch size
        params.append([job.job_id for job in jobs])
    else:
        chosen = f"IN ({', '.join(['%s'] * len(jobs))})"
        params += [job.job_id for job in jobs]
    sql = (
        f"UPDATE {table} SET state = %s, worker_id = %s, claim_id = {token}, "
        "claimed_at = %s, lease_until = %s, attempt_count = attempt_count + 1, updated_at = %s "
        f"WHERE state || '' = %s AND job_id {chosen} "  # by primary key: see _batch_update
        "RETURNING job_id, claim_id, attempt_count"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = {job_id: (claim, attempts) for job_id, claim, attempts in cursor.fetchall()}
    claimed = []
    for job in jobs:
        if job.job_id not in rows:
            continue
        job.claim_id, job.attempt_count = rows[job.job_id]
        job.worker_id = worker_id
        job.claimed_at = now
        job.lease_until = lease_until
        job.updated_at = now
        claimed.append(job)
    return claimed


def claim_job(
    job_id: str, *, worker_id: str, lease_seconds: int, at: dt.datetime | None = None
) -> Job:
    """Claim one named READY job."""

    def build(job: Job, now: dt.datetime) -> _Change:
        claim = uuid.uuid4().hex
        lease_until = _lease(now, lease_seconds)
        return _Change(
            values={
                "worker_id": worker_id,
                "claim_id": claim,
                "claimed_at": now,
                "lease_until": lease_until,
                "attempt_count": job.attempt_count + 1,
            },
            events=[
                _event(
                    job,
                    EventType.CLAIMED,
                    worker_id,
                    now,
                    S.CLAIMED,
                    claim_id=claim,
                    attempt=job.attempt_count + 1,
                    lease_until=lease_until.isoformat(),
                )
            ],
        )

    return _transition(
        job_id, to=S.CLAIMED, from_states=[S.READY], actor=worker_id, build=build, at=at
    )


def renew_lease(
    job_id: str,
    *,
    claim_id: str,
    lease_seconds: int,
    actor: str | None = None,
    at: dt.datetime | None = None,
) -> dt.datetime:
    """Extend the holder's lease; refused (``LostClaim``) once the claim is not its own or the
    lease has already lapsed — the worker must then stop working on the job."""
    stale: Job | None = None
    try:
        with transaction.atomic():
            now = db_now(at)
            lease_until = _lease(now, lease_seconds)
            changed = Job.objects.filter(
                job_id=job_id, claim_id=claim_id, state__in=HELD_STATES, lease_until__gte=now
            ).update(lease_until=lease_until, updated_at=now)
            if changed != 1:
                job = Job.objects.filter(job_id=job_id).first()
                if job is None:
                    raise JobNotFound(job_id)
                if job.claim_id == claim_id and job.state in HELD_STATES:
                    why = f"lease lapsed at {job.lease_until.isoformat()}; awaiting the sweep"
                else:
                    stale = job
                    why = f"claim {claim_id} is no longer held (job is {job.state})"
                raise LostClaim(job_id, job.state, job.state, claim_id=claim_id, why=why)
            record_event(
                event_type=EventType.LEASE_RENEWED,
                actor=actor or "worker",
                job_id=job_id,
                detail={"claim_id": claim_id, "lease_until": lease_until.isoformat()},
                at=now,
            )
    except LostClaim:
        if stale is not None:
            _record_stale_write(stale, stale.state, claim_id, actor or "worker", at)
        raise
    return lease_until


def release_job(
    job_id: str, *, claim_id: str, actor: str, reason: str = "", at: dt.datetime | None = None
) -> Job:
    """The holder hands back a CLAIMED job it never began: → READY, the attempt not counted."""

    def build(job: Job, now: dt.datetime) -> _Change:
        return _Change(
            values={**CLEARED_CLAIM, "attempt_count": max(job.attempt_count - 1, 0)},
            events=[_event(job, EventType.RELEASED, actor, now, S.READY, reason=reason)],
        )

    return _transition(
        job_id,
        to=S.READY,
        from_states=[S.CLAIMED],
        actor=actor,
        build=build,
        claim_id=claim_id,
        at=at,
    )


def begin_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    lease_seconds: int | None = None,
    authorized: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """CLAIMED → EXECUTING: the holder confirms it is starting.

    With ``lease_seconds`` the lease must still be running and is renewed (a holder whose lease
    lapsed while the job waited in its batch must not start it). With ``authorized`` an
    AUTHORIZED event (the executor's checks) commits together with the start.
    """

    def build(job: Job, now: dt.datetime) -> _Change:
        values: dict[str, Any] = {}
        if lease_seconds is not None:
            if job.lease_until is None or job.lease_until < now:
                raise InvalidTransition(
                    job_id, job.state, S.EXECUTING, "the lease lapsed before the job began"
                )
            values["lease_until"] = _lease(now, lease_seconds)
        return _Change(values=values, events=_begin_events(job, actor, now, authorized))

    return _transition(
        job_id,
        to=S.EXECUTING,
        from_states=[S.CLAIMED],
        actor=actor,
        build=build,
        claim_id=claim_id,
        at=at,
    )


# The event that records each outcome state.
_FINISH_EVENT = {
    S.SUCCEEDED: EventType.SUCCEEDED,
    S.FAILED: EventType.FAILED,
    S.OUTCOME_UNKNOWN: EventType.OUTCOME_UNKNOWN,
}


def _begin_events(
    job: Job, actor: str, now: dt.datetime, authorized: Mapping[str, Any] | None
) -> list[Event]:
    """STARTED, and AUTHORIZED with the executor's checks: what a begin records."""
    events = [_event(job, EventType.STARTED, actor, now, S.EXECUTING)]
    if authorized is not None:
        events.append(
            _event(job, EventType.AUTHORIZED, actor, now, S.EXECUTING, **dict(authorized))
        )
    return events


def _outcome_events(
    job: Job,
    actor: str,
    now: dt.datetime,
    *,
    to: str,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
) -> list[Event]:
    """The outcome event, preceded by EXECUTED when ``executed_detail`` is given: EXECUTED (the
    mutation was attempted) commits with its outcome, never alone."""
    extra = dict(detail or {})
    if error:
        extra["error"] = error
    events = [_event(job, _FINISH_EVENT[to], actor, now, to, result_code=result_code, **extra)]
    if executed_detail is not None:
        executed = dict(executed_detail)
        executed.setdefault("result_code", result_code)
        events.insert(0, _event(job, EventType.EXECUTED, actor, now, to, **executed))
    return events


def _finish(
    job_id: str,
    *,
    to: str,
    claim_id: str,
    actor: str,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    def build(job: Job, now: dt.datetime) -> _Change:
        values: dict[str, Any] = {"result_code": result_code, "lease_until": None}
        if error:
            values["last_error"] = error
        events = _outcome_events(
            job,
            actor,
            now,
            to=to,
            result_code=result_code,
            error=error,
            detail=detail,
            executed_detail=executed_detail,
        )
        return _Change(values=values, events=events)

    return _transition(
        job_id,
        to=to,
        from_states=[S.EXECUTING],
        actor=actor,
        build=build,
        claim_id=claim_id,
        at=at,
    )


def complete_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "OK",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → SUCCEEDED (with ``executed_detail``: and EXECUTED, in one transaction)."""
    return _finish(
        job_id,
        to=S.SUCCEEDED,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


def fail_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str,
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → FAILED: the mutation certainly did not happen."""
    return _finish(
        job_id,
        to=S.FAILED,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        error=error,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


def mark_outcome_unknown(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "UNKNOWN",
    error: str = "",
    detail: Mapping[str, Any] | None = None,
    executed_detail: Mapping[str, Any] | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """EXECUTING → OUTCOME_UNKNOWN: the handler could not tell whether the mutation happened."""
    return _finish(
        job_id,
        to=S.OUTCOME_UNKNOWN,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        error=error,
        detail=detail,
        executed_detail=executed_detail,
        at=at,
    )


# --- batched steps for idempotent jobs ---------------------------------------------------------
#
# The executor's fast path. A batch of jobs one holder claimed together moves CLAIMED →
# EXECUTING in one guarded UPDATE, and their outcomes EXECUTING → SUCCEEDED/FAILED in another,
# each with one INSERT of its audit events — two statements per batch step instead of five per
# job. Every row keeps the guards of ``_transition``: the from-state and the holder's
# ``claim_id`` in the WHERE clause (and for a begin, a running lease), and the fingerprint
# recomputed from the row the UPDATE returns; a drift anywhere rolls the whole batch back.
#
# A row the batch does not move is never explained here: the caller sends it through the
# one-job function (``begin_job``, ``complete_job``…), which either moves it or raises the exact
# refusal and records a stale write. So refusals have one author, and a batch only ever does
# what the one-job functions would have done.
#
# Only for idempotent types that need no approval (the executor checks ``JobType``): between a
# batched begin and the job's handler a crash leaves the job EXECUTING, which for an idempotent
# type the sweep returns to READY exactly as it would a CLAIMED one (§1.3).


@dataclass(frozen=True)
class Outcome:
    """A handler's result for ``finish_jobs``: the job as its holder knows it and the outcome."""

    job: Job
    to: str
    result_code: str
    error: str = ""
    executed_detail: Mapping[str, Any] = field(default_factory=dict)


class _BatchDrift(Exception):
    """A returned row's fingerprint no longer matches its seal: undo the whole batch."""


def _returning_sql() -> str:
    """RETURNING what a fingerprint needs: the immutable columns and only the immutable keys
    of the payload (a SAVE's payload carries its content, up to megabytes)."""
    if connection.vendor == "postgresql":
        pairs = ", ".join(f"'{k}', payload -> '{k}'" for k in IMMUTABLE_PAYLOAD_FIELDS)
        subset = f"jsonb_build_object({pairs})"
    else:
        pairs = ", ".join(
            f"'{k}', json_extract(payload, '$.{k}')" for k in IMMUTABLE_PAYLOAD_FIELDS
        )
        subset = f"json_object({pairs})"
    return f"RETURNING job_id, fingerprint, {', '.join(IMMUTABLE_COLUMNS)}, {subset}"


def _batch_update(
    jobs: list[Job],
    *,
    from_state: str,
    assignments: Mapping[str, Any],
    lease_running_at: dt.datetime | None = None,
) -> set[str]:
    """One guarded UPDATE of ``jobs`` (each fenced on its own ``claim_id``); the ids it moved.

    With ``lease_running_at`` only rows whose lease runs at least until then move. Raises
    ``_BatchDrift`` if a moved row's fingerprint does not hold; the caller's atomic block then
    rolls everything back.
    """
    table = connection.ops.quote_name(Job._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    sets, params = [], []
    for column, value in assignments.items():
        sets.append(f"{column} = %s")
        params.append(adapt(value) if isinstance(value, dt.datetime) else value)
    # ``state || ''`` keeps the planner off the state indexes: every transition leaves a dead
    # entry in them, so on a busy queue "state = 'CLAIMED'" walks thousands of dead entries
    # (bitmap scans never mark them dead) while the primary key finds the batch's ten rows.
    where = "state || '' = %s"
    params.append(from_state)
    if lease_running_at is not None:
        where += " AND lease_until >= %s"
        params.append(adapt(lease_running_at))
    # The (job, claim) pairs travel as one JSON array: one statement text for any batch size.
    if connection.vendor == "postgresql":
        held = "SELECT j, c FROM jsonb_to_recordset(%s::jsonb) AS x(j text, c text)"
    else:
        held = "SELECT json_extract(value, '$.j'), json_extract(value, '$.c') FROM json_each(%s)"
    params.append(json.dumps([{"j": job.job_id, "c": job.claim_id} for job in jobs]))
    sql = (
        f"UPDATE {table} SET {', '.join(sets)} WHERE {where} "
        f"AND (job_id, claim_id) IN ({held}) {_returning_sql()}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    moved = set()
    for row in rows:
        job_id, sealed, *columns, subset = row
        payload = json.loads(subset) if isinstance(subset, str) else (subset or {})
        current = compute_fingerprint(
            columns=dict(zip(IMMUTABLE_COLUMNS, columns, strict=True)), payload=payload
        )
        if current != sealed:
            raise _BatchDrift(job_id)
        moved.add(job_id)
    return moved


def begin_jobs(
    jobs: list[Job],
    *,
    actor: str,
    lease_seconds: int,
    authorized: Mapping[str, Mapping[str, Any]],
    at: dt.datetime | None = None,
) -> set[str]:
    """CLAIMED → EXECUTING for a holder's batch: ``begin_job`` with ``lease_seconds`` and
    ``authorized`` (job id → the executor's checks), set-based.

    Returns the ids that moved (their ``state`` and ``lease_until`` are updated in place). The
    rest — lost claim, lapsed lease, another state — and the whole batch on a fingerprint drift
    are left untouched for the caller to send through ``begin_job``.
    """
    if not jobs:
        return set()
    try:
        with transaction.atomic():
            now = db_now(at)
            lease_until = _lease(now, lease_seconds)
            moved = _batch_update(
                jobs,
                from_state=S.CLAIMED,
                assignments={"state": S.EXECUTING, "lease_until": lease_until, "updated_at": now},
                lease_running_at=now,
            )
            record_events(
                event
                for job in jobs
                if job.job_id in moved
                for event in _begin_events(job, actor, now, authorized.get(job.job_id, {}))
            )
    except _BatchDrift as exc:
        log.warning("batched begin undone: job %s drifted; each job goes on its own", exc)
        return set()
    for job in jobs:
        if job.job_id in moved:
            job.state, job.lease_until, job.updated_at = S.EXECUTING, lease_until, now
    return moved


def finish_jobs(outcomes: list[Outcome], *, actor: str, at: dt.datetime | None = None) -> set[str]:
    """EXECUTING → SUCCEEDED / FAILED / OUTCOME_UNKNOWN for a holder's batch, each outcome
    committed with its EXECUTED event: ``complete_job`` and friends with ``executed_detail``,
    set-based (one UPDATE per distinct outcome, usually one).

    Returns the ids that moved; the rest are left for the one-job functions, as in
    ``begin_jobs``.
    """
    if not outcomes:
        return set()
    groups: dict[tuple[str, str, str], list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.to not in _FINISH_EVENT:
            raise ValueError(f"not an outcome state: {outcome.to}")
        groups.setdefault((outcome.to, outcome.result_code, outcome.error), []).append(outcome)
    try:
        with transaction.atomic():
            now = db_now(at)
            moved: set[str] = set()
            for (to, result_code, error), group in groups.items():
                values: dict[str, Any] = {
                    "state": to,
                    "result_code": result_code,
                    "lease_until": None,
                    "updated_at": now,
                }
                if error:
                    values["last_error"] = error
                moved |= _batch_update(
                    [o.job for o in group], from_state=S.EXECUTING, assignments=values
                )
            events = [
                event
                for o in outcomes
                if o.job.job_id in moved
                for event in _outcome_events(
                    o.job,
                    actor,
                    now,
                    to=o.to,
                    result_code=o.result_code,
                    error=o.error,
                    executed_detail=o.executed_detail,
                )
            ]
            record_events(events)
    except _BatchDrift as exc:
        log.warning("batched outcome undone: job %s drifted; each job goes on its own", exc)
        return set()
    for o in outcomes:
        if o.job.job_id in moved:
            o.job.state, o.job.result_code, o.job.lease_until = o.to, o.result_code, None
            o.job.updated_at = now
            if o.error:
                o.job.last_error = o.error
    return moved


# --- recovery ---------------------------------------------------------------------------------


@dataclass
class RecoveryReport:
    """What a sweep did (or, with ``dry_run``, would do)."""

    requeued: dict[str, int] = field(default_factory=dict)
    parked: dict[str, int] = field(default_factory=dict)
    max_attempts: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (
            sum(self.requeued.values())
            + sum(self.parked.values())
            + sum(self.max_attempts.values())
        )

    def summary(self, *, dry_run: bool = False) -> str:
        def fmt(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {t}" for t, n in sorted(counts.items())) or "0"

        verb = "would have " if dry_run else ""
        text = (
            f"{verb}requeued {fmt(self.requeued)}; {verb}parked {fmt(self.parked)} as "
            f"OUTCOME_UNKNOWN; {sum(self.max_attempts.values())} hit max_attempts"
        )
        if self.refused:
            text += f"; {len(self.refused)} refused (fingerprint drift or race)"
        return text


def lapsed_outcome(job: Job) -> str:
    """Where §1.3 sends a job whose lease lapsed: READY, FAILED (max attempts) or UNKNOWN."""
    job_type = registry().get(job.job_type)
    if job_type is None or not job_type.idempotent:
        return S.OUTCOME_UNKNOWN
    if job.attempt_count >= job.max_attempts:
        return S.FAILED
    return S.READY


def recover_stale_claims_report(
    *,
    at: dt.datetime | None = None,
    dry_run: bool = False,
    actor: str = "sweeper",
    batch: int = 500,
) -> RecoveryReport:
    """Apply §1.3's lapsed-lease rules to every held job whose lease ended strictly before now."""
    now = db_now(at)
    report = RecoveryReport()
    seen: set[str] = set()
    while True:
        candidates = [
            job
            for job in Job.objects.lapsed(now).order_by("lease_until", "job_id")[
                : batch + len(seen)
            ]
            if job.job_id not in seen
        ][:batch]
        if not candidates:
            return report
        for job in candidates:
            seen.add(job.job_id)
            to = lapsed_outcome(job)
            bucket = {
                S.READY: report.requeued,
                S.FAILED: report.max_attempts,
                S.OUTCOME_UNKNOWN: report.parked,
            }[to]
            if not dry_run:
                try:
                    _recover_one(job, to=to, now=now, actor=actor)
                except (InvalidTransition, ImmutableFieldDrift) as exc:
                    report.refused.append(f"{job.job_id}: {exc}")
                    continue
            bucket[job.job_type] = bucket.get(job.job_type, 0) + 1
            report.job_ids.append(job.job_id)
        if dry_run:
            # Nothing changes in a dry run, so the next page is the same one: stop here.
            if len(candidates) < batch:
                return report


def _recover_one(job: Job, *, to: str, now: dt.datetime, actor: str) -> Job:
    old_claim = job.claim_id

    def build(current: Job, _now: dt.datetime) -> _Change:
        values: dict[str, Any] = {"lease_until": None}
        if to == S.READY:
            values.update(CLEARED_CLAIM)
            result_code = "LEASE_EXPIRED"
        elif to == S.FAILED:
            result_code = "MAX_ATTEMPTS"
            values["last_error"] = f"lease lapsed after {current.attempt_count} attempts"
        else:
            result_code = "LEASE_EXPIRED"
            values["last_error"] = "lease lapsed while held; outcome unknown"
        if to != S.READY:
            values["result_code"] = result_code
        return _Change(
            values=values,
            events=[
                _event(
                    current,
                    EventType.LEASE_EXPIRED,
                    actor,
                    now,
                    to,
                    result_code=result_code,
                    claim_id=old_claim,
                    worker_id=current.worker_id,
                    lease_until=current.lease_until.isoformat() if current.lease_until else None,
                    attempt=current.attempt_count,
                )
            ],
        )

    return _transition(
        job.job_id,
        to=to,
        from_states=[job.state],
        actor=actor,
        build=build,
        guard=Q(claim_id=old_claim, lease_until__lt=now),
        guard_why="the lease was renewed or the claim changed meanwhile",
        at=now,
    )


def recover_stale_claims(*, at: dt.datetime | None = None) -> int:
    """Recover every lapsed lease; return how many jobs moved."""
    return recover_stale_claims_report(at=at).total


# --- operator actions -------------------------------------------------------------------------


def retry_job(job_id: str, *, actor: str, reason: str, at: dt.datetime | None = None) -> Job:
    """FAILED → READY by an operator; the job gets a fresh attempt budget."""
    if not reason:
        raise ValueError("retry_job needs a reason")

    def build(job: Job, now: dt.datetime) -> _Change:
        return _Change(
            values={**CLEARED_CLAIM, "attempt_count": 0, "result_code": ""},
            events=[
                _event(
                    job,
                    EventType.RETRIED,
                    actor,
                    now,
                    S.READY,
                    reason=reason,
                    previous_result_code=job.result_code,
                    previous_attempts=job.attempt_count,
                )
            ],
        )

    return _transition(job_id, to=S.READY, from_states=[S.FAILED], actor=actor, build=build, at=at)


def reconcile_job(
    job_id: str,
    *,
    actor: str,
    result_code: str,
    evidence: Mapping[str, Any] | None = None,
    reason: str = "",
    at: dt.datetime | None = None,
) -> Job:
    """OUTCOME_UNKNOWN → RECONCILED with a result code and the evidence that decided it."""

    def build(job: Job, now: dt.datetime) -> _Change:
        return _Change(
            values={"result_code": result_code},
            events=[
                _event(
                    job,
                    EventType.RECONCILED,
                    actor,
                    now,
                    S.RECONCILED,
                    result_code=result_code,
                    evidence=dict(evidence or {}),
                    reason=reason,
                )
            ],
        )

    return _transition(
        job_id, to=S.RECONCILED, from_states=[S.OUTCOME_UNKNOWN], actor=actor, build=build, at=at
    )


def set_result_code(
    job_id: str,
    *,
    actor: str,
    result_code: str,
    detail: Mapping[str, Any] | None = None,
    states: Iterable[str] = (S.OUTCOME_UNKNOWN,),
    at: dt.datetime | None = None,
) -> Job:
    """Store a diagnosis as ``result_code`` without a state change (guarded on the state)."""
    allowed = tuple(states)
    with transaction.atomic():
        job = _load_locked(job_id)
        now = db_now(at)
        if job.state not in allowed:
            raise InvalidTransition(job_id, job.state, job.state, "no diagnosis in this state")
        if not fingerprint_ok(job):
            drift = ImmutableFieldDrift(job_id, job.fingerprint, fingerprint_of(job))
        else:
            drift = None
            changed = Job.objects.filter(
                job_id=job_id, state=job.state, fingerprint=job.fingerprint
            ).update(result_code=result_code, updated_at=now)
            if changed != 1:
                raise InvalidTransition(job_id, job.state, job.state, "lost a race")
            record_event(
                event_type=EventType.DIAGNOSED,
                actor=actor,
                job_id=job_id,
                result_code=result_code,
                detail={"state": job.state, **dict(detail or {})},
                at=now,
            )
    if drift is not None:
        _record_drift(job, job.state, actor, at)
        raise drift
    job.result_code = result_code
    job.updated_at = now
    return job


def edit_job_fields(
    job_id: str, *, actor: str, changes: Mapping[str, Any], at: dt.datetime | None = None
) -> Job:
    """An admin's raw edit of the few editable fields, recorded as ADMIN_EDIT."""
    refused = sorted(set(changes) - set(EDITABLE_FIELDS))
    if refused:
        raise InvalidTransition(job_id, None, "edit", f"fields not editable: {', '.join(refused)}")
    with transaction.atomic():
        job = _load_locked(job_id)
        now = db_now(at)
        changed = {k: v for k, v in changes.items() if getattr(job, k) != v}
        if not changed:
            return job
        Job.objects.filter(job_id=job_id).update(**changed, updated_at=now)
        record_event(
            event_type=EventType.ADMIN_EDIT,
            actor=actor,
            job_id=job_id,
            detail={
                "fields": sorted(changed),
                "before": {k: getattr(job, k) for k in changed},
                "after": dict(changed),
            },
            at=now,
        )
    for name, value in changed.items():
        setattr(job, name, value)
    return job
