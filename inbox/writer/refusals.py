from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from django.db import transaction

from audit.events import record_event
from audit.models import AuditEvent, EventType
from inbox.errors import ImmutableFieldDrift, InboxError, InvalidTransition, JobNotFound, LostClaim
from inbox.models import Job
from inbox.writer.rows import fingerprint_of, fingerprint_ok
from inbox.writer.values import Held, Move

log = logging.getLogger("inbox.transitions")


def subject_of(held: Sequence[Held]) -> str:
    """How a refusal names the rows (a lock timeout's message)."""
    if len(held) == 1:
        return f"job {held[0].job_id!r}"
    return f"{len(held)} jobs" if held else "the jobs picked"


def refusal_of(job: Job | None, item: Held, move: Move, now: dt.datetime) -> InboxError | None:
    """Why ``job`` (as stored now) may not move, or None. The order is the contract: a stale
    holder hears that it lost the claim whatever state the new holder moved the job to."""
    if job is None:
        return JobNotFound(item.job_id)
    target = move.to or job.state
    if move.refusal is not None and (error := move.refusal(job, item, now)) is not None:
        return error
    if move.fence == "holder" and job.claim_id != item.claim_id:
        holder = job.worker_id or "nobody"
        return LostClaim(
            job.job_id,
            job.state,
            target,
            claim_id=item.claim_id or "",
            why=f"claim {item.claim_id} is no longer held (held by {holder})",
        )
    if job.state not in move.allowed:
        return InvalidTransition(
            job.job_id, job.state, target, f"allowed only from {', '.join(move.allowed)}"
        )
    if move.seal and not fingerprint_ok(job):
        return ImmutableFieldDrift(job.job_id, job.fingerprint, fingerprint_of(job))
    observed_lost = move.fence == "observed" and job.claim_id != item.claim_id
    lease_failed = (
        move.lease == "running" and (job.lease_until is None or job.lease_until < now)
    ) or (move.lease == "lapsed" and (job.lease_until is None or job.lease_until >= now))
    if observed_lost or lease_failed:
        return InvalidTransition(job.job_id, job.state, target, move.why or "lost a race")
    return None


def is_stale(error: InboxError, job: Job | None, item: Held, move: Move) -> bool:
    """A holder's write refused because the claim is no longer its own (a STALE_WRITE record);
    a lapsed lease under a claim still held is only awaiting the sweep."""
    if not isinstance(error, LostClaim) or move.fence != "holder" or job is None:
        return False
    return not (job.claim_id == item.claim_id and job.state in move.allowed)


def lost_race(job_id: str, job: Job | None, to: str | None) -> InboxError:
    if job is None:
        return JobNotFound(job_id)
    return InvalidTransition(job_id, job.state, to or job.state, "lost a race")


def record_drift(job: Job, to_state: str, actor: str, at: dt.datetime | None) -> None:
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


def record_stale_write(job: Job, to_state: str, claim_id: str, actor: str, at) -> None:
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
