from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from django.db import connection, transaction

from core.clock import db_now
from inbox.errors import InvalidTransition
from inbox.jobtypes import registry
from inbox.models import Job
from inbox.writer.claims import BatchClaim, claim_and_begin_move
from inbox.writer.engine import run, run_moves
from inbox.writer.events import FINISH_EVENT, outcome_events, outcome_pairs, reported_outcome
from inbox.writer.rows import lock_jobs
from inbox.writer.values import (
    CLEARED_CLAIM,
    BatchDrift,
    Held,
    Move,
    Moved,
    Outcome,
    S,
    undone_batch,
)


def finish_and_claim_jobs(
    outcomes: Sequence[Outcome], **claim: Unpack[BatchClaim]
) -> tuple[Moved, list[Job]]:
    """The executor's turn as one write: its ``outcomes`` recorded (``finish_jobs``) and the
    next batch claimed and begun (``claim_and_begin_jobs``, whose arguments ``claim`` are), in
    the caller's transaction with no savepoint of its own; refusals raise ``BatchRefused`` as
    there.

    On PostgreSQL, outcomes that are all one final state and code (the usual turn: every job
    SUCCEEDED) and the claim are one statement — one round trip for the whole turn; other
    outcomes (a retry, a mix) are recorded first, then the claim is made.
    """
    move = claim_and_begin_move(claim)
    worker_id, at = claim["worker_id"], claim.get("at")
    if not outcomes:
        return Moved(), run_moves([move])[0].jobs
    groups = _outcome_groups(outcomes)
    to, result_code, error, _retry_in = next(iter(groups))
    if connection.vendor != "postgresql" or len(groups) > 1 or to == S.READY:
        finished = finish_jobs(outcomes, actor=worker_id, savepoint=False, at=at)
        return finished, run_moves([move])[0].jobs
    by_id = {o.job.job_id: o for o in outcomes}
    finishing = _outcome_move(
        [Held.of(o.job) for o in outcomes],
        to,
        worker_id,
        by_id,
        values=_outcome_values(result_code, error),
        fail_closed=True,
        savepoint=False,
        full=False,
        at=at,
        paired=outcome_pairs(worker_id, to, by_id),
    )
    finished, claimed = run_moves([finishing, move])
    return finished, claimed.jobs


def _outcome_values(result_code: str, error: str) -> dict[str, Any]:
    """What an outcome's UPDATE assigns besides the state."""
    values: dict[str, Any] = {"result_code": result_code, "lease_until": None}
    if error:
        values["last_error"] = error
    return values


def _outcome_move(
    held: list[Held], to: str, actor: str, by_id: Mapping[str, Outcome], **how: Any
) -> Move:
    """A holder's outcomes as a ``Move`` from EXECUTING, fenced by its claim, with the events
    they record and what the holder reported: a report that comes too late (the claim lost,
    or the lease lapsed and the sweep moved the job) is recorded with its refusal. ``how``:
    the rest of the ``Move``'s fields."""
    return Move(
        held,
        to,
        (S.EXECUTING,),
        actor,
        outcome_events(actor, by_id),
        fence="holder",
        events_ahead=True,
        reported=lambda item: reported_outcome(by_id[item.job_id]),
        **how,
    )


def _finish(
    outcomes: Sequence[Outcome],
    *,
    actor: str,
    fail_closed: bool,
    full: bool,
    held: Callable[[Outcome], Held],
    at: dt.datetime | None,
    savepoint: bool = True,
) -> Moved:
    groups = _outcome_groups(outcomes)
    by_id = {o.job.job_id: o for o in outcomes}
    result = Moved()
    # One UPDATE per distinct outcome, usually one; several share one transaction and clock.
    several = len(groups) > 1
    with transaction.atomic(savepoint=savepoint) if several else contextlib.nullcontext():
        now = db_now(at) if several else at
        parts: dict[str, Moved] = {}
        for (to, result_code, error, retry_in), group in groups.items():
            values = _outcome_values(result_code, error)
            retry = _retry_guard(group, values, retry_in) if to == S.READY else {}
            if to != S.READY:
                retry["paired"] = outcome_pairs(actor, to, by_id)
            part = run(
                _outcome_move(
                    [held(o) for o in group],
                    to,
                    actor,
                    by_id,
                    values=retry.pop("values", values),
                    fail_closed=fail_closed,
                    savepoint=savepoint,
                    full=full,
                    at=now,
                    **retry,
                )
            )
            for job in part.jobs:
                parts[job.job_id] = part
            result.refused.update(part.refused)
    for o in outcomes:
        job_id = o.job.job_id
        if job_id in parts:
            result.add(job_id)
            result.jobs.extend(j for j in parts[job_id].jobs if j.job_id == job_id)
    return result


