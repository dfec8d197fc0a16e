from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from core.clock import db_now
from core.db import locked
from core.paging import capped_count
from inbox.jobtypes import registry
from inbox.models import HELD_STATES, Job
from inbox.writer.engine import run
from inbox.writer.events import recovery_events
from inbox.writer.rows import snapshot
from inbox.writer.values import CLEARED_CLAIM, Held, Move, S


@dataclass
class RecoveryReport:
    """What a sweep did (or, with ``dry_run``, would do)."""

    requeued: dict[str, int] = field(default_factory=dict)
    parked: dict[str, int] = field(default_factory=dict)
    max_attempts: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    # Lapsed but held by another transaction right now (skipped, not waited on): next pass.
    busy: int = 0

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
        return text + left_alone(len(self.refused), "fingerprint drift or race", self.busy)

    def count(self, job: Job, to: str) -> None:
        bucket = {S.READY: self.requeued, S.FAILED: self.max_attempts}.get(to, self.parked)
        bucket[job.job_type] = bucket.get(job.job_type, 0) + 1
        self.job_ids.append(job.job_id)


def left_alone(refused: int, why: str, busy: int) -> str:
    """The tail of a pass's summary: the rows it refused (and ``why``) and those it skipped
    because another transaction held them right now (the next pass takes them)."""
    text = f"; {refused} refused ({why})" if refused else ""
    if busy:
        text += f"; {busy} busy (locked right now; taken on the next pass)"
    return text


def lapsed_outcome(job: Job) -> str:
    """Where a job whose lease lapsed goes: an idempotent one back to READY (or FAILED once
    its attempts are spent); any other to OUTCOME_UNKNOWN, since its step may have happened."""
    job_type = registry().get(job.job_type)
    if job_type is None or not job_type.idempotent:
        return S.OUTCOME_UNKNOWN
    if job.attempt_count >= job.max_attempts:
        return S.FAILED
    return S.READY


def _recovery_values(to: str, attempt_count: int) -> dict[str, Any]:
    if to == S.READY:
        return {**CLEARED_CLAIM}
    if to == S.FAILED:
        return {
            "lease_until": None,
            "result_code": "MAX_ATTEMPTS",
            "last_error": f"lease lapsed after {attempt_count} attempts",
        }
    return {
        "lease_until": None,
        "result_code": "LEASE_EXPIRED",
        "last_error": "lease lapsed while held; outcome unknown",
    }


def recover_stale_claims_report(
    *,
    at: dt.datetime | None = None,
    dry_run: bool = False,
    actor: str = "sweeper",
    batch: int = 1000,
) -> RecoveryReport:
    """Apply the lapsed-lease rules (``lapsed_outcome``) to every held job whose lease ended
    strictly before now.

    Works in batches of at most ``batch`` rows, each one short transaction: lock the lapsed
    rows, group them by where they go, one guarded UPDATE per group (claim and lapse
    re-checked). The batch size follows the time a transaction took, aiming at
    ``SWEEP_TRANSACTION_SECONDS``: on a slow or busy database the batches shrink, so no row
    stays locked for long whatever the machine; on a fast one they grow to ``batch``.
    """
    now = db_now(at)
    report = RecoveryReport()
    refused: list[str] = []
    size = min(batch, _SWEEP_FIRST_BATCH)
    while True:
        began = time.monotonic()
        with transaction.atomic():
            qs = Job.objects.lapsed(now).order_by("lease_until", "job_id")
            if refused:
                qs = qs.exclude(job_id__in=refused)
            if dry_run:
                # Nothing changes in a dry run: one read of every lapsed lease, no lock.
                for job in qs:
                    report.count(job, lapsed_outcome(job))
                return report
            candidates = list(locked(qs, skip_locked=True)[:size])
            _recover(candidates, actor=actor, now=now, report=report, refused=refused)
        if len(candidates) < size:
            # What is still lapsed and not refused was locked by someone else: skipped.
            report.busy = capped_count(Job.objects.lapsed(now).exclude(job_id__in=refused))
            return report
        size = _next_sweep_batch(size, time.monotonic() - began, batch)


def _recover(
    candidates: list[Job],
    *,
    actor: str,
    now: dt.datetime,
    report: RecoveryReport,
    refused: list[str],
) -> None:
    """One batch of lapsed rows (locked), grouped by where they go: one guarded UPDATE per
    group, claim and lapse re-checked; what moved is counted, what was refused listed."""
    groups: dict[str, list[Job]] = {}
    for job in candidates:
        groups.setdefault(lapsed_outcome(job), []).append(job)
    for to, jobs in groups.items():
        # Every row of a group shares its values but ``attempt_count`` (FAILED's text).
        by_attempts: dict[int, list[Job]] = {}
        for job in jobs:
            by_attempts.setdefault(job.attempt_count, []).append(job)
        for attempts, part in by_attempts.items():
            # The rows as read (the events' "before"); ``part`` is updated in place.
            seen = {job.job_id: snapshot(job) for job in part}
            moved = run(
                Move(
                    [Held.of(job) for job in part],
                    to=to,
                    allowed=HELD_STATES,
                    actor=actor,
                    values=_recovery_values(to, attempts),
                    events=recovery_events(actor, to),
                    fence="observed",
                    lease="lapsed",
                    prior=lambda seen=seen: seen,
                    why="the lease was renewed or the claim changed meanwhile",
                    at=now,
                )
            )
            for job in part:
                if job.job_id in moved:
                    report.count(job, to)
            for job_id, exc in moved.refused.items():
                report.refused.append(f"{job_id}: {exc}")
                refused.append(job_id)


def _next_sweep_batch(size: int, took: float, most: int) -> int:
    """Halve the batch after a transaction longer than the aim, double it (up to ``most``)
    after one shorter than half of it."""
    if took > SWEEP_TRANSACTION_SECONDS:
        return max(min(most, _SWEEP_MIN_BATCH), size // 2)
    if took < SWEEP_TRANSACTION_SECONDS / 2:
        return min(most, size * 2)
    return size


# The sweep's transactions aim at this length (a quarter of the 1 s a row may stay locked);
# the first batch is small because it also measures the machine.
SWEEP_TRANSACTION_SECONDS = 0.25


_SWEEP_FIRST_BATCH = 100


_SWEEP_MIN_BATCH = 10


def recover_stale_claims(*, at: dt.datetime | None = None) -> int:
    """Recover every lapsed lease; return how many jobs moved."""
    return recover_stale_claims_report(at=at).total
