from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict, Unpack

from django.db import connection

from audit.events import Event
from audit.models import EventType
from inbox.errors import InboxError, LostClaim
from inbox.models import HELD_STATES, Job
from inbox.writer.engine import run, run_moves
from inbox.writer.events import (
    CLAIM_AND_BEGIN,
    begin_events,
    claim_and_begin_events,
    claim_events,
    transition_event,
)
from inbox.writer.sql import RANDOM_TOKEN_SQL
from inbox.writer.values import (
    CLEARED_CLAIM,
    BatchDrift,
    Held,
    Move,
    Moved,
    Pick,
    S,
    Sql,
    lease_end,
    undone_batch,
)


def _claim_values(worker_id: str, now: dt.datetime, lease_until: dt.datetime) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "claim_id": Sql(RANDOM_TOKEN_SQL[connection.vendor]),
        "claimed_at": now,
        "lease_until": lease_until,
        "attempt_count": Sql("attempt_count + 1"),
    }


def claim_next_jobs(
    *,
    scope: str,
    worker_id: str,
    lease_seconds: int,
    limit: int = 1,
    at: dt.datetime | None = None,
) -> list[Job]:
    """Claim up to ``limit`` READY jobs of ``scope`` in claim order, atomically; a job whose
    ``run_after`` is still ahead waits.

    The one guarded UPDATE picks its rows itself (``Pick``): in claim order, on PostgreSQL
    with FOR UPDATE SKIP LOCKED, so concurrent claimers take different rows; SQLite's
    IMMEDIATE transaction serialises them. A job whose seal broke is refused (and recorded)
    and another is picked in its place.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not worker_id:
        raise ValueError("claim_next_jobs needs a worker_id")
    return run(
        Move(
            [],
            to=S.CLAIMED,
            allowed=[S.READY],
            actor=worker_id,
            values=lambda now: _claim_values(worker_id, now, lease_end(now, lease_seconds)),
            events=claim_events(worker_id),
            pick=Pick(scope, limit),
            at=at,
        )
    ).jobs


class BatchClaim(TypedDict):
    """What a claim that begins at once takes (``claim_and_begin_jobs``, and the claim that
    ``finish_and_claim_jobs`` makes with the outcomes)."""

    scope: str
    worker_id: str
    lease_seconds: int
    limit: int
    authorize: Callable[[Job], bool]
    at: NotRequired[dt.datetime | None]


def claim_and_begin_jobs(**claim: Unpack[BatchClaim]) -> list[Job]:
    """READY → CLAIMED → EXECUTING in one guarded UPDATE: the executor's claim of jobs it
    begins at once (idempotent types that need no approval; the lifecycle's two edges, both
    recorded), the next ``limit`` of ``scope`` in claim order unless the scope is paused.

    Each moved job records CLAIMED, STARTED and AUTHORIZED (the executor's checks: schema and
    seal) — on PostgreSQL in the claiming statement itself. It runs in the caller's transaction
    with no savepoint of its own: ``authorize`` (the executor's checks of each claimed job,
    before the commit, asked only of rows whose seal this statement's result has passed)
    refusing a row, or a drifted seal, raises ``BatchRefused`` and the
    caller's rollback undoes the claim and its events (nothing is kept); the caller then claims
    step by step (``claim_next_jobs``, ``begin_jobs``), which refuses and records each row on
    its own. The intermediate CLAIMED state is never visible to anyone: with separate steps
    the claim and the begin of these jobs commit together too.
    """
    return run_moves([claim_and_begin_move(claim)])[0].jobs


def claim_and_begin_move(claim: BatchClaim) -> Move:
    """``claim_and_begin_jobs``'s move."""
    limit, worker_id, lease_seconds = claim["limit"], claim["worker_id"], claim["lease_seconds"]
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if not worker_id:
        raise ValueError("claim_and_begin_jobs needs a worker_id")
    return Move(
        [],
        S.EXECUTING,
        (S.READY,),
        worker_id,
        claim_and_begin_events(worker_id),
        values=lambda now: _claim_values(worker_id, now, lease_end(now, lease_seconds)),
        row_events=CLAIM_AND_BEGIN_ROW_EVENTS,
        accept=claim["authorize"],
        pick=Pick(claim["scope"], limit, unless_paused=True),
        fail_closed=True,
        savepoint=False,
        at=claim.get("at"),
    )


# The same events as SQL over each claimed row, written by the claiming statement itself on
# PostgreSQL.
CLAIM_AND_BEGIN_ROW_EVENTS = tuple(shape.row_event() for shape in CLAIM_AND_BEGIN)


def claim_job(
    job_id: str, *, worker_id: str, lease_seconds: int, at: dt.datetime | None = None
) -> Job:
    """Claim one named READY job."""
    return run(
        Move(
            [Held(job_id)],
            to=S.CLAIMED,
            allowed=[S.READY],
            actor=worker_id,
            values=lambda now: _claim_values(worker_id, now, lease_end(now, lease_seconds)),
            events=claim_events(worker_id),
            at=at,
        )
    ).one()


def renew_leases(
    held: Sequence[Held],
    *,
    lease_seconds: int,
    actor: str | None = None,
    at: dt.datetime | None = None,
) -> Moved:
    """Extend the holder's leases; a lease that is no longer the caller's, or has lapsed, is
    refused (``LostClaim``) and the worker must stop working on that job."""
    actor = actor or "worker"

    def refusal(job: Job, item: Held, now: dt.datetime) -> InboxError | None:
        if job.claim_id == item.claim_id and job.state in HELD_STATES:
            if job.lease_until is not None and job.lease_until >= now:
                return None
            lapsed = job.lease_until.isoformat() if job.lease_until else "never set"
            why = f"lease lapsed at {lapsed}; awaiting the sweep"
        else:
            why = f"claim {item.claim_id} is no longer held (job is {job.state})"
        return LostClaim(job.job_id, job.state, job.state, claim_id=item.claim_id or "", why=why)

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        detail = {"claim_id": job.claim_id, "lease_until": job.lease_until.isoformat()}
        return [Event(EventType.LEASE_RENEWED, actor, job_id=job.job_id, detail=detail, at=now)]

    return run(
        Move(
            held,
            to=None,
            allowed=HELD_STATES,
            actor=actor,
            values=lambda now: {"lease_until": lease_end(now, lease_seconds)},
            events=events,
            fence="holder",
            lease="running",
            seal=False,
            full=False,
            refusal=refusal,
            at=at,
        )
    )


def renew_lease(
    job_id: str,
    *,
    claim_id: str,
    lease_seconds: int,
    actor: str | None = None,
    at: dt.datetime | None = None,
) -> dt.datetime:
    """Extend one holder's lease; its new end, or ``LostClaim``."""
    job = renew_leases(
        [Held(job_id, claim_id)], lease_seconds=lease_seconds, actor=actor, at=at
    ).one()
    return job.lease_until


def release_jobs(
    held: Sequence[Held], *, actor: str, reason: str = "", at: dt.datetime | None = None
) -> Moved:
    """The holder hands back CLAIMED jobs it never began: → READY, the attempt not counted."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            transition_event(job, EventType.RELEASED, actor, now, S.CLAIMED, S.READY, reason=reason)
        ]

    return _from_claimed(
        held,
        S.READY,
        actor,
        at,
        values={
            **CLEARED_CLAIM,
            "attempt_count": Sql("CASE WHEN attempt_count > 0 THEN attempt_count - 1 ELSE 0 END"),
        },
        events=events,
    )


def release_job(
    job_id: str, *, claim_id: str, actor: str, reason: str = "", at: dt.datetime | None = None
) -> Job:
    """Hand back one CLAIMED job (see ``release_jobs``)."""
    return release_jobs([Held(job_id, claim_id)], actor=actor, reason=reason, at=at).one()


def _begin(
    held: Sequence[Held],
    *,
    actor: str,
    lease_seconds: int | None,
    authorized: Callable[[str], Mapping[str, Any] | None],
    fail_closed: bool,
    full: bool,
    at: dt.datetime | None,
) -> Moved:
    return _from_claimed(
        held,
        S.EXECUTING,
        actor,
        at,
        values=lambda now: (
            {} if lease_seconds is None else {"lease_until": lease_end(now, lease_seconds)}
        ),
        events=begin_events(actor, authorized),
        lease="running" if lease_seconds is not None else None,
        fail_closed=fail_closed,
        events_ahead=True,
        full=full,
        why="the lease lapsed before the job began",
    )


def _from_claimed(
    held: Sequence[Held], to: str, actor: str, at: dt.datetime | None, **move: Any
) -> Moved:
    """A holder's move of jobs it claimed and has not begun, each fenced on its claim."""
    return run(Move(held, to=to, allowed=[S.CLAIMED], actor=actor, fence="holder", at=at, **move))


def begin_jobs(
    jobs: Sequence[Job],
    *,
    actor: str,
    lease_seconds: int,
    authorized: Mapping[str, Mapping[str, Any]],
    at: dt.datetime | None = None,
) -> Moved:
    """CLAIMED → EXECUTING for a holder's batch, renewing each running lease, each begin
    committed with its STARTED and AUTHORIZED (``authorized``: job id → the executor's checks).

    Fail closed: a drifted seal anywhere undoes the whole batch (``Moved.undone``, nothing
    written); begin each job on its own then. The copies in ``jobs`` are updated in place.
    """
    try:
        return _begin(
            [Held.of(job) for job in jobs],
            actor=actor,
            lease_seconds=lease_seconds,
            authorized=lambda job_id: authorized.get(job_id, {}),
            fail_closed=len(jobs) > 1,
            full=False,
            at=at,
        )
    except BatchDrift as exc:
        return undone_batch(jobs, exc)


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
    checks = dict(authorized) if authorized is not None else None
    return _begin(
        [Held(job_id, claim_id)],
        actor=actor,
        lease_seconds=lease_seconds,
        authorized=lambda _job_id: checks,
        fail_closed=False,
        full=True,
        at=at,
    ).one()
