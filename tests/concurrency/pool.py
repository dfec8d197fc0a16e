"""A fast loader of READY job pools for the real-process tests (tests only).

``create_job`` costs a savepoint and three statements per job (several ms on PostgreSQL); a
pool of thousands would dominate the suite. ``load_pool`` builds the very rows and events
``create_job`` writes for a job type without approval — validated document, sealed fingerprint,
REQUESTED + READY — and inserts them in bulk. ``tests/concurrency/test_pool.py`` checks that
the two paths write the same thing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from audit.events import Event, record_events
from audit.models import EventType
from inbox.jobtypes import validate_job_document
from inbox.models import Job, JobState
from inbox.transitions import fingerprint_of
from tests.factories import job_doc


def pool_job(doc: dict, *, requested_by: str) -> tuple[Job, list[Event]]:
    job_type, doc = validate_job_document(doc)
    if job_type.needs_approval:
        raise ValueError(f"{job_type.name} needs an approval; pools hold READY jobs only")
    job = Job(
        job_id=doc["job_id"],
        job_version=doc["job_version"],
        mission_id=doc["mission_id"],
        job_type=job_type.name,
        scope=job_type.scope,
        object_id=doc["object_id"],
        vault_path=doc["vault_path"],
        payload=doc,
        idempotency_key=doc["idempotency_key"],
        requested_by=requested_by,
        max_attempts=job_type.max_attempts or settings.INBOX_MAX_ATTEMPTS,
        state=JobState.READY,
    )
    job.fingerprint = fingerprint_of(job)
    events = [
        Event(
            EventType.REQUESTED,
            requested_by,
            job_id=job.job_id,
            detail={"job_type": job.job_type, "object_id": job.object_id, "to": JobState.CREATED},
        ),
        Event(
            EventType.READY,
            requested_by,
            job_id=job.job_id,
            detail={
                "from": JobState.CREATED,
                "to": JobState.READY,
                "fingerprint": job.fingerprint,
            },
        ),
    ]
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