def _outcome_groups(
    outcomes: Sequence[Outcome],
) -> dict[tuple[str, str, str, float | None], list[Outcome]]:
    """The outcomes by what their UPDATE assigns (one UPDATE each), checked."""
    groups: dict[tuple[str, str, str, float | None], list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.to not in FINISH_EVENT or (outcome.to == S.READY) != (
            outcome.retry_in is not None
        ):
            raise ValueError(f"not an outcome state: {outcome.to} (retry_in={outcome.retry_in})")
        if outcome.retry_in is not None and not 0 <= outcome.retry_in < 10**7:
            raise ValueError(f"retry_in must be from 0 to 10^7 seconds, got {outcome.retry_in}")
        key = (outcome.to, outcome.result_code, outcome.error, outcome.retry_in)
        groups.setdefault(key, []).append(outcome)
    return groups


def _retry_guard(
    group: Sequence[Outcome], values: dict[str, Any], retry_in: float | None
) -> dict[str, Any]:
    """What a retry's ``Move`` adds: the claim cleared, ``run_after`` from the database clock,
    and the guard that only an idempotent type is ever sent back (a non-idempotent job is never
    retried blindly), checked on the rows read under lock."""
    delay = dt.timedelta(seconds=retry_in or 0.0)
    ids = [o.job.job_id for o in group]

    def check(job: Job, _now: dt.datetime) -> None:
        job_type = registry().get(job.job_type)
        if job_type is None or not job_type.idempotent:
            raise InvalidTransition(
                job.job_id, job.state, S.READY, "a non-idempotent job is never retried blindly"
            )

    return {
        "values": lambda now: {**values, **CLEARED_CLAIM, "run_after": now + delay},
        "prior": lambda: lock_jobs(ids),
        "check": check,
    }


def finish_jobs(
    outcomes: Sequence[Outcome],
    *,
    actor: str,
    savepoint: bool = True,
    at: dt.datetime | None = None,
) -> Moved:
    """EXECUTING → SUCCEEDED / FAILED / OUTCOME_UNKNOWN for a holder's batch, each outcome
    committed with its EXECUTED event (one UPDATE per distinct outcome, usually one); an
    outcome to READY with ``retry_in`` is a retry (see ``schedule_retry``).

    Fail closed like ``begin_jobs``; the copies in the outcomes are updated in place. With
    ``savepoint=False`` it runs in the caller's transaction with no savepoint of its own and
    a drift raises ``BatchRefused`` out of it (the caller's rollback undoes the batch).
    """
    try:
        return _finish(
            outcomes,
            actor=actor,
            fail_closed=len(outcomes) > 1 or not savepoint,
            full=False,
            held=lambda o: Held.of(o.job),
            at=at,
            savepoint=savepoint,
        )
    except BatchDrift as exc:
        if not savepoint:
            raise
        return undone_batch([o.job for o in outcomes], exc)


class Success(TypedDict, total=False):
    """What a holder may report with a success besides its code."""

    detail: Mapping[str, Any] | None
    executed_detail: Mapping[str, Any] | None
    at: dt.datetime | None


class Report(Success, total=False):
    """What a holder may report with any other outcome: a success's details and the error."""

    error: str


def _finish_one(
    job_id: str,
    *,
    to: str,
    claim_id: str,
    actor: str,
    result_code: str,
    retry_in: float | None = None,
    **report: Unpack[Report],
) -> Job:
    stub = Job(job_id=job_id, claim_id=claim_id)
    outcome = Outcome(
        stub,
        to,
        result_code,
        report.get("error", ""),
        report.get("executed_detail"),
        report.get("detail"),
        retry_in,
    )
    return _finish(
        [outcome],
        actor=actor,
        fail_closed=False,
        full=True,
        held=lambda o: Held(o.job.job_id, o.job.claim_id),
        at=report.get("at"),
    ).one()


def complete_job(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "OK",
    **report: Unpack[Success],
) -> Job:
    """EXECUTING → SUCCEEDED (with ``executed_detail``: and EXECUTED, in one transaction)."""
    return _finish_one(
        job_id, to=S.SUCCEEDED, claim_id=claim_id, actor=actor, result_code=result_code, **report
    )


def fail_job(
    job_id: str, *, claim_id: str, actor: str, result_code: str, **report: Unpack[Report]
) -> Job:
    """EXECUTING → FAILED: the mutation certainly did not happen."""
    return _finish_one(
        job_id, to=S.FAILED, claim_id=claim_id, actor=actor, result_code=result_code, **report
    )


def mark_outcome_unknown(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    result_code: str = "UNKNOWN",
    **report: Unpack[Report],
) -> Job:
    """EXECUTING → OUTCOME_UNKNOWN: the handler could not tell whether the mutation happened."""
    to = S.OUTCOME_UNKNOWN
    return _finish_one(
        job_id, to=to, claim_id=claim_id, actor=actor, result_code=result_code, **report
    )


def schedule_retry(
    job_id: str,
    *,
    claim_id: str,
    actor: str,
    retry_in: float,
    result_code: str,
    **report: Unpack[Report],
) -> Job:
    """EXECUTING → READY: a failed attempt of an idempotent job with a retry left goes back to
    the queue and is not claimed before the database time plus ``retry_in`` seconds
    (``run_after``). The attempt stays counted; RETRY_SCHEDULED records it (with EXECUTED when
    ``executed_detail`` is given). A non-idempotent job is refused: it is never retried blindly.
    ``report``: the ``error``, ``detail``, ``executed_detail`` and ``at`` of any outcome.
    """
    return _finish_one(
        job_id,
        to=S.READY,
        claim_id=claim_id,
        actor=actor,
        result_code=result_code,
        retry_in=retry_in,
        **report,
    )
