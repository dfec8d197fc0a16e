"""Worker heartbeat rows.

Owns the ``Worker`` table: a worker registers once, beats while it runs (at most every poll
interval, never per job) and marks itself stopped on the way out; ``inbox.loop`` does all three
for every worker. A worker is dead when it has not been seen for 3 × poll + lease, measured on
the database clock. Callers: ``inbox.loop``, the ``workers`` command and the console.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid

from django.db.models.functions import Now

from core.clock import db_now
from inbox.models import Worker, WorkerStatus


def new_worker_id(kind: str, label: str = "") -> str:
    """``kind-label-host-pid-random``: unique per process start, readable in the console. The
    label is the executor's scope or the consolidator's store. Every worker id is made here."""
    head = f"{kind}-{label}" if label else kind
    return f"{head}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"[:200]


def register_worker(
    *,
    worker_id: str,
    kind: str,
    scope: str = "",
    store: str = "",
    poll_seconds: float = 1.0,
    lease_seconds: int = 60,
    host: str | None = None,
    pid: int | None = None,
) -> Worker:
    """Create (or restart) the worker's heartbeat row: running, counters at zero."""
    worker, _ = Worker.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "kind": kind,
            "scope": scope,
            "store": store,
            "host": host or socket.gethostname(),
            "pid": pid if pid is not None else os.getpid(),
            "poll_seconds": poll_seconds,
            "lease_seconds": lease_seconds,
            "started_at": Now(),
            "last_seen_at": Now(),
            "current_job_id": "",
            "jobs_done": 0,
            "jobs_failed": 0,
            "status": WorkerStatus.RUNNING,
        },
    )
    return worker


def beat(
    *,
    worker_id: str,
    current_job_id: str | None = None,
    jobs_done: int | None = None,
    jobs_failed: int | None = None,
    status: str | None = None,
) -> bool:
    """Record that the worker is alive (database time); False if its row is gone."""
    values: dict = {"last_seen_at": Now()}
    if current_job_id is not None:
        values["current_job_id"] = current_job_id
    if jobs_done is not None:
        values["jobs_done"] = jobs_done
    if jobs_failed is not None:
        values["jobs_failed"] = jobs_failed
    if status is not None:
        values["status"] = status
    return Worker.objects.filter(worker_id=worker_id).update(**values) == 1


def mark_stopped(
    *, worker_id: str, jobs_done: int | None = None, jobs_failed: int | None = None
) -> bool:
    return beat(
        worker_id=worker_id,
        current_job_id="",
        jobs_done=jobs_done,
        jobs_failed=jobs_failed,
        status=WorkerStatus.STOPPED,
    )


def is_alive(worker: Worker, now: dt.datetime) -> bool:
    """Running or stopping, and seen within 3 × poll + lease."""
    if worker.status == WorkerStatus.STOPPED:
        return False
    return worker.last_seen_at + worker.dead_after() >= now


def worker_rows(now: dt.datetime | None = None) -> list[Worker]:
    """Every worker, newest first, with ``alive`` and ``seen_ago_s`` (database time)."""
    now = db_now(now)
    rows = list(Worker.objects.order_by("-last_seen_at", "worker_id"))
    for worker in rows:
        worker.alive = is_alive(worker, now)
        worker.seen_ago_s = max((now - worker.last_seen_at).total_seconds(), 0.0)
    return rows
