"""Retention for the inbox: delete finished jobs and long-dead heartbeat rows.

Deleting a job is not a state change, so it does not go through ``inbox.transitions``; it lives
here, in one place, with the same habit: the DELETE carries every guard in its WHERE clause. A
job is deleted only if it is terminal (SUCCEEDED, REJECTED, RECONCILED) and its ``updated_at``
(the moment it became terminal) is older than the cut, checked by the DELETE itself, so a job
that moved meanwhile is never deleted. Work goes in small batches, each its own short
transaction; on PostgreSQL a batch skips rows another transaction holds right now (they wait
for the next prune) instead of waiting on them.

Never deleted: audit events (the log is append-only: a pruned job's trail stays in it, by job id).
Deleted with the jobs (same cut, their own batches): the throughput chart's per-minute counts
(``FinishedCount``) of minutes before the cut.

Deleted with their job, in the same transaction: its approval rows. An approval row is the
executor's working copy for the re-check before a DELETE runs; once the job is gone nothing
reads it, and the decision itself — approver, reason, approval id, expiry — is kept in the
APPROVED / DENIED / APPROVAL_REVOKED events.

``forget_workers`` deletes heartbeat rows of workers dead for longer than asked (a cleanly
stopped worker counts as dead from its last beat; any other from the moment it missed its
3 × poll + lease). The DELETE is guarded on the ``last_seen_at`` it judged: a worker that beat
meanwhile is alive and stays. Callers: the ``prune`` and ``forget_workers`` commands.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from operator import or_

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from core.batches import Pace, prune_cut
from core.clock import db_now
from core.db import locked
from inbox.models import TERMINAL_STATES, Approval, FinishedCount, Job, Worker, WorkerStatus

PRUNED_STATES = tuple(sorted(TERMINAL_STATES))
DEFAULT_BATCH = 500

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> dt.timedelta:
    """``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` → a positive timedelta; anything else is a
    ValueError that says what is accepted."""
    match = _DURATION_RE.match(text or "")
    if not match:
        raise ValueError(
            f"{text!r} is not a duration: give a number and a unit, e.g. 30d, 12h, 90m, 3600s, 2w"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r}: the duration must be more than zero")
    return dt.timedelta(seconds=seconds)


Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    return None


@dataclass
class PruneReport:
    jobs: int = 0
    approvals: int = 0
    # Per-minute throughput counts (``FinishedCount``) of minutes before the cut.
    counts: int = 0
    batches: int = 0
    seconds: float = 0.0


def prunable_jobs(cut: dt.datetime) -> QuerySet[Job]:
    """Terminal jobs that became terminal before ``cut`` (index: state, updated_at)."""
    return Job.objects.filter(state__in=PRUNED_STATES, updated_at__lt=cut)


def _delete_jobs(job_ids: list[str], cut: dt.datetime) -> list[str]:
    """One guarded DELETE … RETURNING: only ids still terminal and older than ``cut`` go."""
    table = connection.ops.quote_name(Job._meta.db_table)
    marks = ", ".join(["%s"] * len(job_ids))
    states = ", ".join(["%s"] * len(PRUNED_STATES))
    sql = (
        f"DELETE FROM {table} WHERE job_id IN ({marks}) AND state IN ({states}) "
        "AND updated_at < %s RETURNING job_id"
    )
    params = [*job_ids, *PRUNED_STATES, connection.ops.adapt_datetimefield_value(cut)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def prune_jobs(
    *,
    older_than: dt.timedelta,
    batch: int = DEFAULT_BATCH,
    dry_run: bool = False,
    progress: Progress = _quiet,
    at: dt.datetime | None = None,
) -> PruneReport:
    """Delete terminal jobs finished more than ``older_than`` ago, with their approvals."""
    cut = prune_cut(older_than, batch, at)
    report = PruneReport()
    pace = Pace()
    if dry_run:
        ids = prunable_jobs(cut).values_list("job_id", flat=True)
        report.jobs = prunable_jobs(cut).order_by().count()
        report.approvals = Approval.objects.filter(job_id__in=ids).count()
        report.counts = FinishedCount.objects.filter(minute__lt=cut).count()
        report.seconds = pace.elapsed()
        return report
    while True:
        with transaction.atomic():
            picked = list(
                locked(prunable_jobs(cut).order_by(), skip_locked=True).values_list(
                    "job_id", flat=True
                )[:batch]
            )
            if not picked:
                break
            deleted = _delete_jobs(picked, cut)
            if deleted:
                report.approvals += Approval.objects.filter(job_id__in=deleted).delete()[0]
        report.jobs += len(deleted)
        report.batches += 1
        if not deleted:
            break  # everything picked moved meanwhile: nothing more this pass can take
        if pace.due():
            rate = report.jobs / max(pace.elapsed(), 1e-9)
            progress(f"jobs: {report.jobs:,} deleted so far ({rate:,.0f}/s)")
    report.counts = _prune_counts(cut, batch)
    report.seconds = pace.elapsed()
    return report


def _prune_counts(cut: dt.datetime, batch: int) -> int:
    """Delete the throughput counts of minutes before ``cut``, ``batch`` rows per transaction.
    Writers only ever add to the current minute's rows, so nothing waits on these."""
    deleted = 0
    while True:
        ids = list(
            FinishedCount.objects.filter(minute__lt=cut).values_list("pk", flat=True)[:batch]
        )
        if not ids:
            return deleted
        deleted += FinishedCount.objects.filter(pk__in=ids, minute__lt=cut).delete()[0]


# --- heartbeats ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadWorker:
    worker_id: str
    kind: str
    last_seen_at: dt.datetime
    dead_since: dt.datetime


def dead_workers(dead_for: dt.timedelta, *, at: dt.datetime | None = None) -> list[DeadWorker]:
    """Heartbeat rows of workers dead for longer than ``dead_for`` (database time)."""
    now = db_now(at)
    cut = now - dead_for
    found = []
    # Only rows not seen since the cut can qualify; the table is small (this keeps it so).
    for worker in Worker.objects.filter(last_seen_at__lt=cut).order_by("last_seen_at"):
        if worker.status == WorkerStatus.STOPPED:
            dead_since = worker.last_seen_at
        else:
            dead_since = worker.last_seen_at + worker.dead_after()
        if dead_since < cut:
            found.append(DeadWorker(worker.worker_id, worker.kind, worker.last_seen_at, dead_since))
    return found


def forget_workers(
    *,
    dead_for: dt.timedelta,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
    at: dt.datetime | None = None,
) -> list[DeadWorker]:
    """Delete the heartbeat rows ``dead_workers`` finds; the ones actually deleted."""
    candidates = dead_workers(dead_for, at=at)
    if dry_run:
        return candidates
    forgotten: list[DeadWorker] = []
    for start in range(0, len(candidates), batch):
        chunk = candidates[start : start + batch]
        # Guarded on the last beat we judged: a worker that beat since is alive and stays.
        guard = reduce(or_, (Q(worker_id=w.worker_id, last_seen_at=w.last_seen_at) for w in chunk))
        with transaction.atomic():
            # Locked first (PostgreSQL), so what we report is exactly what the DELETE removes.
            gone = set(locked(Worker.objects.filter(guard)).values_list("worker_id", flat=True))
            Worker.objects.filter(guard, worker_id__in=gone).delete()
        forgotten += [w for w in chunk if w.worker_id in gone]
    return forgotten
