"""The events of the job writer's moves, each shape defined once (for the statement that
writes them itself on PostgreSQL, and for Python everywhere else)."""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from audit.events import Event, PairedEvents, RowEvent
from audit.models import EventType
from inbox.models import Job
from inbox.writer.sql import iso_sql
from inbox.writer.values import EventsFor, Held, Move, Outcome, S

# The event that records each outcome state.
FINISH_EVENT = {
    S.SUCCEEDED: EventType.SUCCEEDED,
    S.FAILED: EventType.FAILED,
    S.OUTCOME_UNKNOWN: EventType.OUTCOME_UNKNOWN,
    # A failed attempt with a retry left (``schedule_retry``): back to the queue, deferred.
    S.READY: EventType.RETRY_SCHEDULED,
}


def transition_event(
    job: Job,
    event_type: str,
    actor: str,
    now: dt.datetime,
    frm: str,
    to: str,
    **detail: Any,
) -> Event:
    result_code = detail.pop("result_code", "")
    return Event(
        event_type=event_type,
        actor=actor,
        job_id=job.job_id,
        result_code=result_code,
        detail={"from": frm, "to": to, **detail},
        at=now,
    )


def from_state(before: Job | None, allowed: Sequence[str]) -> str:
    """The from-state of a moved row: as read under lock, or the only one allowed."""
    if before is not None:
        return before.state
    assert len(allowed) == 1, "a transition from several states must read its rows first"
    return allowed[0]


def moved_events(
    event_type: str,
    actor: str,
    to: str,
    allowed: Sequence[str],
    detail: Callable[[Job, Job | None], Mapping[str, Any]],
) -> EventsFor:
    """One transition event per moved job, from its state (``from_state``) to ``to``, with
    ``detail(job, before)`` beside it: the shape most operator and worker moves record."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        frm = from_state(before, allowed)
        return [transition_event(job, event_type, actor, now, frm, to, **detail(job, before))]

    return events


@dataclass(frozen=True)
class Shape:
    """One event's shape, defined once for both ways it is written: its type, the move it
    records, and each detail field as (key, its value from the moved row in Python, the same
    as SQL over the moved row ``r``). ``event`` builds it in Python; ``row_event`` gives the
    SQL that a PostgreSQL statement writes for each row it moves."""

    event_type: str
    frm: str
    to: str
    fields: tuple[tuple[str, Callable[[Job], Any], str], ...] = ()

    def event(self, job: Job, actor: str, now: dt.datetime, **extra: Any) -> Event:
        detail = {"from": self.frm, "to": self.to}
        detail.update((key, of_row(job)) for key, of_row, _sql in self.fields)
        detail.update(extra)
        return Event(self.event_type, actor, job_id=job.job_id, detail=detail, at=now)

    def row_event(self) -> RowEvent:
        pairs = [f"'from', '{self.frm}'", f"'to', '{self.to}'"]
        pairs += [f"'{key}', {sql}" for key, _of_row, sql in self.fields]
        return RowEvent(self.event_type, f"jsonb_build_object({', '.join(pairs)})")


CLAIMED = Shape(
    EventType.CLAIMED,
    S.READY,
    S.CLAIMED,
    (
        ("claim_id", operator.attrgetter("claim_id"), "r.claim_id"),
        ("attempt", operator.attrgetter("attempt_count"), "r.attempt_count"),
        ("lease_until", lambda job: job.lease_until.isoformat(), iso_sql("r.lease_until")),
    ),
)
STARTED = Shape(EventType.STARTED, S.CLAIMED, S.EXECUTING)
# AUTHORIZED carries the executor's checks of the job it begins (``begin_events``) ...
AUTHORIZED = Shape(EventType.AUTHORIZED, S.CLAIMED, S.EXECUTING)
# ... which, for a job it claims and begins in one write (an idempotent type that needs no
# approval), are its schema validated and its seal.
AUTHORIZED_AT_ONCE = Shape(
    EventType.AUTHORIZED,
    S.CLAIMED,
    S.EXECUTING,
    (
        ("schema", lambda _job: "ok", "'ok'"),
        ("fingerprint", operator.attrgetter("fingerprint"), "r.fingerprint"),
    ),
)
# What ``claim_and_begin_jobs`` records for each job, in order.
CLAIM_AND_BEGIN = (CLAIMED, STARTED, AUTHORIZED_AT_ONCE)


def claim_events(worker_id: str) -> EventsFor:
    """CLAIMED: what a claim records."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [CLAIMED.event(job, worker_id, now)]

    return events


def claim_and_begin_events(worker_id: str) -> EventsFor:
    """CLAIMED, STARTED and AUTHORIZED: what a claim that begins at once records."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [shape.event(job, worker_id, now) for shape in CLAIM_AND_BEGIN]

    return events


def begin_events(actor: str, authorized: Callable[[str], Mapping[str, Any] | None]) -> EventsFor:
    """STARTED, and AUTHORIZED with the executor's checks: what a begin records."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        out = [STARTED.event(job, actor, now)]
        checks = authorized(job.job_id)
        if checks is not None:
            out.append(AUTHORIZED.event(job, actor, now, **checks))
        return out

    return events


