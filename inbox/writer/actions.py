from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import transaction

from audit.events import Event
from audit.models import EventType
from inbox.errors import InvalidTransition, JobNotFound
from inbox.models import Job, JobState
from inbox.writer.engine import run
from inbox.writer.events import moved_events
from inbox.writer.rows import lock_jobs
from inbox.writer.values import CLEARED_CLAIM, EDITABLE_FIELDS, Held, Move, Moved, S


def retry_jobs(
    job_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    run_after: dt.datetime | None = None,
    at: dt.datetime | None = None,
) -> Moved:
    """FAILED → READY by an operator; each job gets a fresh attempt budget. With
    ``run_after`` (aware) the jobs are not claimed before it (an operator's "retry at");
    without, a deferral left from an earlier retry is cleared: they run now."""
    if not reason:
        raise ValueError("retry_job needs a reason")
    if run_after is not None and (run_after.tzinfo is None or run_after.utcoffset() is None):
        raise ValueError("run_after must be an aware datetime")

    def detail(job: Job, before: Job | None) -> dict[str, Any]:
        assert before is not None
        return {
            "reason": reason,
            "previous_result_code": before.result_code,
            "previous_attempts": before.attempt_count,
            **({"run_after": run_after.isoformat()} if run_after else {}),
        }

    return run(
        Move(
            [Held(job_id) for job_id in job_ids],
            to=S.READY,
            allowed=[S.FAILED],
            actor=actor,
            values={**CLEARED_CLAIM, "attempt_count": 0, "result_code": "", "run_after": run_after},
            events=moved_events(EventType.RETRIED, actor, S.READY, [S.FAILED], detail),
            prior=lambda: lock_jobs(job_ids, skip_locked=len(job_ids) > 1),
            at=at,
        )
    )


def retry_job(
    job_id: str,
    *,
    actor: str,
    reason: str,
    run_after: dt.datetime | None = None,
    at: dt.datetime | None = None,
) -> Job:
    """Retry one FAILED job (see ``retry_jobs``)."""
    return retry_jobs([job_id], actor=actor, reason=reason, run_after=run_after, at=at).one()


CANCELLABLE = (S.CREATED, S.READY, S.CLAIMED)


def cancel_jobs(
    job_ids: Sequence[str], *, actor: str, reason: str, at: dt.datetime | None = None
) -> Moved:
    """An operator's cancel of jobs that have not begun (CREATED, READY, or CLAIMED before its
    begin) → REJECTED with ``CANCELLED`` and the reason. A job that began is
    refused: it ends by its outcome, its lease or reconciliation. A holder of a cancelled
    claim is fenced off like any stale holder."""
    if not (reason or "").strip():
        raise ValueError("cancel_job needs a reason")

    def detail(job: Job, before: Job | None) -> dict[str, Any]:
        assert before is not None
        return {
            "result_code": "CANCELLED",
            "reason": reason,
            "cancelled": True,
            "claim_id": before.claim_id,
            "worker_id": before.worker_id,
        }

    return run(
        Move(
            [Held(job_id) for job_id in job_ids],
            to=S.REJECTED,
            allowed=CANCELLABLE,
            actor=actor,
            values={"result_code": "CANCELLED", "last_error": reason, **CLEARED_CLAIM},
            events=moved_events(EventType.REJECTED, actor, S.REJECTED, CANCELLABLE, detail),
            prior=lambda: lock_jobs(job_ids, skip_locked=len(job_ids) > 1),
            why="it began meanwhile",
            at=at,
        )
    )


def cancel_job(job_id: str, *, actor: str, reason: str, at: dt.datetime | None = None) -> Job:
    """Cancel one job that has not begun (see ``cancel_jobs``)."""
    return cancel_jobs([job_id], actor=actor, reason=reason, at=at).one()


