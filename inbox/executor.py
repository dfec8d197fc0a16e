"""The executor: claim → authorize → begin → run → record (DESIGN §1.3, §1.4, §4).

A ``WorkerLoop`` (heartbeat, signals, progress, database-error backoff come from
``inbox.loop``); every job change goes through ``inbox.transitions``. Started by
``manage.py run_executor`` (which parses arguments); tests may run it in-process.

One path for every job type. A turn claims up to ``batch`` jobs; they are worked in chunks. A
chunk is the leading run of jobs of idempotent types that need no approval (NOOP, SAVE) — a
crash between their begin and their handler leaves them EXECUTING, which the sweep returns to
READY exactly like CLAIMED, so beginning them together changes no guarantee — or a single job of
any other type (a DELETE is a batch of one: never begun before the job in hand finished). Per
chunk: each job is authorized (schema, fingerprint, and for approval types the approval
re-check); the chunk begins in one transaction (``begin_jobs``: CLAIMED → EXECUTING with
AUTHORIZED, leases renewed), its handlers run one after the other outside any transaction, and
their outcomes (``finish_jobs``, EXECUTED with the outcome) commit together with the next
chunk's begin — one commit fewer per chunk — or at the latest every ``OUTCOME_FLUSH_SECONDS``
and at the end of the turn. ``--one-by-one`` makes every chunk a batch of one.

A lease keeper thread renews the leases of jobs held longer than lease/3 (fast handlers cost no
renewal) until their outcome commits. A refused write is never retried blindly: a lost claim is
logged ("LOST FENCE") and its outcome dropped; a batch a seal drift undid is begun again one job
at a time, which refuses exactly the drifted job. A database error mid-step is retried on a
fresh connection (asking first whether the lost response hid a commit); uncommitted outcomes
are kept and committed first on the next turn. SIGTERM/SIGINT stop claiming; the chunk begun
finishes, claimed-but-not-begun jobs are released, and ``run`` returns normally.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from core import logs
from inbox import scopes as scope_service
from inbox import transitions, workers
from inbox.approvals import check_approval
from inbox.dbcheck import describe_database
from inbox.errors import ConfigurationError, InboxError, JobValidationError
from inbox.handlers import DefiniteFailure, HandlerResult
from inbox.jobtypes import (
    JobType,
    registry,
    retry_delay,
    scopes,
    task_queues,
    validate_job_document,
)
from inbox.loop import DB_ERRORS, WorkerLoop
from inbox.models import Job, JobState, WorkerStatus
from inbox.selectors import any_lease_lapsed
from inbox.transitions import Held, Moved, Outcome

log = logging.getLogger("inbox.executor")

# A chunk of slow handlers records its finished jobs at least this often.
OUTCOME_FLUSH_SECONDS = 1.0


@dataclass
class ExecutorStats:
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    rejected: int = 0
    lost: int = 0
    # Failed attempts sent back to the queue by their retry policy (not outcomes yet).
    retried: int = 0
    released: int = 0
    db_errors: int = 0
    sweeps: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.succeeded + self.not_ok

    @property
    def not_ok(self) -> int:
        return self.failed + self.unknown + self.rejected + self.lost + self.retried

    def line(self) -> str:
        retried = f", {self.retried} retried later" if self.retried else ""
        return (
            f"{self.processed} jobs ({self.succeeded} succeeded, {self.failed} failed, "
            f"{self.unknown} unknown, {self.rejected} rejected, {self.lost} lost{retried})"
        )


@dataclass
class _Held:
    claim_id: str
    renewed_at: float


class _LeaseKeeper(threading.Thread):
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


@dataclass(frozen=True)
class _Verdict:
    ok: bool
    code: str
    why: str
    detail: dict[str, Any]


class Executor(WorkerLoop):
    """One executor process's loop for one scope. ``run()`` returns its stats."""

    kind = "executor"

    def __init__(  # noqa: PLR0913 (over budget; listed in tests/house/test_budgets.py)
        self,
        *,
        scope: str,
        worker_id: str | None = None,
        lease_seconds: int = 60,
        batch: int = 10,
        poll_seconds: float = 1.0,
        max_jobs: int | None = None,
        exit_when_idle: bool = False,
        sweep_every: int = 50,
        progress_seconds: float = 10.0,
        db_retries: int = 5,
        batch_steps: bool = True,
        out: Callable[[str], None] = print,
    ) -> None:
        if lease_seconds < 1:
            raise ConfigurationError(f"the lease must be at least 1 s, got {lease_seconds}")
        if batch < 1:
            raise ConfigurationError(f"the batch must be at least 1, got {batch}")
        if poll_seconds <= 0:
            raise ConfigurationError(f"the poll interval must be positive, got {poll_seconds}")
        if max_jobs is not None and max_jobs < 1:
            raise ConfigurationError(f"--max-jobs must be at least 1, got {max_jobs}")
        if progress_seconds <= 0:
            raise ConfigurationError(f"--progress-every must be positive, got {progress_seconds}")
        if sweep_every < 0:
            raise ConfigurationError(f"--sweep-every must be 0 (off) or more, got {sweep_every}")
        super().__init__(
            worker_id=worker_id,
            scope=scope,
            poll_seconds=poll_seconds,
            lease_seconds=int(lease_seconds),
            progress_seconds=progress_seconds,
            out=out,
        )
        self.batch = batch
        self.max_jobs = max_jobs
        self.exit_when_idle = exit_when_idle
        self.sweep_every = int(sweep_every)
        self.db_retries = max(db_retries, 1)
        self.batch_steps = batch_steps
        self.stats = ExecutorStats()
        self._pending: deque[Job] = deque()
        # Outcomes not yet committed: they ride with the next chunk's begin (kept across a turn
        # a database error cut short).
        self._unrecorded: list[Outcome] = []
        self._current = ""
        self._turns = 0
        self._paused_said = False
        self._db_trouble = False
        self._last_progress_count = 0
        self._keeper = _LeaseKeeper(worker_id=self.worker_id, lease_seconds=self.lease_seconds)
        # The one-transaction turn (``_claim_fast``): after a batch it could not take as one,
        # the next 2, 4 … 64 turns go step by step (a queue that mixes in jobs that may not
        # begin at once pays the failed try rarely).
        self._fast_misses = 0
        self._fast_skip = 0
        self._fast_possible = False

    # --- the loop's hooks -------------------------------------------------------------------

    def setup(self) -> str:
        described = describe_database()
        if self.scope not in scopes():
            raise ConfigurationError(
                f"unknown scope {self.scope!r}; registered scopes: {', '.join(scopes())}"
            )
        for job_type in registry().values():
            if job_type.scope == self.scope:
                job_type.handler  # noqa: B018 - import every handler now: fail at start, not mid-job
        self._fast_possible = self.batch_steps and any(
            _batchable_type(t)
            and (t.scope == self.scope if t.scope_field is None else self.scope in task_queues())
            for t in registry().values()
        )
        self._keeper.start()
        return (
            f"scope={self.scope} lease={self.lease_seconds}s batch={self.batch} "
            f"({'batched' if self.batch_steps else 'one-by-one'} steps) poll={self.poll}s "
            f"on {described}"
        )

    def stopping_note(self) -> str:
        return f"stopping — finishing the jobs begun, releasing {len(self._pending)} claimed job(s)"

    def current(self) -> str:
        return self._current

    def counters(self) -> tuple[int | None, int | None]:
        return self.stats.succeeded, self.stats.not_ok

    def result(self) -> ExecutorStats:
        return self.stats

    def on_db_error(self) -> None:
        self.stats.db_errors += 1
        self._db_trouble = True

    def turn(self) -> bool:
        """One claim-and-run turn; False when the loop should end."""
        self._turns += 1
        if self._db_trouble:
            self._release_orphans()
            self._db_trouble = False
        if self.sweep_every and self._turns % self.sweep_every == 0:
            self._sweep()
        # Jobs left over from a turn a database error cut short are already ours: run them
        # first, paused or not (a pause stops claiming, not the work in hand).
        if not self._pending:
            limit = self.batch
            if self.max_jobs is not None:
                limit = min(limit, self.max_jobs - self.stats.processed - len(self._unrecorded))
                if limit <= 0:
                    self._record()
                    return False
            fast = self._claim_fast(limit) if self._fast_now() else None
            if fast is not None:
                jobs = begun = fast
                if not jobs:
                    # An empty claim does not say why: a new pause is said once, then the
                    # step-by-step turns wait on it and say when it ends.
                    self._paused()
            elif self._paused():
                self._record()
                jobs = begun = []
            else:
                jobs, begun = self._claim(limit)
            if not jobs:
                if self.exit_when_idle:
                    return False
                self.wait(self.poll)
                return True
            self._run(begun)
        while self._pending and not self.stopping:
            self._work(self._next_chunk())
        # The outcomes commit with the next turn's claim (or on the way out: ``finish``).
        return not (
            self.max_jobs is not None
            and self.stats.processed + len(self._unrecorded) >= self.max_jobs
        )

    def finish(self) -> None:
        """Commit what ran, hand back what was claimed but not begun, stop the keeper."""
        self._keeper.halt()
        pending = list(self._pending)
        self._pending.clear()
        try:
            self._record()
            if pending:
                self.beat(status=WorkerStatus.STOPPING)
                for job in pending:
                    self._keeper.drop(job.job_id)
                moved = self._step(
                    lambda: transitions.release_jobs(
                        [Held.of(job) for job in pending],
                        actor=self.worker_id,
                        reason=f"worker stopping ({self.stop_reason or 'exit'})",
                    ),
                    committed=lambda: _holding(
                        pending, {j.job_id: JobState.READY for j in pending}
                    ),
                )
                self.stats.released += len(moved)
                for job_id, exc in getattr(moved, "refused", {}).items():
                    log.warning("job %s not released: %s", job_id, exc)
        finally:
            self._keeper.join(timeout=max(self.lease_seconds, 5))

    def progress_line(self) -> str:
        now = time.monotonic()
        done = self.stats.processed
        span = max(now - self._last_progress, 1e-9)
        rate = (done - self._last_progress_count) / span
        overall = done / max(now - self.stats.started, 1e-9)
        self._last_progress_count = done
        return (
            f"progress: {self.stats.line()}; {rate:.1f} jobs/s over the last {span:.0f}s, "
            f"{overall:.1f} jobs/s overall"
        )

    def summary(self) -> str:
        elapsed = time.monotonic() - self.stats.started
        rate = self.stats.processed / max(elapsed, 1e-9)
        return (
            f"executor {self.worker_id} stopped: {self.stats.line()} in {elapsed:.1f}s "
            f"({rate:.1f} jobs/s); released {self.stats.released}, "
            f"database errors {self.stats.db_errors}, "
            f"sweeps {self.stats.sweeps}" + self._reason_suffix()
        )

    def _paused(self) -> bool:
        """Is the scope paused? Says so once per pause, and once when it is resumed."""
        pause = scope_service.pause_of(self.scope)
        if pause is not None and not self._paused_said:
            self.say(
                f"scope {self.scope} is paused by {pause.changed_by} ({pause.reason}); not claiming"
            )
        elif pause is None and self._paused_said:
            self.say(f"scope {self.scope} resumed; claiming again")
        self._paused_said = pause is not None
        return self._paused_said

    # --- one chunk --------------------------------------------------------------------------

    def _batchable(self, job: Job) -> bool:
        job_type = registry().get(job.job_type)
        return self.batch_steps and job_type is not None and _batchable_type(job_type)

    def _next_chunk(self) -> list[Job]:
        """The leading run of batchable pending jobs, or the one job at the head."""
        chunk = [self._pending.popleft()]
        if self._batchable(chunk[0]):
            while self._pending and self._batchable(self._pending[0]):
                chunk.append(self._pending.popleft())
        return chunk

    def _fast_now(self) -> bool:
        """Is this turn one transaction (``_claim_fast``)? Not for a scope no batchable type
        can land in (DELETE), not while a pause is being waited on (the step-by-step turn
        checks it and says when it ends), nor in one-by-one mode."""
        if not self._fast_possible or self._paused_said:
            return False
        if self._fast_skip:
            self._fast_skip -= 1
            return False
        return True

    def _claim_fast(self, limit: int) -> list[Job] | None:
        """The whole turn's writes in one transaction: commit the outcomes waiting, claim up to
        ``limit`` jobs of the scope unless it is paused, and begin them
        (``claim_and_begin_jobs``: one UPDATE, the CLAIMED, STARTED and AUTHORIZED events in
        one INSERT). Returns the jobs begun, or None when the batch could not go as one — a
        job that may not begin at once (a DELETE, a non-idempotent task), one whose checks
        fail, a drifted seal: nothing of the turn was kept and it goes step by step (``_claim``),
        which rejects, refuses and records each such job on its own.
        """
        outcomes = self._hand_over()
        targets = {o.job.job_id: o.to for o in outcomes}

        def authorize(job: Job) -> bool:
            # The checks ``_authorize`` makes before any begin; AUTHORIZED records them. The
            # writer has just checked this row's seal on what the UPDATE returned (a drift
            # raised before this is asked): computing it again here would only repeat it.
            job_type = registry().get(job.job_type)
            if job_type is None or not self._batchable(job):
                return False
            return self._authorize(job, job_type, seal_checked=True).ok

        def step() -> tuple[Moved, list[Job]]:
            with transaction.atomic():
                return transitions.finish_and_claim_jobs(
                    outcomes,
                    scope=self.scope,
                    worker_id=self.worker_id,
                    lease_seconds=self.lease_seconds,
                    limit=limit,
                    authorize=authorize,
                )

        outcome_jobs = [o.job for o in outcomes]
        try:
            result = self._step(step, committed=lambda: _holding(outcome_jobs, targets))
        except transitions.BatchRefused:
            self._fast_misses += 1
            self._fast_skip = min(2**self._fast_misses, 64)
            return None
        if isinstance(result, set):
            # The response was lost after the commit: the outcomes are in; what we claimed is
            # unknown (it lapses and the sweep offers it again: these types are idempotent).
            self._unrecorded = []
            self._settle(outcomes, _as_moved(result, outcomes))
            self._db_trouble = True
            return []
        finished, jobs = result
        self._fast_misses = 0
        self._unrecorded = []
        self._settle(outcomes, finished)
        self._keeper.hold(jobs)
        return jobs

    def _claim(self, limit: int) -> tuple[list[Job], list[Job]]:
        """One transaction: commit the outcomes waiting, claim up to ``limit`` jobs and begin
        the leading run of batchable ones (authorized first). Returns (claimed, begun); the
        claimed jobs not begun wait in ``_pending``.

        Claim and begin commit together only for batchable types: a crash after it leaves the
        run EXECUTING, which the sweep treats exactly like CLAIMED for these types (§1.3). One
        commit per batch instead of three: the outcome, the claim and the begin.
        """
        outcomes = self._hand_over()
        targets = {o.job.job_id: o.to for o in outcomes}

        def step() -> tuple[Moved, list[Job], Moved]:
            with transaction.atomic():
                finished = (
                    transitions.finish_jobs(outcomes, actor=self.worker_id) if outcomes else Moved()
                )
                jobs = transitions.claim_next_jobs(
                    scope=self.scope,
                    worker_id=self.worker_id,
                    lease_seconds=self.lease_seconds,
                    limit=limit,
                )
                ready: list[Job] = []
                authorized: dict[str, dict[str, Any]] = {}
                for job in jobs:
                    if not self._batchable(job):
                        break
                    verdict = self._authorize(job, registry().get(job.job_type))
                    if not verdict.ok:
                        break  # the one-job path rejects it, with its reason
                    ready.append(job)
                    authorized[job.job_id] = verdict.detail
                begun = (
                    transitions.begin_jobs(
                        ready,
                        actor=self.worker_id,
                        lease_seconds=self.lease_seconds,
                        authorized=authorized,
                    )
                    if ready
                    else Moved()
                )
            return finished, jobs, begun

        outcome_jobs = [o.job for o in outcomes]
        result = self._step(step, committed=lambda: _holding(outcome_jobs, targets))
        if isinstance(result, set):
            # The response was lost after the commit: the outcomes are in; what we claimed is
            # unknown (it lapses and is recovered by the sweep, never run twice).
            self._unrecorded = []
            self._settle(outcomes, _as_moved(result, outcomes))
            self._db_trouble = True
            return [], []
        finished, jobs, begun = result
        self._unrecorded = []
        self._settle(outcomes, finished)
        self._keeper.hold(jobs)
        started = [job for job in jobs if job.job_id in begun and not begun.undone]
        for job in started:
            self._keeper.refreshed(job.job_id)
        self._pending.extend(job for job in jobs if job not in started)
        return jobs, started

    def _run(self, begun: list[Job]) -> None:
        """Run the handlers of a begun chunk one after the other; keep their outcomes."""
        recorded_at = time.monotonic()
        for job in begun:
            self._current = job.job_id
            # JSON logs (issue 13): the handler's records carry the job and its claim.
            with logs.bound(job_id=job.job_id, claim_id=job.claim_id):
                outcome = self._execute(job)
            if outcome is not None:
                self._unrecorded.append(outcome)
            # Slow handlers: record what is done at least every OUTCOME_FLUSH_SECONDS, so an
            # operator sees a finished job finished, not waiting for the rest of its chunk.
            if time.monotonic() - recorded_at >= OUTCOME_FLUSH_SECONDS:
                self._record()
                recorded_at = time.monotonic()
            self._housekeep()
        self._current = ""

    def _work(self, chunk: list[Job]) -> None:
        """Authorize, begin (with the carried outcomes), run each handler, keep the outcomes."""
        ready: list[Job] = []
        authorized: dict[str, dict[str, Any]] = {}
        for job in chunk:
            if self._keeper.is_lost(job.job_id):
                self._keeper.drop(job.job_id)
                self._lost(job.job_id, "lost its claim before it ran; not run")
                continue
            verdict = self._authorize(job, registry().get(job.job_type))
            if not verdict.ok:
                self._keeper.drop(job.job_id)
                self._reject(job, verdict)
                continue
            ready.append(job)
            authorized[job.job_id] = verdict.detail
        self._run(self._begin(ready, authorized))

    def _authorize(
        self, job: Job, job_type: JobType | None, *, seal_checked: bool = False
    ) -> _Verdict:
        """The checks before a job may begin: its type, its document's schema, its seal (unless
        the writer has just checked it on this very row: ``seal_checked``) and, for the types
        that need one, its approval."""
        if job_type is None:
            return _Verdict(False, "UNKNOWN_JOB_TYPE", f"job type {job.job_type} is unknown", {})
        try:
            validate_job_document(job.payload)
        except JobValidationError as exc:
            return _Verdict(False, "SCHEMA_INVALID", str(exc), {})
        if not seal_checked and not transitions.fingerprint_ok(job):
            # The begin refuses it (and records the drift); say why there.
            return _Verdict(True, "OK", "", {"schema": "ok"})
        detail: dict[str, Any] = {"schema": "ok", "fingerprint": job.fingerprint}
        if job_type.needs_approval:
            check = check_approval(job)
            if not check.ok:
                return _Verdict(False, check.code, check.why, {})
            detail.update(approval_id=job.approval_id, approval=check.why)
        return _Verdict(True, "OK", "", detail)

    def _reject(self, job: Job, verdict: _Verdict) -> None:
        try:
            self._step(
                lambda: transitions.reject_job(
                    job.job_id,
                    actor=self.worker_id,
                    reason=verdict.why,
                    result_code=verdict.code,
                    claim_id=job.claim_id,
                ),
                committed=lambda: bool(_holding([job], {job.job_id: JobState.REJECTED})),
            )
        except InboxError as exc:
            self._lost(job.job_id, f"could not be rejected: {exc}")
            return
        self.stats.rejected += 1
        log.warning(
            "job %s REJECTED (%s): %s",
            job.job_id,
            verdict.code,
            verdict.why,
            extra={"job_id": job.job_id, "claim_id": job.claim_id},
        )

    def _begin(self, ready: list[Job], authorized: dict[str, dict[str, Any]]) -> list[Job]:
        """Begin ``ready`` in one transaction with the outcomes waiting to be recorded; the jobs
        that began. A batch a drift undid begins again one job at a time."""
        outcomes = self._hand_over()
        if not ready and not outcomes:
            return []
        targets = {j.job_id: JobState.EXECUTING for j in ready}
        targets.update({o.job.job_id: o.to for o in outcomes})

        def both() -> tuple[Moved, Moved]:
            # One transaction for both steps; a lone step needs no outer one (no savepoint).
            with transaction.atomic() if outcomes and ready else contextlib.nullcontext():
                finished = (
                    transitions.finish_jobs(outcomes, actor=self.worker_id) if outcomes else Moved()
                )
                begun = (
                    transitions.begin_jobs(
                        ready,
                        actor=self.worker_id,
                        lease_seconds=self.lease_seconds,
                        authorized=authorized,
                    )
                    if ready
                    else Moved()
                )
            return finished, begun

        jobs = [*ready, *(o.job for o in outcomes)]
        result = self._step(both, committed=lambda: _holding(jobs, targets))
        if isinstance(result, set):  # a lost response after the commit: read back what moved
            finished, begun = _as_moved(result, outcomes), _as_moved(result, ready)
        else:
            finished, begun = result
        self._unrecorded = []
        self._settle(outcomes, finished)
        if begun.undone:
            return [job for job in ready if self._begin_alone(job, authorized[job.job_id])]
        started = []
        for job in ready:
            if job.job_id in begun:
                self._keeper.refreshed(job.job_id)
                started.append(job)
            else:
                self._keeper.drop(job.job_id)
                self._lost(job.job_id, f"could not begin: {begun.refused.get(job.job_id)}")
        return started

    def _begin_alone(self, job: Job, checks: dict[str, Any]) -> bool:
        begun = self._step(
            lambda: transitions.begin_jobs(
                [job],
                actor=self.worker_id,
                lease_seconds=self.lease_seconds,
                authorized={job.job_id: checks},
            ),
            committed=lambda: _holding([job], {job.job_id: JobState.EXECUTING}),
        )
        if job.job_id in begun:
            self._keeper.refreshed(job.job_id)
            return True
        self._keeper.drop(job.job_id)
        refusal = getattr(begun, "refused", {}).get(job.job_id)
        self._lost(job.job_id, f"could not begin: {refusal}")
        return False

    def _execute(self, job: Job) -> Outcome | None:
        """Run the handler of a begun job; its outcome, or None if the claim was lost."""
        job_type = registry()[job.job_type]
        if self._keeper.is_lost(job.job_id):
            self._keeper.drop(job.job_id)
            self._lost(job.job_id, "lost its claim before it ran; not run")
            return None
        started = time.monotonic()
        to, code, detail, error = self._run_handler(job, job_type)
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        executed = {"handler": job_type.handler_path, "duration_ms": elapsed_ms, **detail}
        # A failure with a retry left (idempotent types only) goes back to the queue, deferred.
        retry_in = retry_delay(job, job_type) if to == JobState.FAILED else None
        if retry_in is not None:
            to = JobState.READY
        return Outcome(
            job=job,
            to=to,
            result_code=code,
            error=error,
            executed_detail=executed,
            retry_in=retry_in,
        )

    def _run_handler(self, job: Job, job_type: JobType) -> tuple[str, str, dict[str, Any], str]:
        """(outcome state, result code, detail, error) — never raises."""
        try:
            result = job_type.handler(job)
        except DefiniteFailure as exc:
            return JobState.FAILED, exc.result_code, dict(exc.detail), str(exc)
        except Exception as exc:
            log.exception("job %s: handler %s raised", job.job_id, job_type.handler_path)
            error = f"{type(exc).__name__}: {exc}"
            # What the handler knew about its error (a task's exception class and traceback).
            detail = dict(getattr(exc, "detail", None) or {})
            if job_type.idempotent:
                # Safe to run again: a definite FAILED an operator may retry.
                return JobState.FAILED, "HANDLER_ERROR", detail, error
            return JobState.OUTCOME_UNKNOWN, "HANDLER_ERROR", detail, error
        if not isinstance(result, HandlerResult):
            result = HandlerResult()
        return JobState.SUCCEEDED, result.result_code, dict(result.detail), ""

    # --- recording outcomes -----------------------------------------------------------------

    def _hand_over(self) -> list[Outcome]:
        """The outcomes to commit now, taken from the lease keeper (under its lock, so no
        renewal races the commit); a claim it lost meanwhile must not get an outcome."""
        kept = []
        for outcome in self._unrecorded:
            if self._keeper.drop(outcome.job.job_id):
                self._lost(
                    outcome.job.job_id,
                    f"finished ({outcome.result_code}) after its claim was lost; "
                    "outcome not recorded",
                )
            else:
                kept.append(outcome)
        self._unrecorded = kept
        return kept

    def _record(self) -> None:
        """Commit the waiting outcomes in one transaction (end of turn, slow chunk, stop)."""
        outcomes = self._hand_over()
        if not outcomes:
            return
        targets = {o.job.job_id: o.to for o in outcomes}
        jobs = [o.job for o in outcomes]
        moved = self._step(
            lambda: transitions.finish_jobs(outcomes, actor=self.worker_id),
            committed=lambda: _holding(jobs, targets),
        )
        self._unrecorded = []
        self._settle(
            outcomes, _as_moved(moved, outcomes) if not isinstance(moved, Moved) else moved
        )

    def _settle(self, outcomes: list[Outcome], moved: Moved) -> None:
        """Count the committed outcomes; an undone batch is recorded one outcome at a time."""
        if moved.undone:
            for outcome in outcomes:
                self._unrecorded = [outcome]
                self._record()
            return
        for outcome in outcomes:
            job_id = outcome.job.job_id
            if job_id not in moved:
                self._lost(
                    job_id,
                    f"ran but its outcome ({outcome.to}) was refused: {moved.refused.get(job_id)}",
                )
            elif outcome.to == JobState.SUCCEEDED:
                self.stats.succeeded += 1
            elif outcome.to == JobState.FAILED:
                self.stats.failed += 1
            elif outcome.to == JobState.READY:
                self.stats.retried += 1
            else:
                self.stats.unknown += 1

    def _lost(self, job_id: str, what: str) -> None:
        self.stats.lost += 1
        log.error("LOST FENCE: job %s %s", job_id, what, extra={"job_id": job_id})

    # --- database resilience ----------------------------------------------------------------

    def _step(self, step: Callable[[], Any], *, committed: Callable[[], set[str]]) -> Any:
        """Run one transition, retrying on a dropped connection.

        The lost response may hide a commit, so before each retry ``committed`` asks the
        database which jobs already are where the step would put them under our claim; if any
        are, the step committed (it is one transaction) and that set is returned instead.
        """
        attempt = 0
        while True:
            try:
                return step()
            except DB_ERRORS as exc:
                attempt += 1
                self.stats.db_errors += 1
                log.warning("database error (attempt %d/%d): %s", attempt, self.db_retries, exc)
                self.drop_connection()
                if attempt >= self.db_retries:
                    self._db_trouble = True
                    raise
                time.sleep(min(self.poll, 1.0) * attempt)
                try:
                    found = committed()
                except DB_ERRORS:
                    self.drop_connection()
                    continue
                if found:
                    return found

    def _release_orphans(self) -> None:
        """After a database error: hand back CLAIMED jobs of ours that we no longer track."""
        tracked = {job.job_id for job in self._pending}
        orphans = list(
            Job.objects.filter(worker_id=self.worker_id, state=JobState.CLAIMED).exclude(
                job_id__in=tracked
            )
        )
        if not orphans:
            return
        for job in orphans:
            self._keeper.drop(job.job_id)
        moved = transitions.release_jobs(
            [Held.of(job) for job in orphans],
            actor=self.worker_id,
            reason="released after a database error",
        )
        self.stats.released += len(moved)
        for job_id, exc in moved.refused.items():
            log.warning("job %s: orphan not released: %s", job_id, exc)

    # --- housekeeping -----------------------------------------------------------------------

    def _housekeep(self) -> None:
        """Progress and heartbeat between a chunk's handlers; a database error here must not
        abandon the jobs in hand (their outcomes are not committed yet)."""
        self.maybe_progress()
        try:
            self.beat()
        except DB_ERRORS as exc:
            self.stats.db_errors += 1
            log.warning("heartbeat hit a database error (the chunk goes on): %s", exc)
            self.drop_connection()

    def _sweep(self) -> None:
        try:
            # Nearly every sweep finds nothing: one indexed probe then, not the sweep's
            # transaction and its reads (a twentieth of a busy executor's Python).
            if not any_lease_lapsed():
                self.stats.sweeps += 1
                return
            report = transitions.recover_stale_claims_report(actor=self.worker_id)
        except InboxError as exc:
            log.warning("sweep failed: %s", exc)
            return
        self.stats.sweeps += 1
        if report.total or report.refused:
            self.say(f"sweep: {report.summary()}")


def _batchable_type(job_type: JobType) -> bool:
    """Jobs of this type may be begun together, and as soon as they are claimed: a crash
    between begin and handler leaves them EXECUTING, which the sweep returns to READY exactly
    like CLAIMED (idempotent, no approval to re-check right before executing)."""
    return job_type.idempotent and not job_type.needs_approval


def _ids(jobs: list[Job]) -> list[str]:
    return [job.job_id for job in jobs]


def _holding(jobs: list[Job], states: dict[str, str]) -> set[str]:
    """Which of ``jobs`` are in their target state under our claim (a step's commit check)."""
    if not jobs:
        return set()
    rows = Job.objects.filter(job_id__in=[j.job_id for j in jobs]).values_list(
        "job_id", "state", "claim_id"
    )
    claims = {j.job_id: j.claim_id for j in jobs}
    return {jid for jid, state, claim in rows if state == states[jid] and claim == claims[jid]}


def _as_moved(found: set[str], items: list[Any]) -> Moved:
    """What a step whose response was lost moved, read back from the database."""
    moved = Moved()
    for item in items:
        job = item.job if isinstance(item, Outcome) else item
        if job.job_id in found:
            moved.add(job.job_id)
            moved.jobs.append(job)
    return moved
