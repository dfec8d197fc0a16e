"""Orphaned jobs: held jobs whose lease still runs while their holder's heartbeat is dead.

A held job belongs to its worker until the lease lapses, even when that worker died: the sweep
takes it then, never earlier. These reads say which jobs wait like that and what the sweep will
do to them; the list, the detail page, the dashboard and the metrics share this one rule.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from inbox.models import HELD_STATES, Job, JobState, Worker, WorkerStatus
from inbox.transitions import lapsed_outcome
from inbox.workers import is_alive

# Heartbeat rows read to find the live workers: the most recently seen first, so the alive ones
# are always among them (dead rows that were never marked stopped pile up behind).
WORKER_SCAN = 1000


def alive_worker_ids(now: dt.datetime) -> set[str]:
    """Workers whose heartbeat is alive at ``now`` (``inbox.workers.is_alive``)."""
    rows = Worker.objects.exclude(status=WorkerStatus.STOPPED).order_by("-last_seen_at")
    return {w.worker_id for w in rows[:WORKER_SCAN] if is_alive(w, now)}


@dataclass(frozen=True)
class Orphan:
    """A held job whose lease still runs but whose holder's heartbeat is dead."""

    holder: str
    # When the holder's heartbeat died (None: the holder has no heartbeat row at all).
    dead_since: dt.datetime | None
    # Whole seconds until the lease lapses and the sweep takes the job.
    lapses_in: int
    # The state the sweep will move it to then (READY, FAILED or OUTCOME_UNKNOWN).
    sweep_to: str

    @property
    def sweep_words(self) -> str:
        """What the sweep will do when the lease lapses, in the operator's words."""
        return {
            JobState.READY: "offer it again (READY)",
            JobState.FAILED: "fail it (MAX_ATTEMPTS)",
        }.get(self.sweep_to, "park it as OUTCOME_UNKNOWN for reconcile")


def orphaned(jobs: Iterable[Job], now: dt.datetime) -> dict[str, Orphan]:
    """{job_id: Orphan} for the CLAIMED/EXECUTING jobs among ``jobs`` whose lease still runs
    and whose holder's heartbeat is dead, stopped or missing. One query, whatever the count."""
    held = [
        job
        for job in jobs
        if job.state in HELD_STATES and job.lease_until is not None and job.lease_until >= now
    ]
    if not held:
        return {}
    heartbeats = {
        w.worker_id: w for w in Worker.objects.filter(worker_id__in={j.worker_id for j in held})
    }
    found: dict[str, Orphan] = {}
    for job in held:
        worker = heartbeats.get(job.worker_id)
        if worker is not None and is_alive(worker, now):
            continue
        dead_since = None
        if worker is not None:
            stopped = worker.status == WorkerStatus.STOPPED
            dead_since = (
                worker.last_seen_at if stopped else worker.last_seen_at + worker.dead_after()
            )
        found[job.job_id] = Orphan(
            holder=job.worker_id,
            dead_since=dead_since,
            lapses_in=max(math.floor((job.lease_until - now).total_seconds()), 0),
            sweep_to=lapsed_outcome(job),
        )
    return found


def orphaned_jobs(
    qs: QuerySet[Job], now: dt.datetime, *, alive: set[str] | None = None
) -> QuerySet[Job]:
    """The held jobs of ``qs`` whose lease runs and whose holder is not alive, in lease order
    (the partial lease index: a few rows however large the table). ``alive``: the live
    workers' ids when the caller has read them already."""
    alive = alive_worker_ids(now) if alive is None else alive
    return (
        qs.held()
        .filter(lease_until__gte=now)
        .exclude(worker_id__in=alive)
        .order_by("lease_until", "job_id")
    )
