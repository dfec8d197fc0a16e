"""The executor: claim → authorize → begin → run → record, for one scope.

A ``WorkerLoop`` (heartbeat, signals, progress, database-error backoff come from
``inbox.loop``); every job change goes through ``inbox.transitions``. Started by
``manage.py run_executor`` (which parses arguments); tests may run it in-process. Its parts
live in ``inbox.execution``: the configuration and counters, the lease keeper, the checks
before a begin, the two claim strategies, the read-back of a lost response.

One turn path for every job type: commit the outcomes waiting, claim up to ``batch`` jobs and
begin those that may begin at once, all in one transaction (how: the claim strategy, see
``inbox.execution.claim``), run them, then work the rest in chunks. A chunk is the leading run
of jobs of idempotent types that need no approval (NOOP, SAVE) — a crash between their begin
and their handler leaves them EXECUTING, which the sweep returns to READY exactly like
CLAIMED, so beginning them together changes no guarantee — or a single job of any other type
(a DELETE is a batch of one: never begun before the job in hand finished). Per chunk: each job
is authorized (schema, fingerprint, and for approval types the approval re-check); the chunk
begins in one transaction (``begin_jobs``: CLAIMED → EXECUTING with AUTHORIZED, leases
renewed), its handlers run one after the other outside any transaction, and their outcomes
(``finish_jobs``, EXECUTED with the outcome) commit together with the next chunk's begin or
the next claim — one commit fewer per chunk — or at the latest every ``OUTCOME_FLUSH_SECONDS``
and at the end. ``--one-by-one`` makes every chunk a batch of one.

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
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from django.db import transaction

from core import logs
from inbox import scopes as scope_service
from inbox import transitions
from inbox.dbcheck import describe_database
from inbox.errors import ConfigurationError, InboxError
from inbox.execution.claim import ClaimAndBegin, ClaimRequest, ClaimThenBegin
from inbox.execution.handling import Verdict, authorize, batchable_type, run_handler
from inbox.execution.keeper import LeaseKeeper
from inbox.execution.settings import ExecutorConfig, ExecutorStats
from inbox.execution.steps import as_moved, begin_any, finish_any, holding
from inbox.jobtypes import registry, retry_delay, scopes, task_queues
from inbox.loop import DB_ERRORS, WorkerLoop
from inbox.models import Job, JobState, WorkerStatus
from inbox.selectors import any_lease_lapsed
from inbox.transitions import Held, Moved, Outcome

__all__ = ["OUTCOME_FLUSH_SECONDS", "Executor", "ExecutorConfig", "ExecutorStats"]

log = logging.getLogger("inbox.executor")

# A chunk of slow handlers records its finished jobs at least this often.
OUTCOME_FLUSH_SECONDS = 1.0


class Executor(WorkerLoop):
    """One executor process's loop for one scope. ``run()`` returns its stats."""

    kind = "executor"

    def __init__(
        self,
        config: ExecutorConfig | None = None,
        /,
        *,
        out: Callable[[str], None] = print,
        **options: Any,
    ) -> None:
        """Take an ``ExecutorConfig``, or its fields as keywords (``scope=…, batch=…``)."""
        self.config = config = config or ExecutorConfig(**options)
        super().__init__(
            worker_id=config.worker_id,
            scope=config.scope,
            poll_seconds=config.poll_seconds,
            lease_seconds=int(config.lease_seconds),
            progress_seconds=config.progress_seconds,
            out=out,
        )
        self.db_retries = max(config.db_retries, 1)
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
        self._keeper = LeaseKeeper(worker_id=self.worker_id, lease_seconds=self.lease_seconds)
        self._one_update = ClaimAndBegin(possible=False)  # decided in ``setup``
        self._stepwise = ClaimThenBegin()

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
        self._one_update = ClaimAndBegin(
            possible=self.config.batch_steps
            and any(
                batchable_type(t)
                and (
                    t.scope == self.scope if t.scope_field is None else self.scope in task_queues()
                )
                for t in registry().values()
            )
        )
        self._keeper.start()
        return (
            f"scope={self.scope} lease={self.lease_seconds}s batch={self.config.batch} "
            f"({'batched' if self.config.batch_steps else 'one-by-one'} steps) poll={self.poll}s "
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
        if self.config.sweep_every and self._turns % self.config.sweep_every == 0:
            self._sweep()
        # Jobs left over from a turn a database error cut short are already ours: run them
        # first, paused or not (a pause stops claiming, not the work in hand).
        if not self._pending:
            limit = self._claim_limit()
            if limit <= 0:
                self._record()
                return False
            jobs, begun = self._claim_next(limit)
            if not jobs:
                if self.config.exit_when_idle:
                    return False
                self.wait(self.poll)
                return True
            self._run(begun)
        while self._pending and not self.stopping:
            self._work(self._next_chunk())
        # The outcomes commit with the next turn's claim (or on the way out: ``finish``).
        return self._claim_limit() > 0

    def finish(self) -> None:
        """Commit what ran, hand back what was claimed but not begun, stop the keeper."""
        self._keeper.halt()
        pending = list(self._pending)
        self._pending.clear()
        try:
            self._record()
            if pending:
                self.beat(status=WorkerStatus.STOPPING)
                self._release(pending, f"worker stopping ({self.stop_reason or 'exit'})")
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

    # --- the claim --------------------------------------------------------------------------

    def _claim_limit(self) -> int:
        """How many jobs the next claim may take: the batch, less what ``max_jobs`` has left
        (the outcomes not yet committed count as done)."""
        limit = self.config.batch
        if self.config.max_jobs is not None:
            done = self.stats.processed + len(self._unrecorded)
            limit = min(limit, self.config.max_jobs - done)
        return limit

    def _claim_next(self, limit: int) -> tuple[list[Job], list[Job]]:
        """Claim with the one-UPDATE strategy when it is worth trying, else (or when it missed)
        step by step; (claimed, begun). A paused scope claims nothing."""
        if self._one_update.worth_trying(pause_said=self._paused_said):
            claimed = self._claim(self._one_update.write, limit)
            if claimed is not None:
                if not claimed[0]:
                    # An empty claim does not say why: a new pause is said once, then the
                    # step-by-step turns wait on it and say when it ends.
                    self._paused()
                return claimed
        if self._paused():
            self._record()
            return [], []
        return self._claim(self._stepwise.write, limit) or ([], [])

    def _claim(
        self, write: Callable[[ClaimRequest], Any], limit: int
    ) -> tuple[list[Job], list[Job]] | None:
        """One transaction: the outcomes waiting, the claim and the begin ``write`` makes.
        Returns (claimed, begun), the claimed jobs not begun waiting in ``_pending``; None when
        the strategy could not go as one (nothing of it was kept)."""
        outcomes = self._hand_over()
        targets = {o.job.job_id: o.to for o in outcomes}
        outcome_jobs = [o.job for o in outcomes]
        request = ClaimRequest(
            outcomes, self.scope, self.worker_id, self.lease_seconds, limit, self._may_begin_now
        )
        result = self._step(
            lambda: write(request), committed=lambda: holding(outcome_jobs, targets)
        )
        if result is None:
            return None
        self._unrecorded = []
        if isinstance(result, set):
            # The response was lost after the commit: the outcomes are in; what we claimed is
            # unknown (it lapses and the sweep offers it again, never run twice: the jobs it
            # may have begun are idempotent).
            self._settle(outcomes, as_moved(result, outcomes))
            self._db_trouble = True
            return [], []
        self._settle(outcomes, result.finished)
        self._keeper.hold(result.jobs)
        if len(result.begun) < len(result.jobs):
            begun = {job.job_id for job in result.begun}
            self._pending.extend(job for job in result.jobs if job.job_id not in begun)
        return result.jobs, result.begun

    def _may_begin_now(self, job: Job, seal_checked: bool) -> Verdict | None:
        """The checks of a claimed job that may begin with its claim; None for one that may
        not (it gets a chunk of its own)."""
        job_type = registry().get(job.job_type)
        if job_type is None or not self.config.batch_steps or not batchable_type(job_type):
            return None
        return authorize(job, job_type, seal_checked=seal_checked)

    # --- one chunk --------------------------------------------------------------------------

    def _batchable(self, job: Job) -> bool:
        job_type = registry().get(job.job_type)
        return self.config.batch_steps and job_type is not None and batchable_type(job_type)

    def _next_chunk(self) -> list[Job]:
        """The leading run of batchable pending jobs, or the one job at the head."""
        chunk = [self._pending.popleft()]
        if self._batchable(chunk[0]):
            while self._pending and self._batchable(self._pending[0]):
                chunk.append(self._pending.popleft())
        return chunk

    def _run(self, begun: list[Job]) -> None:
        """Run the handlers of a begun chunk one after the other; keep their outcomes."""
        recorded_at = time.monotonic()
        for job in begun:
            self._current = job.job_id
            # The handler's log records carry the job and its claim.
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
            verdict = authorize(job, registry().get(job.job_type))
            if not verdict.ok:
                self._keeper.drop(job.job_id)
                self._reject(job, verdict)
                continue
            ready.append(job)
            authorized[job.job_id] = verdict.detail
        self._run(self._begin(ready, authorized))

    def _reject(self, job: Job, verdict: Verdict) -> None:
        try:
            self._step(
                lambda: transitions.reject_job(
                    job.job_id,
                    actor=self.worker_id,
                    reason=verdict.why,
                    result_code=verdict.code,
                    claim_id=job.claim_id,
                ),
                committed=lambda: bool(holding([job], {job.job_id: JobState.REJECTED})),
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
        actor, lease = self.worker_id, self.lease_seconds

        def both() -> tuple[Moved, Moved]:
            # One transaction for both steps; a lone step needs no outer one (no savepoint).
            with transaction.atomic() if outcomes and ready else contextlib.nullcontext():
                finished = finish_any(outcomes, actor=actor)
                begun = begin_any(ready, actor=actor, lease_seconds=lease, authorized=authorized)
            return finished, begun

        jobs = [*ready, *(o.job for o in outcomes)]
        result = self._step(both, committed=lambda: holding(jobs, targets))
        if isinstance(result, set):  # a lost response after the commit: read back what moved
            finished, begun = as_moved(result, outcomes), as_moved(result, ready)
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
            lambda: begin_any(
                [job],
                actor=self.worker_id,
                lease_seconds=self.lease_seconds,
                authorized={job.job_id: checks},
            ),
            committed=lambda: holding([job], {job.job_id: JobState.EXECUTING}),
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
        to, code, detail, error = run_handler(job, job_type)
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        executed = {"handler": job_type.handler_path, "duration_ms": elapsed_ms, **detail}
        # A failure with a retry left (idempotent types only) goes back to the queue, deferred.
        retry_in = retry_delay(job, job_type) if to == JobState.FAILED else None
        if retry_in is not None:
            return Outcome(job, JobState.READY, code, error, executed, retry_in=retry_in)
        return Outcome(job, to, code, error, executed)

    # --- recording outcomes -----------------------------------------------------------------

    def _hand_over(self) -> list[Outcome]:
        """The outcomes to commit now, taken from the lease keeper (under its lock, so no
        renewal races the commit). An outcome whose claim the keeper lost meanwhile still goes
        to the writer: the guarded write refuses it and records what this holder reported, the
        evidence an operator reconciling the job needs (``_settle`` logs the refusal)."""
        for outcome in self._unrecorded:
            self._keeper.drop(outcome.job.job_id)
        return self._unrecorded

    def _record(self) -> None:
        """Commit the waiting outcomes in one transaction (end of turn, slow chunk, stop)."""
        outcomes = self._hand_over()
        if not outcomes:
            return
        targets = {o.job.job_id: o.to for o in outcomes}
        jobs = [o.job for o in outcomes]
        moved = self._step(
            lambda: transitions.finish_jobs(outcomes, actor=self.worker_id),
            committed=lambda: holding(jobs, targets),
        )
        self._unrecorded = []
        self._settle(outcomes, as_moved(moved, outcomes) if not isinstance(moved, Moved) else moved)

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

    def _release(self, jobs: list[Job], reason: str) -> None:
        """Hand ``jobs`` (claimed, not begun) back to the queue and stop renewing them."""
        for job in jobs:
            self._keeper.drop(job.job_id)
        moved = self._step(
            lambda: transitions.release_jobs(
                [Held.of(job) for job in jobs], actor=self.worker_id, reason=reason
            ),
            committed=lambda: holding(jobs, {j.job_id: JobState.READY for j in jobs}),
        )
        self.stats.released += len(moved)
        for job_id, exc in getattr(moved, "refused", {}).items():
            log.warning("job %s not released: %s", job_id, exc)

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
