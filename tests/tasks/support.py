"""Helpers for the task-backend tests."""

from __future__ import annotations

from inbox import transitions
from inbox.models import Job
from tests.tasks import sample

WORKER = "worker-tasks"


def unknown_task(order: str = "o-unknown") -> Job:
    """A non-idempotent task job parked OUTCOME_UNKNOWN by its holder (through transitions)."""
    result = sample.charge.enqueue(order)
    job = transitions.claim_job(result.id, worker_id=WORKER, lease_seconds=30)
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    return transitions.mark_outcome_unknown(job.job_id, claim_id=job.claim_id, actor=WORKER)
