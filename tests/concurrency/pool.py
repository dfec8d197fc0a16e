"""A fast loader of READY job pools for the real-process tests (tests only).

``create_job`` costs a savepoint and three statements per job (several ms on PostgreSQL); a
pool of thousands would dominate the suite. ``load_pool`` builds the very rows and events
``create_job`` writes (through the same ``build_job``) for a job type without approval —
validated document, sealed fingerprint, REQUESTED + READY — and inserts them in bulk.
``tests/concurrency/test_pool.py`` checks that the two paths write the same thing.
"""

from __future__ import annotations

from django.db import transaction

from audit.events import Event, record_events
from inbox.models import Job, JobState
from inbox.transitions import build_job
from tests.factories import job_doc


def pool_job(doc: dict, *, requested_by: str) -> tuple[Job, list[Event]]:
    """The unsaved READY job and events ``create_job`` would store for ``doc``."""
    job, events = build_job(doc, requested_by=requested_by)
    if job.state != JobState.READY:
        raise ValueError(f"{job.job_type} needs an approval; pools hold READY jobs only")
    return job, events


def load_pool(
    count: int,
    *,
    kind: str = "noop",
    prefix: str = "pool",
    requested_by: str = "pool-loader",
    batch: int = 1000,
) -> list[str]:
    """Insert ``count`` READY jobs (and their events) in one transaction; return their ids."""
    ids: list[str] = []
    with transaction.atomic():
        for start in range(0, count, batch):
            jobs, events = [], []
            for i in range(start, min(count, start + batch)):
                job, job_events = pool_job(
                    job_doc(kind, uid=f"{prefix}-{i:06d}"), requested_by=requested_by
                )
                jobs.append(job)
                events.extend(job_events)
            Job.objects.bulk_create(jobs)
            record_events(events)
            ids.extend(job.job_id for job in jobs)
    return ids
