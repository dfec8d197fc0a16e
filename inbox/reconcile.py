"""Reconciliation of OUTCOME_UNKNOWN jobs from evidence.

Read-only toward the vault: it probes the object (present? current hash?) and records the
evidence in the audit event of whatever it decides. The automatic reconciler does only the
unambiguous case (object absent → RECONCILED ``CONFIRMED_DELETED``) and annotates the rest
(``RECONCILE_NOT_APPLIED``, ``RECONCILE_CONFLICT`` as ``result_code``, state unchanged). The
manual outcomes (confirm deleted, not applied with an optional fresh DELETE, annotate) are the
services the console calls. Job state changes only through ``inbox.transitions``.

A type no vault probe can decide (a non-idempotent task: its effect lies outside the vault) is
never probed and never decided automatically: an operator decides it (``decide_unprobed``:
APPLIED or NOT_APPLIED, with a reason); the probe-based outcomes refuse it.

The former holder's late report (``holder_reports``: what it said it did after its lease
lapsed, recorded as STALE_WRITE_REJECTED) is shown beside the evidence, never acted on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import transaction

from audit.models import AuditEvent, EventType
from core.clock import db_now
from core.errors import Busy
from inbox import transitions, vault
from inbox.errors import InboxError, InvalidTransition, JobNotFound
from inbox.models import Job, JobState
from inbox.writer.recovery import left_alone

CONFIRMED_DELETED = "CONFIRMED_DELETED"
NOT_APPLIED = "NOT_APPLIED"
# An operator's decision on a type no probe can decide: it did happen.
APPLIED = "APPLIED"
DIAG_NOT_APPLIED = "RECONCILE_NOT_APPLIED"
DIAG_CONFLICT = "RECONCILE_CONFLICT"
# A diagnosis only (``annotate``); confirming the delete is ``confirm_deleted``'s decision.
DIAG_ABSENT = "RECONCILE_ABSENT"
# An annotated case no probe can decide: it waits for an operator's decision.
DIAG_UNPROBED = "AWAITING_OPERATOR"
# Job types whose OUTCOME_UNKNOWN a vault probe can decide.
PROBED_TYPES = frozenset({"DELETE_OBJECT"})

# Auto-reconciler actions.
CONFIRM = "confirm_deleted"
DIAGNOSE_NOT_APPLIED = "diagnose_not_applied"
DIAGNOSE_CONFLICT = "diagnose_conflict"
UNCHANGED = "already_diagnosed"
SKIP = "skip"


class ReconcileRefused(InboxError):
    """The evidence does not support the requested outcome; nothing was written."""


@dataclass(frozen=True)
class Evidence:
    vault_path: str
    present: bool
    current_hash: str | None
    expected_hash: str | None
    matches: bool
    probed_at: dt.datetime

    def as_detail(self) -> dict[str, Any]:
        detail = asdict(self)
        detail["probed_at"] = self.probed_at.isoformat()
        return detail


def _load(job_id: str) -> Job:
    job = Job.objects.filter(job_id=job_id).first()
    if job is None:
        raise JobNotFound(job_id)
    return job


def probe_job(job: Job, *, now: dt.datetime | None = None) -> Evidence:
    """Probe the job's object in the vault; read-only. Raises ``VaultError`` if refused.

    ``now`` stamps the evidence (a page probing fifty jobs reads the clock once).
    """
    payload = job.payload or {}
    expected = payload.get("expected_provenance_hash") or payload.get("provenance_hash")
    found = vault.probe(job.vault_path)
    return Evidence(
        vault_path=job.vault_path,
        present=found.present,
        current_hash=found.current_hash,
        expected_hash=expected,
        matches=found.present and found.current_hash == expected,
        probed_at=db_now(now),
    )


def is_probed(job: Job) -> bool:
    """Can a vault probe decide this job's outcome?"""
    return job.job_type in PROBED_TYPES


def _require_probe(job: Job) -> None:
    if not is_probed(job):
        raise ReconcileRefused(
            f"job {job.job_id!r}: no vault probe can decide a {job.job_type}; decide it as "
            "applied or not applied from what you know"
        )