def reconcile_jobs(
    evidence: Mapping[str, Mapping[str, Any] | None],
    *,
    actor: str,
    result_code: str,
    reason: str = "",
    skip_locked: bool = False,
    at: dt.datetime | None = None,
) -> Moved:
    """OUTCOME_UNKNOWN → RECONCILED with a result code and, per job, the evidence that decided
    it (``evidence``: job id → evidence). With ``skip_locked`` (the auto-reconciler, bulk
    actions) a row held right now is refused as busy instead of waited on."""

    def detail(job: Job, before: Job | None) -> dict[str, Any]:
        found = dict(evidence.get(job.job_id) or {})
        return {"result_code": result_code, "evidence": found, "reason": reason}

    allowed = [S.OUTCOME_UNKNOWN]
    return run(
        Move(
            [Held(job_id) for job_id in evidence],
            to=S.RECONCILED,
            allowed=allowed,
            actor=actor,
            values={"result_code": result_code},
            events=moved_events(EventType.RECONCILED, actor, S.RECONCILED, allowed, detail),
            prior=(lambda: lock_jobs(evidence, skip_locked=True)) if skip_locked else None,
            at=at,
        )
    )


def reconcile_job(
    job_id: str,
    *,
    actor: str,
    result_code: str,
    evidence: Mapping[str, Any] | None = None,
    reason: str = "",
    at: dt.datetime | None = None,
) -> Job:
    """Reconcile one OUTCOME_UNKNOWN job (see ``reconcile_jobs``)."""
    return reconcile_jobs(
        {job_id: evidence}, actor=actor, result_code=result_code, reason=reason, at=at
    ).one()


def set_result_codes(
    detail: Mapping[str, Mapping[str, Any] | None],
    *,
    actor: str,
    result_code: str,
    states: Iterable[str] = (S.OUTCOME_UNKNOWN,),
    skip_locked: bool = False,
    at: dt.datetime | None = None,
) -> Moved:
    """Store a diagnosis as ``result_code`` without a state change (guarded on the state);
    ``detail``: job id → what the DIAGNOSED event records beside the state."""
    allowed = tuple(states)

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            Event(
                EventType.DIAGNOSED,
                actor,
                job_id=job.job_id,
                result_code=result_code,
                detail={"state": job.state, **dict(detail.get(job.job_id) or {})},
                at=now,
            )
        ]

    return run(
        Move(
            [Held(job_id) for job_id in detail],
            to=None,
            allowed=allowed,
            actor=actor,
            values={"result_code": result_code},
            events=events,
            prior=(
                (lambda: lock_jobs(detail, skip_locked=skip_locked))
                if skip_locked or len(allowed) > 1
                else None
            ),
            at=at,
        )
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
    """Store one diagnosis (see ``set_result_codes``)."""
    return set_result_codes(
        {job_id: detail}, actor=actor, result_code=result_code, states=states, at=at
    ).one()


def edit_job_fields(
    job_id: str, *, actor: str, changes: Mapping[str, Any], at: dt.datetime | None = None
) -> Job:
    """An admin's raw edit of the few editable fields, recorded as ADMIN_EDIT. No seal check:
    these fields are not sealed, and an operator may annotate a drifted job."""
    refused = sorted(set(changes) - set(EDITABLE_FIELDS))
    if refused:
        raise InvalidTransition(job_id, None, "edit", f"fields not editable: {', '.join(refused)}")
    with transaction.atomic():
        prior = lock_jobs([job_id])
        job = prior.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        changed = {k: v for k, v in changes.items() if getattr(job, k) != v}
        if not changed:
            return job

        def events(after: Job, before: Job | None, now: dt.datetime) -> list[Event]:
            detail = {
                "fields": sorted(changed),
                "before": {k: getattr(job, k) for k in changed},
                "after": dict(changed),
            }
            return [Event(EventType.ADMIN_EDIT, actor, job_id=job_id, detail=detail, at=now)]

        moved = run(
            Move(
                [Held(job_id)],
                to=None,
                allowed=tuple(JobState),
                actor=actor,
                values=changed,
                events=events,
                seal=False,
                prior=lambda: prior,
                at=at,
            )
        )
    return moved.one()
