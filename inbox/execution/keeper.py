"""The lease keeper: the thread that renews the leases of the jobs an executor holds."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from django.db import connection

from inbox import transitions, workers
from inbox.loop import DB_ERRORS
from inbox.models import Job
from inbox.transitions import Held

# The executor's logger: a lost fence reads the same whichever thread found it.
log = logging.getLogger("inbox.executor")


@dataclass
class _Held:
    claim_id: str
    renewed_at: float


class LeaseKeeper(threading.Thread):
    """Renews the leases of jobs this executor holds once they are older than lease/3.

    One thread per executor, with its own database connection (closed when it ends). All due
    leases renew in one transaction (``renew_leases``). Renewal and the main thread's hand-over
    (``drop``) share a lock, so a renewal never races the job's outcome commit. A refused
    renewal marks the job lost: the executor must not record its outcome.
    """

    def __init__(self, *, worker_id: str, lease_seconds: int) -> None:
        super().__init__(name=f"lease-keeper-{worker_id}", daemon=True)
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.every = lease_seconds / 3
        self.tick = max(0.05, min(lease_seconds / 6, 2.0))
        self.lock = threading.Lock()
        self.held: dict[str, _Held] = {}
        self.lost: set[str] = set()
        self._halt = threading.Event()

    def hold(self, jobs: list[Job]) -> None:
        now = time.monotonic()
        with self.lock:
            for job in jobs:
                self.held[job.job_id] = _Held(job.claim_id, now)

    def refreshed(self, job_id: str) -> None:
        with self.lock:
            if job_id in self.held:
                self.held[job_id].renewed_at = time.monotonic()

    def is_lost(self, job_id: str) -> bool:
        with self.lock:
            return job_id in self.lost

    def drop(self, job_id: str) -> bool:
        """Stop renewing ``job_id``; True if its claim was lost meanwhile."""
        with self.lock:
            self.held.pop(job_id, None)
            if job_id in self.lost:
                self.lost.discard(job_id)
                return True
            return False

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            while not self._halt.wait(self.tick):
                self._renew_due()
        finally:
            connection.close()  # this thread's own connection

    def _renew_due(self) -> None:
        with self.lock:
            now = time.monotonic()
            due = [
                Held(jid, h.claim_id)
                for jid, h in self.held.items()
                if now - h.renewed_at >= self.every
            ]
            if not due:
                return
            try:
                moved = transitions.renew_leases(
                    due, lease_seconds=self.lease_seconds, actor=self.worker_id
                )
            except DB_ERRORS as exc:
                log.warning("lease renewal hit a database error (retrying): %s", exc)
                connection.close()
                return
            renewed_at = time.monotonic()
            for job_id in moved:
                self.held[job_id].renewed_at = renewed_at
            for job_id, exc in moved.refused.items():
                self.held.pop(job_id, None)
                self.lost.add(job_id)
                log.error("LOST FENCE: job %s: %s; work on it stops", job_id, exc)
        if moved:
            # The main thread is busy with a long job: keep the worker visibly alive too.
            try:
                workers.beat(worker_id=self.worker_id)
            except DB_ERRORS:
                connection.close()