def decide_unprobed(job_id: str, *, actor: str, reason: str, applied: bool) -> Job:
    """OUTCOME_UNKNOWN → RECONCILED ``APPLIED`` or ``NOT_APPLIED`` for a type no probe can
    decide (a non-idempotent task): an operator's decision, recorded with the reason. Refused
    for a probed type (its evidence decides) and without a reason."""
    if not (reason or "").strip():
        raise ValueError("an operator's decision needs a reason")
    job = _load(job_id)
    if is_probed(job):
        raise ReconcileRefused(
            f"job {job_id!r}: a {job.job_type} is decided from vault evidence, not by hand"
        )
    return transitions.reconcile_job(
        job_id,
        actor=actor,
        result_code=APPLIED if applied else NOT_APPLIED,
        evidence={"probe": None, "decided_by": actor, "why": f"no vault probe for {job.job_type}"},
        reason=reason,
    )


def confirm_deleted(job_id: str, *, actor: str, reason: str) -> Job:
    """OUTCOME_UNKNOWN → RECONCILED ``CONFIRMED_DELETED``; refused unless the object is absent."""
    job = _load(job_id)
    _require_probe(job)
    evidence = probe_job(job)
    if evidence.present:
        raise ReconcileRefused(
            f"job {job_id!r}: {job.vault_path} is still in the vault "
            f"(sha256 {evidence.current_hash}); it was not deleted"
        )
    return transitions.reconcile_job(
        job_id,
        actor=actor,
        result_code=CONFIRMED_DELETED,
        evidence=evidence.as_detail(),
        reason=reason,
    )


def _redo_value(prefix: str, value: str, limit: int) -> str:
    text = f"{prefix}{value}"
    if len(text) <= limit:
        return text
    return f"{prefix}{hashlib.sha256(value.encode('utf-8')).hexdigest()}"


def not_applied(
    job_id: str, *, actor: str, reason: str, request_fresh_delete: bool = False
) -> tuple[Job, Job | None]:
    """OUTCOME_UNKNOWN → RECONCILED ``NOT_APPLIED``; optionally request a fresh DELETE.

    Refused when the probe shows the object gone (the delete did apply). The fresh job's id and
    idempotency key derive from the old job's, so a double click makes one job (the second call
    finds the old job already reconciled NOT_APPLIED and replays the creation). The new job
    waits CREATED for its own approval; the operator who asked for it cannot approve it.
    """
    job = _load(job_id)
    _require_probe(job)
    if not (job.state == JobState.OUTCOME_UNKNOWN or _already_not_applied(job)):
        raise InvalidTransition(
            job_id, job.state, JobState.RECONCILED, "only an OUTCOME_UNKNOWN job can be reconciled"
        )
    evidence = probe_job(job)
    if not evidence.present:
        raise ReconcileRefused(
            f"job {job_id!r}: {job.vault_path} is gone from the vault; the delete applied "
            "(confirm it as deleted instead)"
        )
    with transaction.atomic():
        if job.state == JobState.OUTCOME_UNKNOWN:
            job = transitions.reconcile_job(
                job_id,
                actor=actor,
                result_code=NOT_APPLIED,
                evidence=evidence.as_detail(),
                reason=reason,
            )
        fresh = None
        if request_fresh_delete:
            doc = dict(job.payload)
            doc["job_id"] = _redo_value("redo-", job.job_id, 200)
            doc["idempotency_key"] = _redo_value("redo:", job.idempotency_key, 255)
            fresh, _created = transitions.create_job(doc, requested_by=actor, supersedes=job.job_id)
    return job, fresh


def _already_not_applied(job: Job) -> bool:
    return job.state == JobState.RECONCILED and job.result_code == NOT_APPLIED


def annotate(job_id: str, *, actor: str, reason: str) -> Job:
    """Store the current evidence's diagnosis as ``result_code``; the state does not change.
    A type no probe can decide keeps the operator's note only (``AWAITING_OPERATOR``)."""
    job = _load(job_id)
    if not is_probed(job):
        return transitions.set_result_code(
            job_id, actor=actor, result_code=DIAG_UNPROBED, detail={"reason": reason}
        )
    evidence = probe_job(job)
    code = _diagnosis(evidence)
    return transitions.set_result_code(
        job_id,
        actor=actor,
        result_code=code,
        detail={"evidence": evidence.as_detail(), "reason": reason},
    )


def _diagnosis(evidence: Evidence) -> str:
    if not evidence.present:
        return DIAG_ABSENT
    return DIAG_NOT_APPLIED if evidence.matches else DIAG_CONFLICT


