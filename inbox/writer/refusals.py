from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from django.db import transaction

from audit.events import record_events
from audit.models import AuditEvent, EventType
from inbox.errors import ImmutableFieldDrift, InboxError, InvalidTransition, JobNotFound, LostClaim
from inbox.models import Job
from inbox.writer.events import drift_event, stale_write_event
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
    if move.reported is not None and job.state not in move.allowed and _swept(job, item):
        return LostClaim(
            job.job_id,
            job.state,
            target,
            claim_id=item.claim_id or "",
            why=(
                f"the lease of claim {item.claim_id} lapsed and the sweep moved the job to "
                f"{job.state}; the report is recorded, not applied"
            ),
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


def _swept(job: Job, item: Held) -> bool:
    """Did the sweep take ``job`` from the claim ``item`` still holds on the row (its lease
    lapsed)? Then the holder's outcome comes too late: it is refused and recorded. Read from
    the trail (the sweep's LEASE_EXPIRED names the claim), and only on a refusal: a holder's
    duplicate report of an outcome already committed is no late report."""
    if not item.claim_id or job.claim_id != item.claim_id:
        return False
    return AuditEvent.objects.filter(
        job_id=job.job_id, event_type=EventType.LEASE_EXPIRED, detail__claim_id=item.claim_id
    ).exists()


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
        record_events([drift_event(job, to_state, actor, current, at)])
    log.error("job %s: fingerprint drift, transition to %s refused", job.job_id, to_state)


def record_stale_write(job: Job, item: Held, move: Move) -> None:
    """Record a stale holder's refused write (``job`` as stored now) in its own transaction:
    nothing of the refused transition is kept, only this record of it."""
    with transaction.atomic():
        record_events([stale_write_event(job, item, move)])
    log.warning(
        "job %s: write to %s by stale claim %s refused (now %s, held by %r)%s",
        job.job_id,
        move.to or job.state,
        item.claim_id,
        job.state,
        job.worker_id,
        "; what it reported is recorded" if move.reported is not None else "",
    )
