"""The executor loop: claim → authorize → begin → run → record (DESIGN §1.3, §1.4, §4).

Owns a worker process's loop and nothing else: every job change goes through
``inbox.transitions``, heartbeats through ``inbox.workers``. Started by
``manage.py run_executor`` (which parses arguments); tests may run it in-process.

Per turn: ``close_old_connections()``, a heartbeat at most every poll interval, a stale sweep
every ``sweep_every`` turns, the pause check, one batch claim. Per job: the authorization
(schema, fingerprint, and for approval types the approval re-check) is recorded as AUTHORIZED in
the same transaction as CLAIMED → EXECUTING, which also renews the lease; the handler runs
outside any transaction; EXECUTED and the outcome commit together. A single background thread
renews leases only for jobs held longer than lease/3, so fast handlers cost no extra writes.

Two ways to commit those steps. Idempotent types that need no approval go by batch: the claimed
batch begins in one transaction (``transitions.begin_jobs``) and its outcomes commit in another
(``finish_jobs``); a job the batch cannot move takes the one-job path, which moves it or names
the refusal. Everything else (a DELETE) goes one job at a time, a job's outcome riding with the
next job's begin to save a commit.

A database error is retried (same step, fresh connection) and, if it persists, the turn is
abandoned and the loop reconnects on the next one; a batch's uncommitted outcomes are kept and
committed first on the next turn. SIGTERM/SIGINT stop claiming; the jobs begun finish (one job,
or a begun batch), claimed-but-not-begun jobs are released, and ``run`` returns normally.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)

from inbox import scopes as scope_service
from inbox import transitions, workers
from inbox.approvals import check_approval
from inbox.dbcheck import check_worker_database
from inbox.errors import (
    ConfigurationError,
    ImmutableFieldDrift,
    InboxError,
    InvalidTransition,
    JobNotFound,
    JobValidationError,
    LostClaim,
)
from inbox.handlers import DefiniteFailure, HandlerResult
from inbox.jobtypes import JobType, registry, scopes, validate_job_document
from inbox.models import Job, JobState, WorkerStatus

log = logging.getLogger("inbox.executor")

DB_ERRORS = (OperationalError, InterfaceError)
# A batch of slow handlers records its finished jobs at least this often.
OUTCOME_FLUSH_SECONDS = 1.0


@dataclass
class ExecutorStats:
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    rejected: int = 0
    lost: int = 0
    released: int = 0
    db_errors: int = 0
    sweeps: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.succeeded + self.failed + self.unknown + self.rejected + self.lost

    @property
    def not_ok(self) -> int:
        return self.failed + self.unknown + self.rejected + self.lost

    def line(self) -> str:
        return (
            f"{self.processed} jobs ({self.succeeded} succeeded, {self.failed} failed, "
            f"{self.unknown} unknown, {self.rejected} rejected, {self.lost} lost)"
        )


@dataclass
class _Held:
    claim_id: str
    renewed_at: float


class _LeaseKeeper(threading.Thread):
    """Renews the leases of jobs this executor holds once they are older than lease/3.

    One thread per executor, with its own database connection (closed when it ends). Renewal
    and the main thread's hand-over (``drop``) share a lock, so a renewal never races the
    job's completion. A refused renewal (``LostClaim``) marks the job lost: the executor must
    not record its outcome.
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
        renewed = False
        with self.lock:
            now = time.monotonic()
            due = [(jid, h) for jid, h in self.held.items() if now - h.renewed_at >= self.every]
            for job_id, held in due:
                try:
                    transitions.renew_lease(
                        job_id,
                        claim_id=held.claim_id,
                        lease_seconds=self.lease_seconds,
                        actor=self.worker_id,
                    )
                    held.renewed_at = time.monotonic()
                    renewed = True
                except (LostClaim, JobNotFound) as exc:
                    self.held.pop(job_id, None)
                    self.lost.add(job_id)
                    log.error("LOST FENCE: job %s: %s; work on it stops", job_id, exc)
                except DB_ERRORS as exc:
                    log.warning("lease renewal hit a database error (retrying): %s", exc)
                    connection.close()
                    return
                except Exception:
                    log.exception("lease renewal of job %s failed; retrying", job_id)
        if renewed:
            # The main thread is busy with a long job: keep the worker visibly alive too.
            try:
                workers.beat(worker_id=self.worker_id)
            except DB_ERRORS:
                connection.close()