@dataclass(frozen=True)
class HolderReport:
    """What the former holder of a parked job reported after its lease lapsed (its outcome,
    refused and recorded as STALE_WRITE_REJECTED): its word, shown to the operator beside the
    vault evidence."""

    worker_id: str
    claim_id: str
    attempt: int | None
    to: str
    result_code: str
    error: str
    reported_at: dt.datetime

    @property
    def words(self) -> str:
        """The outcome in an operator's words ("deleted", "failed (HASH_MISMATCH: …)")."""
        why = f"{self.result_code}: {self.error}" if self.error else self.result_code
        if self.to == JobState.SUCCEEDED:
            return "deleted" if self.result_code == "DELETED" else f"succeeded ({why})"
        if self.to == JobState.FAILED:
            return f"failed, nothing changed ({why})"
        if self.to == JobState.READY:
            return f"failed and asked for a retry ({why})"
        return f"could not tell whether it happened ({why})"


def holder_reports(jobs: Iterable[Job]) -> dict[str, HolderReport]:
    """The latest late report of each job's last holder, under the claim the job still
    carries (the one the sweep took it from), in one query."""
    claims = {job.job_id: job.claim_id for job in jobs if job.claim_id}
    if not claims:
        return {}
    rows = AuditEvent.objects.filter(
        job_id__in=list(claims),
        event_type=EventType.STALE_WRITE_REJECTED,
        detail__has_key="reported",
    ).order_by("event_id")
    out: dict[str, HolderReport] = {}
    for event in rows:
        detail, reported = event.detail, event.detail["reported"]
        if detail.get("claim_id") != claims[event.job_id]:
            continue  # an older claim's holder: not the one whose lease lapsed last
        out[event.job_id] = HolderReport(
            worker_id=event.actor,
            claim_id=detail["claim_id"],
            attempt=detail.get("attempt"),
            to=reported.get("to", ""),
            result_code=reported.get("result_code", ""),
            error=(reported.get("detail") or {}).get("error", ""),
            reported_at=event.created_at,
        )
    return out


# --- the automatic reconciler -----------------------------------------------------------------


@dataclass
class AutoReport:
    confirmed: list[str] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)
    conflict: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    # Held by another transaction right now (a worker mid-step, or frozen): the next pass.
    busy: list[str] = field(default_factory=list)

    def summary(self, *, dry_run: bool = False) -> str:
        verb = "would " if dry_run else ""
        text = (
            f"{verb}reconcile {len(self.confirmed)} as CONFIRMED_DELETED; "
            f"{verb}diagnose {len(self.not_applied)} {DIAG_NOT_APPLIED} and "
            f"{len(self.conflict)} {DIAG_CONFLICT}; {len(self.unchanged)} already diagnosed"
        )
        if self.skipped:
            text += f"; {len(self.skipped)} skipped"
        return text + left_alone(len(self.refused), "changed meanwhile", len(self.busy))


@dataclass(frozen=True)
class Assessment:
    """One job, the evidence probed for it now (or why there is none), and what the rule says."""

    job: Job
    evidence: Evidence | None
    # Why there is no evidence: no probe for the type, the vault refused the path, or the
    # filesystem failed ("evidence unavailable"; the job waits for the next pass or a person).
    error: str
    action: str

    @property
    def code(self) -> str:
        """The diagnosis a DIAGNOSE action stores."""
        return _diagnosis(self.evidence) if self.evidence is not None else ""


def decide(job: Job, evidence: Evidence | None) -> str:
    """The auto-reconcile rule, written once: only an absent object is decided
    (CONFIRM); a present one is annotated with its diagnosis unless it already carries it.

    Only the vault probe counts here. The former holder's late report (``holder_reports``) is
    not conclusive: it is the word of a worker whose lease had lapsed, about a vault that
    anyone may have changed since, so it is shown to the operator and never acted on, whether
    it agrees with the probe or not."""
    if job.state != JobState.OUTCOME_UNKNOWN or evidence is None:
        return SKIP
    if not evidence.present:
        return CONFIRM
    code = _diagnosis(evidence)
    if job.result_code == code:
        return UNCHANGED
    return DIAGNOSE_NOT_APPLIED if code == DIAG_NOT_APPLIED else DIAGNOSE_CONFLICT