def outcome_details(o: Outcome) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """What an outcome records, in the one form both ways of writing it use: EXECUTED's result
    code and detail (None: no EXECUTED, the outcome carries no ``executed_detail``) and the
    outcome event's detail (its result code is the outcome's)."""
    second = dict(o.detail or {})
    if o.error:
        second["error"] = o.error
    if o.executed_detail is None:
        return "", None, second
    first = dict(o.executed_detail)
    return first.pop("result_code", o.result_code), first, second


def outcome_events(actor: str, outcomes: Mapping[str, Outcome]) -> EventsFor:
    """The outcome event, preceded by EXECUTED when the outcome carries ``executed_detail``:
    EXECUTED (the mutation was attempted) commits with its outcome, never alone."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        o = outcomes[job.job_id]
        first_code, first, second = outcome_details(o)
        if o.to == S.READY:
            second.update(
                attempt=job.attempt_count,
                retry_in_s=round(o.retry_in or 0.0, 3),
                run_after=job.run_after.isoformat() if job.run_after else None,
            )
        moved = {"from": S.EXECUTING, "to": o.to}
        out = [
            Event(
                FINISH_EVENT[o.to], actor, job.job_id, None, o.result_code, {**moved, **second}, now
            )
        ]
        if first is not None:
            out.insert(
                0,
                Event(
                    EventType.EXECUTED, actor, job.job_id, None, first_code, {**moved, **first}, now
                ),
            )
        return out

    return events


def _job_event(
    event_type: str,
    actor: str,
    job: Job,
    code: str,
    detail: dict[str, Any],
    now: dt.datetime | None,
) -> Event:
    return Event(event_type, actor, job.job_id, None, code, detail, now)


def outcome_pairs(
    actor: str, to: str, outcomes: Mapping[str, Outcome]
) -> Callable[[Sequence[Held]], PairedEvents]:
    """``outcome_events`` in the compact form the statement writes on PostgreSQL (a ``Move``'s
    ``paired``), for an outcome other than a retry (whose event needs the row after the
    write): the same events with the same details (``test_turn`` compares them)."""
    if to == S.READY:
        raise ValueError("a retry's events are built from the row after the write")

    def pairs(held: Sequence[Held]) -> PairedEvents:
        rows = []
        for item in held:
            o = outcomes[item.job_id]
            first_code, first, second = outcome_details(o)
            rows.append((item.job_id, first_code, first, o.result_code, second))
        return PairedEvents(actor, S.EXECUTING, EventType.EXECUTED, FINISH_EVENT[to], rows)

    return pairs


def recovery_events(actor: str, to: str) -> EventsFor:
    def detail(job: Job, before: Job | None) -> dict[str, Any]:
        assert before is not None
        return {
            "result_code": "MAX_ATTEMPTS" if to == S.FAILED else "LEASE_EXPIRED",
            "claim_id": before.claim_id,
            "worker_id": before.worker_id,
            "lease_until": before.lease_until.isoformat() if before.lease_until else None,
            "attempt": before.attempt_count,
        }

    return moved_events(EventType.LEASE_EXPIRED, actor, to, (), detail)


def reported_outcome(o: Outcome) -> dict[str, Any]:
    """What a holder reported, in the form its outcome events would have recorded it
    (``outcome_details``): the state it asked for, its result code, the outcome's detail (its
    error included) and, when it carried one, EXECUTED's detail (what its handler did)."""
    first_code, first, second = outcome_details(o)
    reported: dict[str, Any] = {"to": o.to, "result_code": o.result_code, "detail": second}
    if first is not None:
        reported["executed"] = {"result_code": first_code, **first}
    if o.retry_in is not None:
        reported["retry_in_s"] = round(o.retry_in, 3)
    return reported


def stale_write_event(job: Job, item: Held, move: Move) -> Event:
    """STALE_WRITE_REJECTED: a holder's write refused because its claim is no longer its own
    (``job`` as stored now). A refused outcome also carries what the holder reported
    (``Move.reported``) and, when its claim is still on the row (the sweep moved the job
    after its lease lapsed), the attempt that claim was."""
    claim_id = item.claim_id or ""
    detail: dict[str, Any] = {
        "state": job.state,
        "to": move.to or job.state,
        "claim_id": claim_id,
        "current_claim_id": job.claim_id,
        "current_worker_id": job.worker_id,
    }
    if move.reported is not None:
        if job.claim_id == claim_id:
            detail["attempt"] = job.attempt_count
        detail["reported"] = move.reported(item)
    return _job_event(
        EventType.STALE_WRITE_REJECTED, move.actor, job, "LOST_CLAIM", detail, move.at
    )


def drift_event(job: Job, to: str, actor: str, current: str, at: dt.datetime | None) -> Event:
    """FINGERPRINT_DRIFT: a transition to ``to`` refused because the sealed fields changed."""
    detail = {"state": job.state, "to": to, "sealed": job.fingerprint, "current": current}
    return _job_event(EventType.FINGERPRINT_DRIFT, actor, job, "FINGERPRINT_DRIFT", detail, at)
