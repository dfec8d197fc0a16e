"""Four-eyes decisions on DELETE jobs: a user with the approve permission who is not the
requester approves or denies, with a reason.

Owns the ``Approval`` rows: approve, deny, revoke, and the re-check the executor makes right
before executing. Job state still changes only through ``inbox.transitions`` (``mark_ready``,
``reject_job``), inside the same transaction as the decision and its audit event. Callers: the
console's views, the ``approve``/``deny``/``revoke_approval`` commands and ``inbox.executor``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from audit.events import record_event
from audit.models import EventType
from core.clock import db_now
from inbox import transitions
from inbox.errors import ApprovalError, InvalidTransition, JobNotFound
from inbox.jobtypes import registry
from inbox.models import Approval, ApprovalDecision, Job, JobState

PERMISSION = "inbox.approve_delete"


@dataclass(frozen=True)
class ApprovalCheck:
    """The executor's verdict on a job's approval; ``code`` becomes the REJECTED result code."""

    ok: bool
    code: str
    why: str


def _username(user) -> str:
    if user is None or not getattr(user, "is_authenticated", False):
        raise ApprovalError("an approval decision needs a signed-in user")
    if not user.is_active:
        raise ApprovalError(f"user {user.get_username()!r} is inactive")
    if not user.has_perm(PERMISSION):
        raise ApprovalError(
            f"user {user.get_username()!r} lacks the permission {PERMISSION} "
            "(the 'approver' role grants it)"
        )
    return user.get_username()


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ApprovalError("a decision needs a reason")
    return reason


def _load_undecided(job_id: str, username: str) -> Job:
    job = transitions.lock_jobs([job_id]).get(job_id)
    if job is None:
        raise JobNotFound(job_id)
    job_type = registry().get(job.job_type)
    if job_type is None or not job_type.needs_approval:
        raise ApprovalError(f"job {job_id!r} is a {job.job_type}, which needs no approval")
    if job.state != JobState.CREATED or job.approval_id:
        raise ApprovalError(
            f"job {job_id!r} is {job.state}"
            + (f" with approval {job.approval_id}" if job.approval_id else "")
            + "; only a CREATED job awaiting approval can be decided"
        )
    if job.requested_by == username:
        raise ApprovalError(
            f"user {username!r} requested job {job_id!r} and cannot decide it (four eyes)"
        )
    return job


@contextmanager
def _refusal_as_approval_error() -> Iterator[None]:
    """The job's own move, refused (it changed state meanwhile), is the decision's refusal."""
    try:
        yield
    except InvalidTransition as exc:
        raise ApprovalError(str(exc)) from exc


def _decision_row(
    job: Job,
    username: str,
    decision: str,
    reason: str,
    now: dt.datetime,
    *,
    expires_at: dt.datetime | None = None,
) -> Approval:
    """The Approval row of one decision (approve or deny) on ``job``."""
    return Approval.objects.create(
        approval_id=uuid.uuid4().hex,
        job_id=job.job_id,
        delete_request_id=str(job.payload.get("delete_request_id", "")),
        object_id=job.object_id,
        requested_by=job.requested_by,
        approver=username,
        decision=decision,
        reason=reason,
        decided_at=now,
        expires_at=expires_at,
    )


def approve_delete(
    job_id: str, *, approver, reason: str, ttl_seconds: int | None = None
) -> Approval:
    """Approve a DELETE job: an Approval row, its APPROVED event and CREATED → READY, at once."""
    username = _username(approver)
    reason = _reason(reason)
    ttl = settings.INBOX_APPROVAL_TTL_SECONDS if ttl_seconds is None else int(ttl_seconds)
    if ttl <= 0:
        raise ApprovalError(f"ttl_seconds must be positive, got {ttl}")
    with transaction.atomic():
        job = _load_undecided(job_id, username)
        now = db_now()
        approval = _decision_row(
            job,
            username,
            ApprovalDecision.APPROVED,
            reason,
            now,
            expires_at=now + dt.timedelta(seconds=ttl),
        )
        record_event(
            event_type=EventType.APPROVED,
            actor=username,
            job_id=job.job_id,
            detail={
                "approval_id": approval.approval_id,
                "reason": reason,
                "expires_at": approval.expires_at.isoformat(),
                "ttl_seconds": ttl,
            },
            at=now,
        )
        with _refusal_as_approval_error():
            transitions.mark_ready(job.job_id, actor=username, approval_id=approval.approval_id)
    return approval


def deny_delete(job_id: str, *, approver, reason: str) -> Approval:
    """Deny a DELETE job: an Approval row (denied), its DENIED event and CREATED → REJECTED."""
    username = _username(approver)
    reason = _reason(reason)
    with transaction.atomic():
        job = _load_undecided(job_id, username)
        now = db_now()
        approval = _decision_row(job, username, ApprovalDecision.DENIED, reason, now)
        record_event(
            event_type=EventType.DENIED,
            actor=username,
            job_id=job.job_id,
            detail={"approval_id": approval.approval_id, "reason": reason},
            at=now,
        )
        with _refusal_as_approval_error():
            transitions.reject_job(
                job.job_id, actor=username, reason=f"denied: {reason}", result_code="DENIED"
            )
    return approval


def revoke_approval(approval_id: str, *, actor, reason: str) -> Approval:
    """Revoke a granted approval; the executor then rejects the job instead of running it."""
    username = _username(actor)
    reason = _reason(reason)
    with transaction.atomic():
        approval = Approval.objects.filter(approval_id=approval_id).first()
        if approval is None:
            raise ApprovalError(f"approval {approval_id!r} does not exist")
        if approval.decision != ApprovalDecision.APPROVED:
            raise ApprovalError(f"approval {approval_id!r} is a denial; nothing to revoke")
        state = Job.objects.filter(job_id=approval.job_id).values_list("state", flat=True).first()
        if state not in (JobState.READY, JobState.CLAIMED):
            raise ApprovalError(
                f"job {approval.job_id!r} is {state}; revoking its approval would change nothing"
            )
        now = db_now()
        changed = Approval.objects.filter(approval_id=approval_id, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=username, revoke_reason=reason
        )
        if changed != 1:
            raise ApprovalError(f"approval {approval_id!r} is already revoked")
        record_event(
            event_type=EventType.APPROVAL_REVOKED,
            actor=username,
            job_id=approval.job_id,
            detail={"approval_id": approval_id, "reason": reason},
            at=now,
        )
    approval.refresh_from_db()
    return approval


def check_approval(job: Job, *, now: dt.datetime | None = None) -> ApprovalCheck:
    """Re-check an approval before executing: granted, for this job, unrevoked, unexpired."""
    job_type = registry().get(job.job_type)
    if job_type is not None and not job_type.needs_approval:
        return ApprovalCheck(True, "OK", "no approval needed")
    if not job.approval_id:
        return ApprovalCheck(False, "APPROVAL_MISSING", "no approval is attached")
    approval = Approval.objects.filter(approval_id=job.approval_id).first()
    if approval is None:
        return ApprovalCheck(
            False, "APPROVAL_MISSING", f"approval {job.approval_id} does not exist"
        )
    if approval.job_id != job.job_id or approval.decision != ApprovalDecision.APPROVED:
        return ApprovalCheck(
            False,
            "APPROVAL_INVALID",
            f"approval {approval.approval_id} is a {approval.decision} for job {approval.job_id}",
        )
    if approval.approver == job.requested_by:
        return ApprovalCheck(False, "APPROVAL_INVALID", "the approver is the requester")
    if approval.revoked_at is not None:
        return ApprovalCheck(
            False,
            "APPROVAL_REVOKED",
            f"approval revoked by {approval.revoked_by} at {approval.revoked_at.isoformat()}: "
            f"{approval.revoke_reason}",
        )
    now = db_now(now)
    if approval.expires_at is not None and approval.expires_at <= now:
        return ApprovalCheck(
            False, "APPROVAL_EXPIRED", f"approval expired at {approval.expires_at.isoformat()}"
        )
    return ApprovalCheck(
        True,
        "OK",
        f"approved by {approval.approver}"
        + (f", valid until {approval.expires_at.isoformat()}" if approval.expires_at else ""),
    )