def assess(jobs: Iterable[Job], *, now: dt.datetime | None = None) -> list[Assessment]:
    """Probe each job once (read-only) and apply ``decide``; one clock read for them all."""
    now = db_now(now)
    out = []
    for job in jobs:
        evidence, error = None, ""
        if job.job_type not in PROBED_TYPES:
            error = f"no vault probe for {job.job_type}"
        elif job.state == JobState.OUTCOME_UNKNOWN:
            try:
                evidence = probe_job(job, now=now)
            except vault.EvidenceUnavailable as exc:
                error = str(exc)
            except vault.VaultError as exc:
                error = f"evidence unavailable: the vault refused the path: {exc}"
            except OSError as exc:
                error = f"evidence unavailable: {exc.strerror or exc}"
        out.append(Assessment(job, evidence, error, decide(job, evidence)))
    return out


def plan_auto_reconcile() -> list[Assessment]:
    """Every OUTCOME_UNKNOWN job with its evidence and what the auto-reconciler would do."""
    return assess(Job.objects.unknown().order_by("updated_at", "job_id").iterator(chunk_size=500))


def apply(
    assessments: Iterable[Assessment],
    *,
    actor: str,
    reason: str,
    diagnose_reason: str | None = None,
    dry_run: bool = False,
) -> AutoReport:
    """Carry out what the rule decided, set-based: one guarded write for the confirmed jobs
    and one per diagnosis code. A job that changed since it was assessed is refused (listed
    in ``refused``), never decided on stale evidence."""
    report = AutoReport()
    confirm: dict[str, dict[str, Any]] = {}
    diagnose: dict[str, dict[str, dict[str, Any]]] = {}
    for a in assessments:
        if a.action == SKIP:
            report.skipped.append((a.job.job_id, a.error or f"the job is {a.job.state}"))
        elif a.action == UNCHANGED:
            report.unchanged.append(a.job.job_id)
        elif a.action == CONFIRM:
            assert a.evidence is not None
            confirm[a.job.job_id] = a.evidence.as_detail()
        else:
            assert a.evidence is not None
            detail = {"evidence": a.evidence.as_detail(), "reason": diagnose_reason or reason}
            diagnose.setdefault(a.code, {})[a.job.job_id] = detail
    if dry_run:
        report.confirmed = list(confirm)
        report.not_applied = list(diagnose.get(DIAG_NOT_APPLIED, {}))
        report.conflict = list(diagnose.get(DIAG_CONFLICT, {}))
        return report
    # In batches, each its own short transaction: no row stays locked for long.
    for part in _chunks(confirm):
        moved = transitions.reconcile_jobs(
            part, actor=actor, result_code=CONFIRMED_DELETED, reason=reason, skip_locked=True
        )
        report.confirmed += [job.job_id for job in moved.jobs]
        _refusals(report, moved)
    for code, details in diagnose.items():
        bucket = report.not_applied if code == DIAG_NOT_APPLIED else report.conflict
        for part in _chunks(details):
            moved = transitions.set_result_codes(
                part, actor=actor, result_code=code, skip_locked=True
            )
            bucket += [job.job_id for job in moved.jobs]
            _refusals(report, moved)
    return report


APPLY_BATCH = 200


def _chunks[V](items: dict[str, V]) -> list[dict[str, V]]:
    keys = list(items)
    return [
        {k: items[k] for k in keys[i : i + APPLY_BATCH]} for i in range(0, len(keys), APPLY_BATCH)
    ]


def _refusals(report: AutoReport, moved: transitions.Moved) -> None:
    for job_id, exc in moved.refused.items():
        if isinstance(exc, Busy):
            report.busy.append(job_id)
        else:
            report.refused.append((job_id, str(exc)))


def auto_reconcile(
    *,
    actor: str,
    dry_run: bool = False,
    assessments: list[Assessment] | None = None,
) -> AutoReport:
    """Reconcile the unambiguous unknowns and annotate the rest; ``dry_run`` writes nothing.

    ``assessments`` (from ``plan_auto_reconcile``) spares a second probe of every job."""
    if assessments is None:
        assessments = plan_auto_reconcile()
    return apply(
        assessments,
        actor=actor,
        reason="auto: the object is absent from the vault",
        diagnose_reason="auto-reconciler",
        dry_run=dry_run,
    )
