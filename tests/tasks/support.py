"""Helpers for the task-backend tests."""

from __future__ import annotations

import threading

from django.db import connection

from inbox import transitions
from inbox.executor import Executor
from inbox.models import Job
from tests.tasks import sample

WORKER = "worker-tasks"


def unknown_task(order: str = "o-unknown") -> Job:
    """A non-idempotent task job parked OUTCOME_UNKNOWN by its holder (through transitions)."""
    result = sample.charge.enqueue(order)
    job = transitions.claim_job(result.id, worker_id=WORKER, lease_seconds=30)
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    return transitions.mark_outcome_unknown(job.job_id, claim_id=job.claim_id, actor=WORKER)


def drain(scope: str = "default") -> Executor:
    """Run an executor on ``scope`` in this process until nothing is left to claim."""
    executor = Executor(scope=scope, exit_when_idle=True, poll_seconds=0.05, out=lambda _l: None)
    executor.run()
    return executor


def drain_in_a_thread(scope: str = "default", *, timeout: float = 120) -> None:
    """``drain`` off the main thread, as in a worker process: Playwright's browser tests leave
    an event loop running in this one, and ``async_to_sync`` refuses to run beside it."""

    def run() -> None:
        try:
            drain(scope)
        finally:
            connection.close()  # the thread's own connection

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=timeout)
    assert not worker.is_alive(), "the executor thread did not finish"
