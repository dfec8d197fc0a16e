"""How a turn claims: the one difference between the executor's turns, as two strategies.

A turn is always the same path (``inbox.executor``): commit the outcomes waiting, claim up to
a limit, begin the claimed jobs that may begin at once, run them, then work the rest chunk by
chunk. Each strategy writes the first three in one transaction and says what it claimed and
what began:

- ``ClaimAndBegin``: one UPDATE claims and begins (``finish_and_claim_jobs``), with the
  executor's checks asked of each row before the commit. One job that may not begin at once (a
  DELETE, a non-idempotent task), fails its checks or has a drifted seal undoes the whole try
  (nothing kept) and the turn claims with the other strategy, which refuses and records each
  such job on its own; after such a miss the next 2, 4 … 64 turns do not try, so a queue that
  mixes in such jobs pays the failed try rarely.
- ``ClaimThenBegin``: the claim (``claim_next_jobs``), then the begin of its leading run of
  jobs that may begin at once and pass their checks; the others wait for a chunk of their own.

Claim and begin commit together only for jobs that may begin at once (idempotent, no approval
to re-check): a crash after the commit leaves them EXECUTING, which the sweep treats exactly
like CLAIMED for these types. One commit per batch instead of three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from inbox import transitions
from inbox.execution.handling import Verdict
from inbox.execution.steps import begin_any, finish_any
from inbox.models import Job
from inbox.transitions import Moved, Outcome

# The executor's checks of a claimed job that may begin with its claim (the seal already
# checked by the writer when True); None for a job that may not (it gets a chunk of its own).
Check = Callable[[Job, bool], Verdict | None]

# The longest run of turns that skip ``ClaimAndBegin`` after it missed.
MAX_SKIP = 64


@dataclass(frozen=True)
class ClaimRequest:
    """One turn's claim: the outcomes that commit with it, who claims, and how many."""

    outcomes: list[Outcome]
    scope: str
    worker_id: str
    lease_seconds: int
    limit: int
    check: Check


@dataclass(frozen=True)
class Claimed:
    """What a claim committed: the outcomes recorded, the jobs claimed, the ones begun."""

    finished: Moved
    jobs: list[Job]
    begun: list[Job]


class ClaimAndBegin:
    """The whole turn's writes as one UPDATE; see the module docstring."""

    def __init__(self, *, possible: bool) -> None:
        # False for a scope no job that may begin at once can land in, or one-by-one mode.
        self.possible = possible
        self._misses = 0
        self._skip = 0

    def worth_trying(self, *, pause_said: bool) -> bool:
        """Not while a pause is being waited on (the other strategy's turn checks it and says
        when it ends), nor for some turns after a miss."""
        if not self.possible or pause_said:
            return False
        if self._skip:
            self._skip -= 1
            return False
        return True

    def write(self, request: ClaimRequest) -> Claimed | None:
        """Claimed and begun as one, or None when the batch could not go as one."""

        def authorize(job: Job) -> bool:
            verdict = request.check(job, True)
            return verdict is not None and verdict.ok

        try:
            with transaction.atomic():
                finished, jobs = transitions.finish_and_claim_jobs(
                    request.outcomes,
                    scope=request.scope,
                    worker_id=request.worker_id,
                    lease_seconds=request.lease_seconds,
                    limit=request.limit,
                    authorize=authorize,
                )
        except transitions.BatchRefused:
            self._misses += 1
            self._skip = min(2**self._misses, MAX_SKIP)
            return None
        self._misses = 0
        return Claimed(finished, jobs, jobs)


class ClaimThenBegin:
    """The claim, then the begin of its leading run; see the module docstring."""

    def write(self, request: ClaimRequest) -> Claimed:
        actor, lease = request.worker_id, request.lease_seconds
        with transaction.atomic():
            finished = finish_any(request.outcomes, actor=actor)
            jobs = transitions.claim_next_jobs(
                scope=request.scope, worker_id=actor, lease_seconds=lease, limit=request.limit
            )
            ready, authorized = _leading_run(jobs, request.check)
            begun = begin_any(ready, actor=actor, lease_seconds=lease, authorized=authorized)
        started = [] if begun.undone else [job for job in jobs if job.job_id in begun]
        return Claimed(finished, jobs, started)


def _leading_run(jobs: list[Job], check: Check) -> tuple[list[Job], dict[str, dict[str, Any]]]:
    """The leading jobs that may begin at once and pass their checks, with what they passed;
    the first that may not ends the run (its own chunk rejects it, with its reason)."""
    ready: list[Job] = []
    authorized: dict[str, dict[str, Any]] = {}
    for job in jobs:
        verdict = check(job, False)
        if verdict is None or not verdict.ok:
            break
        ready.append(job)
        authorized[job.job_id] = verdict.detail
    return ready, authorized
