from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from audit.events import Event, PairedEvents, RowEvent
from audit.models import EventType
from inbox.models import Job
from inbox.writer.sql import iso_sql
from inbox.writer.values import EventsFor, Held, Outcome, S

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


def claim_events(worker_id: str) -> EventsFor:
    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        return [
            transition_event(
                job,
                EventType.CLAIMED,
                worker_id,
                now,
                S.READY,
                S.CLAIMED,
                claim_id=job.claim_id,
                attempt=job.attempt_count,
                lease_until=job.lease_until.isoformat(),
            )
        ]

    return events


def authorized_checks(job: Job) -> dict[str, Any]:
    """What AUTHORIZED records for a job the executor checked and may begin at once: its
    schema validated and its seal (approval types add the approval; see the executor)."""
    return {"schema": "ok", "fingerprint": job.fingerprint}


# CLAIMED, STARTED and AUTHORIZED as SQL over the claimed row (``claim_and_begin_jobs`` on
# PostgreSQL): the same details ``claim_events``, ``begin_events`` and ``authorized_checks``
# build in Python.
CLAIM_AND_BEGIN_EVENTS = (
    RowEvent(
        EventType.CLAIMED,
        "jsonb_build_object('from', 'READY', 'to', 'CLAIMED', 'claim_id', r.claim_id, "
        f"'attempt', r.attempt_count, 'lease_until', {iso_sql('r.lease_until')})",
    ),
    RowEvent(EventType.STARTED, "jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING')"),
    RowEvent(
        EventType.AUTHORIZED,
        "jsonb_build_object('from', 'CLAIMED', 'to', 'EXECUTING', 'schema', 'ok', "
        "'fingerprint', r.fingerprint)",
    ),
)


def begin_events(actor: str, authorized: Callable[[str], Mapping[str, Any] | None]) -> EventsFor:
    """STARTED, and AUTHORIZED with the executor's checks: what a begin records."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        out = [transition_event(job, EventType.STARTED, actor, now, S.CLAIMED, S.EXECUTING)]
        checks = authorized(job.job_id)
        if checks is not None:
            out.append(
                transition_event(
                    job, EventType.AUTHORIZED, actor, now, S.CLAIMED, S.EXECUTING, **checks
                )
            )
        return out

    return events


def outcome_events(actor: str, outcomes: Mapping[str, Outcome]) -> EventsFor:
    """The outcome event, preceded by EXECUTED when the outcome carries ``executed_detail``:
    EXECUTED (the mutation was attempted) commits with its outcome, never alone."""

    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        o = outcomes[job.job_id]
        extra = dict(o.detail or {})
        if o.error:
            extra["error"] = o.error
        if o.to == S.READY:
            extra.update(
                attempt=job.attempt_count,
                retry_in_s=round(o.retry_in or 0.0, 3),
                run_after=job.run_after.isoformat() if job.run_after else None,
            )
        out = [
            transition_event(
                job,
                FINISH_EVENT[o.to],
                actor,
                now,
                S.EXECUTING,
                o.to,
                result_code=o.result_code,
                **extra,
            )
        ]
        if o.executed_detail is not None:
            executed = dict(o.executed_detail)
            executed.setdefault("result_code", o.result_code)
            out.insert(
                0,
                transition_event(
                    job, EventType.EXECUTED, actor, now, S.EXECUTING, o.to, **executed
                ),
            )
        return out

    return events


def outcome_pairs(
    actor: str, to: str, outcomes: Mapping[str, Outcome]
) -> Callable[[Sequence[Held]], PairedEvents]:
    """``outcome_events`` in the compact form the statement writes on PostgreSQL (``_move``'s
    ``paired``), for an outcome other than a retry (whose event needs the row after the
    write): the same events with the same details (``test_turn`` compares them)."""
    if to == S.READY:
        raise ValueError("a retry's events are built from the row after the write")

    def pairs(held: Sequence[Held]) -> PairedEvents:
        rows = []
        for item in held:
            o = outcomes[item.job_id]
            second = dict(o.detail or {})
            if o.error:
                second["error"] = o.error
            first, first_code = None, ""
            if o.executed_detail is not None:
                first = dict(o.executed_detail)
                first_code = first.pop("result_code", o.result_code)
            rows.append((item.job_id, first_code, first, o.result_code, second))
        return PairedEvents(actor, S.EXECUTING, EventType.EXECUTED, FINISH_EVENT[to], rows)

    return pairs


def recovery_events(actor: str, to: str) -> EventsFor:
    def events(job: Job, before: Job | None, now: dt.datetime) -> list[Event]:
        assert before is not None
        return [
            transition_event(
                job,
                EventType.LEASE_EXPIRED,
                actor,
                now,
                before.state,
                to,
                result_code="MAX_ATTEMPTS" if to == S.FAILED else "LEASE_EXPIRED",
                claim_id=before.claim_id,
                worker_id=before.worker_id,
                lease_until=before.lease_until.isoformat() if before.lease_until else None,
                attempt=before.attempt_count,
            )
        ]

    return events