@dataclass(frozen=True)
class _Step:
    """One job transition the executor wants committed, and how to tell it already was."""

    job: Job
    what: str
    call: Callable[[], Any]
    done: Callable[[], bool]


@dataclass(frozen=True)
class _Verdict:
    ok: bool
    code: str
    why: str
    detail: dict[str, Any]


class Executor:
    """One executor process's loop for one scope. ``run()`` returns its stats."""

    def __init__(
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
        self.scope = scope
        self.worker_id = worker_id or workers.new_worker_id("executor", scope)
        self.lease_seconds = int(lease_seconds)
        self.batch = batch
        self.poll = poll_seconds
        self.max_jobs = max_jobs
        self.exit_when_idle = exit_when_idle
        self.sweep_every = max(int(sweep_every), 0)
        self.progress_seconds = progress_seconds
        self.db_retries = max(db_retries, 1)
        self.batch_steps = batch_steps
        self.out = out
        self.stats = ExecutorStats()
        self._stop = threading.Event()
        self._stop_reason = ""
        self._pending: deque[Job] = deque()
        # The last job's outcome, committed together with the next job's first step.
        self._carry: _Step | None = None
        # A batch's outcomes not yet committed (kept across a turn a database error cut short).
        self._unrecorded: list[transitions.Outcome] = []
        self._current = ""
        self._turns = 0
        self._last_beat = 0.0
        self._last_progress = (time.monotonic(), 0)
        self._paused_said = False
        self._db_trouble = False
        self._keeper = _LeaseKeeper(worker_id=self.worker_id, lease_seconds=self.lease_seconds)

    # --- control ----------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, reason: str = "asked to stop") -> None:
        """Stop claiming; the jobs begun finish and the rest of the batch is released."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only flags and one raw write here: logging or print() from a signal handler can
        # re-enter a buffered stream the main thread is writing to.
        name = signal.Signals(signum).name
        if self.stopping:
            _raw_stderr(f"{name} again: already stopping (finishing job {self._current})")
            return
        _raw_stderr(
            f"{name}: stopping — finishing the jobs begun, releasing "
            f"{len(self._pending)} claimed job(s)"
        )
        self.stop(name)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> ExecutorStats:
        """Run until idle (``exit_when_idle``), ``max_jobs``, or a stop signal."""
        described = check_worker_database()
        if self.scope not in scopes():
            raise ConfigurationError(
                f"unknown scope {self.scope!r}; registered scopes: {', '.join(scopes())}"
            )
        handlers = {t.name: t for t in registry().values() if t.scope == self.scope}
        for job_type in handlers.values():
            job_type.handler  # noqa: B018 - import every handler now: fail at start, not mid-job
        workers.register_worker(
            worker_id=self.worker_id,
            kind="executor",
            scope=self.scope,
            poll_seconds=self.poll,
            lease_seconds=self.lease_seconds,
        )
        self.out(
            f"executor {self.worker_id}: scope={self.scope} lease={self.lease_seconds}s "
            f"batch={self.batch} ({'batched' if self.batch_steps else 'one-by-one'} steps) "
            f"poll={self.poll}s on {described}"
        )
        previous = self._install_signals()
        self._keeper.start()
        try:
            while not self.stopping:
                self._turns += 1
                close_old_connections()
                try:
                    if not self._turn():
                        break
                except DB_ERRORS as exc:
                    self.stats.db_errors += 1
                    self._db_trouble = True
                    log.error("database error; reconnecting on the next turn: %s", exc)
                    self._drop_connection()
                    self._stop.wait(self.poll)
        finally:
            self._shutdown()
            self._restore_signals(previous)
        return self.stats

    def _turn(self) -> bool:
        """One claim-and-run turn; False when the loop should end."""
        self._maybe_beat()
        self._maybe_progress()
        if self._db_trouble:
            self._release_orphans()
            self._db_trouble = False
        self._record_outcomes()
        if self.sweep_every and self._turns % self.sweep_every == 0:
            self._sweep()
        # Jobs left over from a turn a database error cut short are already ours: run them
        # first, paused or not (a pause stops claiming, not the work in hand).
        if not self._pending:
            if self._paused():
                if self.exit_when_idle:
                    return False
                self._stop.wait(self.poll)
                return True
            limit = self.batch
            if self.max_jobs is not None:
                limit = min(limit, self.max_jobs - self.stats.processed)
                if limit <= 0:
                    return False
            jobs = transitions.claim_next_jobs(
                scope=self.scope,
                worker_id=self.worker_id,
                lease_seconds=self.lease_seconds,
                limit=limit,
            )
            if not jobs:
                if self.exit_when_idle:
                    return False
                self._stop.wait(self.poll)
                return True
            self._pending.extend(jobs)
            self._keeper.hold(jobs)
        while self._pending and not self.stopping:
            run = self._batchable_run()
            if run:
                try:
                    self._process_batch(run)
                finally:
                    self._current = ""
                    for job in run:
                        self._keeper.drop(job.job_id)
                continue
            job = self._pending.popleft()
            self._current = job.job_id
            try:
                self._process(job)
            finally:
                self._current = ""
                self._keeper.drop(job.job_id)
            self._maybe_progress()
            self._maybe_beat()
        self._flush()
        return not (self.max_jobs is not None and self.stats.processed >= self.max_jobs)

    def _paused(self) -> bool:
        """Is the scope paused? Says so once per pause, and once when it is resumed."""
        pause = scope_service.pause_of(self.scope)
        if pause is not None and not self._paused_said:
            self._say(
                f"scope {self.scope} is paused by {pause.changed_by} ({pause.reason}); not claiming"
            )
        elif pause is None and self._paused_said:
            self._say(f"scope {self.scope} resumed; claiming again")
        self._paused_said = pause is not None
        return self._paused_said

    # --- a batch of idempotent jobs ---------------------------------------------------------

    def _batchable_run(self) -> list[Job]:
        """Take the leading pending jobs whose steps may be batched (two or more, else none).

        Only idempotent types that need no approval: for them a job left EXECUTING by a crash
        goes back to READY exactly like a CLAIMED one, so beginning the batch together changes
        no guarantee. A DELETE always goes one job per transaction.
        """
        if not self.batch_steps:
            return []
        run: list[Job] = []
        for job in self._pending:
            job_type = registry().get(job.job_type)
            if job_type is None or not job_type.idempotent or job_type.needs_approval:
                break
            run.append(job)
        if len(run) < 2:
            return []
        for _ in run:
            self._pending.popleft()
        return run

    def _process_batch(self, jobs: list[Job]) -> None:
        """Authorize each job, begin them in one transaction, run their handlers one after the
        other, and commit their outcomes in one transaction.

        A job the batch cannot move takes the one-job path, which moves it or names the refusal.
        Once begun, the batch's jobs are the jobs in hand: a stop signal lets them finish.
        """
        self._flush()
        ready: list[Job] = []
        authorized: dict[str, dict[str, Any]] = {}
        for job in jobs:
            if self._keeper.is_lost(job.job_id):
                self.stats.lost += 1
                continue
            verdict = self._authorize(job, registry().get(job.job_type))
            if not verdict.ok:
                self._reject(job, verdict)
                continue
            ready.append(job)
            authorized[job.job_id] = verdict.detail
        moved = self._db_batch(
            lambda: transitions.begin_jobs(
                ready,
                actor=self.worker_id,
                lease_seconds=self.lease_seconds,
                authorized=authorized,
            ),
            committed=lambda: _holding(ready, {j.job_id: JobState.EXECUTING for j in ready}),
        )
        begun: list[Job] = []
        for job in ready:
            if job.job_id in moved:
                job.state = JobState.EXECUTING
            elif not self._begin_one(job, authorized[job.job_id]):
                continue
            self._keeper.refreshed(job.job_id)
            begun.append(job)
        recorded_at = time.monotonic()
        for job in begun:
            self._current = job.job_id
            job_type = registry()[job.job_type]
            result = self._execute(job, job_type, hand_over=False)
            if result is not None:
                self._unrecorded.append(result)
            # Slow handlers: record what is done at least every OUTCOME_FLUSH_SECONDS, so an
            # operator sees a finished job finished, not waiting for the rest of its batch.
            if time.monotonic() - recorded_at >= OUTCOME_FLUSH_SECONDS:
                self._record_outcomes()
                recorded_at = time.monotonic()
            self._housekeep()
        self._current = ""
        self._record_outcomes()

    def _record_outcomes(self) -> None:
        """Commit the batch's outcomes in one transaction; the ones it cannot move go one by one.

        If the database stays away they are kept, and the next turn tries again before it
        claims anything.
        """
        if not self._unrecorded:
            return
        outcomes: list[transitions.Outcome] = []
        for outcome in self._unrecorded:
            # Hand over from the lease keeper (under its lock, so no renewal races the commit);
            # a claim it lost meanwhile must not get an outcome.
            if self._keeper.drop(outcome.job.job_id):
                self._lost_after_run(outcome.job, outcome.result_code)
            else:
                outcomes.append(outcome)
        self._unrecorded = outcomes
        if not outcomes:
            return
        moved = self._db_batch(
            lambda: transitions.finish_jobs(outcomes, actor=self.worker_id),
            committed=lambda: _holding(
                [o.job for o in outcomes], {o.job.job_id: o.to for o in outcomes}
            ),
        )
        self._unrecorded = []
        for outcome in outcomes:
            if outcome.job.job_id in moved:
                self._settle_outcome(outcome.to, outcome.job, None)
            else:
                self._carry = self._finish_step(outcome)
                self._flush()

    def _housekeep(self) -> None:
        """Progress and heartbeat between a batch's handlers; a database error here must not
        abandon the jobs in hand (their outcomes are not committed yet)."""
        self._maybe_progress()
        try:
            self._maybe_beat()
        except DB_ERRORS as exc:
            self.stats.db_errors += 1
            log.warning("heartbeat hit a database error (the batch goes on): %s", exc)
            self._drop_connection()

    def _db_batch(
        self, step: Callable[[], set[str]], *, committed: Callable[[], set[str]]
    ) -> set[str]:
        """Run one batched step, retrying on a dropped connection like ``_db_step``.

        A batch commits whole or not at all, so after a lost response any job found in its
        target state under our claim means the commit happened.
        """
        found: set[str] = set()

        def done() -> bool:
            found.clear()
            found.update(committed())
            return bool(found)

        moved = self._db_step(step, done=done)
        return moved if moved is not None else set(found)

    # --- one job ----------------------------------------------------------------------------

    def _process(self, job: Job) -> None:
        """Authorize and begin ``job`` (committing the previous job's outcome in the same
        transaction), run its handler, and keep its outcome to commit with the next step."""
        if self._keeper.is_lost(job.job_id):
            self.stats.lost += 1
            return
        job_type = registry().get(job.job_type)
        verdict = self._authorize(job, job_type)
        if not verdict.ok:
            self._reject(job, verdict)
            return
        if not self._begin_one(job, verdict.detail):
            return
        self._keeper.refreshed(job.job_id)
        assert job_type is not None  # _authorize refuses unknown types
        outcome = self._execute(job, job_type)
        if outcome is not None:
            self._carry = self._finish_step(outcome)

    def _reject(self, job: Job, verdict: _Verdict) -> None:
        step = _Step(
            job=job,
            what="reject",
            call=lambda: transitions.reject_job(
                job.job_id,
                actor=self.worker_id,
                reason=verdict.why,
                result_code=verdict.code,
                claim_id=job.claim_id,
            ),
            done=lambda: _state_of(job) == JobState.REJECTED,
        )
        if self._commit(step) is None:
            self.stats.rejected += 1
            log.warning("job %s REJECTED (%s): %s", job.job_id, verdict.code, verdict.why)

    def _begin_one(self, job: Job, authorized: dict[str, Any]) -> bool:
        """Begin ``job`` on its own (with the carried outcome); False if refused."""
        step = _Step(
            job=job,
            what="begin",
            call=lambda: transitions.begin_job(
                job.job_id,
                claim_id=job.claim_id,
                actor=self.worker_id,
                lease_seconds=self.lease_seconds,
                authorized=authorized,
            ),
            done=lambda: _holds(job, JobState.EXECUTING),
        )
        if self._commit(step) is not None:
            return False
        job.state = JobState.EXECUTING
        return True

    def _execute(
        self, job: Job, job_type: JobType, *, hand_over: bool = True
    ) -> transitions.Outcome | None:
        """Run the handler of a begun job; its outcome, or None if the claim was lost.

        ``hand_over`` stops the lease renewals now (the outcome commits next); a batch keeps
        renewing until its outcomes commit and hands over in ``_record_outcomes``.
        """
        if self._keeper.is_lost(job.job_id):
            self.stats.lost += 1
            log.error("LOST FENCE: job %s lost its claim before it ran; not run", job.job_id)
            return None
        started = time.monotonic()
        outcome, code, detail, error = self._run_handler(job, job_type)
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        lost = self._keeper.drop(job.job_id) if hand_over else self._keeper.is_lost(job.job_id)
        if lost:
            self._lost_after_run(job, code)
            return None
        executed = {"handler": job_type.handler_path, "duration_ms": elapsed_ms, **detail}
        return transitions.Outcome(
            job=job, to=outcome, result_code=code, error=error, executed_detail=executed
        )

    def _lost_after_run(self, job: Job, code: str) -> None:
        self.stats.lost += 1
        log.error(
            "LOST FENCE: job %s finished (%s) after its claim was lost; outcome not recorded",
            job.job_id,
            code,
        )

    def _finish_step(self, outcome: transitions.Outcome) -> _Step:
        finish = {
            JobState.SUCCEEDED: transitions.complete_job,
            JobState.FAILED: transitions.fail_job,
            JobState.OUTCOME_UNKNOWN: transitions.mark_outcome_unknown,
        }[outcome.to]
        kwargs: dict[str, Any] = {"executed_detail": dict(outcome.executed_detail)}
        if outcome.error:
            kwargs["error"] = outcome.error
        job = outcome.job
        return _Step(
            job=job,
            what=outcome.to,
            call=lambda: finish(
                job.job_id,
                claim_id=job.claim_id,
                actor=self.worker_id,
                result_code=outcome.result_code,
                **kwargs,
            ),
            done=lambda: _holds(job, outcome.to),
        )

    def _commit(self, step: _Step | None) -> Exception | None:
        """Commit the carried outcome of the previous job and ``step`` in one transaction.

        One commit (one fsync) fewer per job: a job's outcome rides with the next job's begin.
        Each part is its own savepoint, so a refused part (a lost fence) never undoes the
        other. Returns the refusal of ``step``, or None when it took effect.
        """
        carry = self._carry
        if carry is None and step is None:
            return None
        refusals: dict[str, Exception | None] = {}

        def both() -> None:
            refusals.clear()
            with transaction.atomic():
                for key, part in (("carry", carry), ("step", step)):
                    if part is None:
                        continue
                    try:
                        part.call()
                        refusals[key] = None
                    except (InvalidTransition, ImmutableFieldDrift) as exc:
                        refusals[key] = exc

        # Both parts commit or neither does; ask about the one that defines "done".
        last = step if step is not None else carry
        assert last is not None
        self._db_step(both, done=last.done)
        self._carry = None
        if not refusals:  # the commit went through but its response was lost: assume success
            refusals = {"carry": None, "step": None}
        if carry is not None:
            self._settle_outcome(carry.what, carry.job, refusals.get("carry"))
        error = refusals.get("step") if step is not None else None
        if step is not None and error is not None:
            self.stats.lost += 1
            log.error("LOST FENCE: job %s could not %s: %s", step.job.job_id, step.what, error)
        return error

    def _settle_outcome(self, what: str, job: Job, error: Exception | None) -> None:
        if error is not None:
            self.stats.lost += 1
            log.error(
                "LOST FENCE: job %s ran but its outcome (%s) was refused: %s",
                job.job_id,
                what,
                error,
            )
        elif what == JobState.SUCCEEDED:
            self.stats.succeeded += 1
        elif what == JobState.FAILED:
            self.stats.failed += 1
        else:
            self.stats.unknown += 1

    def _flush(self) -> None:
        """Commit a carried outcome on its own (end of batch, stop)."""
        self._record_outcomes()
        if self._carry is not None:
            self._commit(None)

    def _authorize(self, job: Job, job_type: JobType | None) -> _Verdict:
        if job_type is None:
            return _Verdict(False, "UNKNOWN_JOB_TYPE", f"job type {job.job_type} is unknown", {})
        try:
            validate_job_document(job.payload)
        except JobValidationError as exc:
            return _Verdict(False, "SCHEMA_INVALID", str(exc), {})
        if not transitions.fingerprint_ok(job):
            # begin_job refuses it too (and records the drift); say why here.
            return _Verdict(True, "OK", "", {"schema": "ok"})
        detail: dict[str, Any] = {"schema": "ok", "fingerprint": job.fingerprint}
        if job_type.needs_approval:
            check = check_approval(job)
            if not check.ok:
                return _Verdict(False, check.code, check.why, {})
            detail.update(approval_id=job.approval_id, approval=check.why)
        return _Verdict(True, "OK", "", detail)

    def _run_handler(self, job: Job, job_type: JobType) -> tuple[str, str, dict[str, Any], str]:
        """(outcome state, result code, detail, error) — never raises."""
        try:
            result = job_type.handler(job)
        except DefiniteFailure as exc:
            return JobState.FAILED, exc.result_code, dict(exc.detail), str(exc)
        except Exception as exc:
            log.exception("job %s: handler %s raised", job.job_id, job_type.handler_path)
            error = f"{type(exc).__name__}: {exc}"
            if job_type.idempotent:
                # Safe to run again: a definite FAILED an operator may retry.
                return JobState.FAILED, "HANDLER_ERROR", {}, error
            return JobState.OUTCOME_UNKNOWN, "HANDLER_ERROR", {}, error
        if not isinstance(result, HandlerResult):
            result = HandlerResult()
        return JobState.SUCCEEDED, result.result_code, dict(result.detail), ""

    # --- database resilience ----------------------------------------------------------------

    def _db_step(self, step: Callable[[], Any], *, done: Callable[[], bool]) -> Any:
        """Run one transition, retrying on a dropped connection.

        The lost response may hide a commit, so before each retry ``done`` asks the database
        whether the step already took effect.
        """
        attempt = 0
        while True:
            try:
                return step()
            except DB_ERRORS as exc:
                attempt += 1
                self.stats.db_errors += 1
                log.warning("database error (attempt %d/%d): %s", attempt, self.db_retries, exc)
                self._drop_connection()
                if attempt >= self.db_retries:
                    self._db_trouble = True
                    raise
                time.sleep(min(self.poll, 1.0) * attempt)
                try:
                    if done():
                        return None
                except DB_ERRORS:
                    self._drop_connection()

    def _drop_connection(self) -> None:
        with contextlib.suppress(*DB_ERRORS):
            connection.close()

    def _release_orphans(self) -> None:
        """After a database error: hand back CLAIMED jobs of ours that we no longer track."""
        tracked = {job.job_id for job in self._pending}
        orphans = Job.objects.filter(worker_id=self.worker_id, state=JobState.CLAIMED).exclude(
            job_id__in=tracked
        )
        for job in orphans:
            try:
                transitions.release_job(
                    job.job_id,
                    claim_id=job.claim_id,
                    actor=self.worker_id,
                    reason="released after a database error",
                )
                self.stats.released += 1
            except InvalidTransition as exc:
                log.warning("job %s: orphan not released: %s", job.job_id, exc)

    # --- housekeeping -----------------------------------------------------------------------

    def _maybe_beat(self, *, force: bool = False, status: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_beat < self.poll:
            return
        self._last_beat = now
        workers.beat(
            worker_id=self.worker_id,
            current_job_id=self._current,
            jobs_done=self.stats.succeeded,
            jobs_failed=self.stats.not_ok,
            status=status,
        )

    def _sweep(self) -> None:
        try:
            report = transitions.recover_stale_claims_report(actor=self.worker_id)
        except InboxError as exc:
            log.warning("sweep failed: %s", exc)
            return
        self.stats.sweeps += 1
        if report.total or report.refused:
            self._say(f"sweep: {report.summary()}")

    def _maybe_progress(self) -> None:
        now = time.monotonic()
        last_at, last_n = self._last_progress
        if now - last_at < self.progress_seconds:
            return
        done = self.stats.processed
        rate = (done - last_n) / (now - last_at)
        overall = done / max(now - self.stats.started, 1e-9)
        self._say(
            f"progress: {self.stats.line()}; {rate:.1f} jobs/s over the last {now - last_at:.0f}s, "
            f"{overall:.1f} jobs/s overall"
        )
        self._last_progress = (now, done)

    def summary(self) -> str:
        elapsed = time.monotonic() - self.stats.started
        rate = self.stats.processed / max(elapsed, 1e-9)
        text = (
            f"executor {self.worker_id} stopped: {self.stats.line()} in {elapsed:.1f}s "
            f"({rate:.1f} jobs/s); released {self.stats.released}, "
            f"database errors {self.stats.db_errors}, sweeps {self.stats.sweeps}"
        )
        if self._stop_reason:
            text += f"; reason: {self._stop_reason}"
        return text

    def _say(self, text: str) -> None:
        self.out(f"[{self.worker_id}] {text}")

    def _shutdown(self) -> None:
        self._keeper.halt()
        pending = list(self._pending)
        self._pending.clear()
        try:
            self._flush()
            if pending:
                self._maybe_beat(force=True, status=WorkerStatus.STOPPING)
            for job in pending:
                self._keeper.drop(job.job_id)
                try:
                    self._db_step(
                        lambda job=job: transitions.release_job(
                            job.job_id,
                            claim_id=job.claim_id,
                            actor=self.worker_id,
                            reason=f"worker stopping ({self._stop_reason or 'exit'})",
                        ),
                        done=lambda job=job: _state_of(job) == JobState.READY,
                    )
                    self.stats.released += 1
                except InvalidTransition as exc:
                    log.warning("job %s not released: %s", job.job_id, exc)
            workers.mark_stopped(
                worker_id=self.worker_id,
                jobs_done=self.stats.succeeded,
                jobs_failed=self.stats.not_ok,
            )
        except DB_ERRORS as exc:
            log.error("could not hand back claims or mark the worker stopped: %s", exc)
        finally:
            self._keeper.join(timeout=max(self.lease_seconds, 5))
        self.out(self.summary())

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raw_stderr(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{text}\n".encode())


def _state_of(job: Job) -> str | None:
    return Job.objects.filter(job_id=job.job_id).values_list("state", flat=True).first()


def _holding(jobs: list[Job], states: dict[str, str]) -> set[str]:
    """Which of ``jobs`` are in their target state under our claim (a batch's commit check)."""
    if not jobs:
        return set()
    rows = Job.objects.filter(job_id__in=[j.job_id for j in jobs]).values_list(
        "job_id", "state", "claim_id"
    )
    claims = {j.job_id: j.claim_id for j in jobs}
    return {jid for jid, state, claim in rows if state == states[jid] and claim == claims[jid]}


def _holds(job: Job, state: str) -> bool:
    """Did our step commit although its response was lost? (state reached, claim still ours)"""
    return bool(_holding([job], {job.job_id: state}))
