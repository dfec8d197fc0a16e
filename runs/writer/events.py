"""Each audit event a run write records, its shape defined once here.

The writers build an event from these functions and record it in the transaction of the change
it describes; nothing else in the runs app spells an event's detail.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from audit.events import Event, record_event
from audit.models import EventType
from runs.errors import GroupExpired
from runs.models import Group, Member, Run, RunStatus

# The phase event each closing status writes.
CLOSE_EVENTS: dict[str, str] = {
    RunStatus.COMPLETE: EventType.RUN_COMPLETE,
    RunStatus.EXPIRED: EventType.RUN_EXPIRED,
    RunStatus.ABANDONED: EventType.RUN_ABANDONED,
    RunStatus.TAKEN_OVER: EventType.RUN_TAKEN_OVER,
}


def record_one(event: Event) -> None:
    """Record a single event on its own (a model save; the database clock stamps it if ``at``
    is None), as owner writes and rejections always have."""
    record_event(
        event_type=event.event_type,
        actor=event.actor,
        run_id=event.run_id,
        result_code=event.result_code,
        detail=event.detail,
        at=event.at,
    )


def _closed(status: str, actor: str, /, *, run_id: str, at: dt.datetime, **detail: Any) -> Event:
    """An active run closing as ``status``: the phase event of that status."""
    return Event(
        CLOSE_EVENTS[status],
        actor,
        run_id=run_id,
        result_code=status.upper(),
        detail={"from": RunStatus.ACTIVE, "to": status, **detail},
        at=at,
    )


def finished(run_id: str, *, actor: str, groups: dict[str, int], at: dt.datetime) -> Event:
    """RUN_COMPLETE written by the call that noticed nothing is pending or served."""
    return _closed(RunStatus.COMPLETE, actor, run_id=run_id, at=at, groups=groups)


def operator_closed(
    run: Run, *, status: str, actor: str, reason: str, groups: dict[str, int], at: dt.datetime
) -> Event:
    """An operator's (or a stopping worker's) close: what the run looked like just before."""
    before = RunStatus.EXPIRED if run.expires_at < at else RunStatus.ACTIVE
    return _closed(
        status,
        actor,
        run_id=run.run_id,
        at=at,
        reason=reason,
        owner=run.worker_id,
        effective_status_before=before,
        seconds_left=max((run.expires_at - at).total_seconds(), 0.0),
        groups=groups,
    )


def displaced(
    previous: Run, *, status: str, owner: str, replaced_by: str, at: dt.datetime
) -> Event:
    """A plan closing the store's active run (expired, abandoned or taken over)."""
    return _closed(
        status,
        owner,
        run_id=previous.run_id,
        at=at,
        store=previous.store,
        owner=previous.worker_id,
        replaced_by=replaced_by,
        new_owner=owner,
        expires_at=previous.expires_at.isoformat(),
        lapsed_seconds=max((at - previous.expires_at).total_seconds(), 0.0),
    )


def planned(run: Run, *, groups: int, members: int, deferred: int, replaced_status: str) -> Event:
    """RUN_PLANNED: the new run, its size and the run it replaced (if any)."""
    return Event(
        EventType.RUN_PLANNED,
        run.worker_id,
        run_id=run.run_id,
        detail={
            "store": run.store,
            "groups": groups,
            "members": members,
            "deferred": deferred,
            "lease_seconds": run.lease_seconds,
            "started_at": run.started_at.isoformat(),
            "expires_at": run.expires_at.isoformat(),
            "host": run.host,
            "pid": run.pid,
            "replaced_run_id": run.replaced_run_id,
            "replaced_status": replaced_status,
        },
        at=run.started_at,
    )


def _group_event(
    event_type: str, group: Group, owner: str, at: dt.datetime, **detail: Any
) -> Event:
    """An event about one group: its id, place and key, then what happened to it."""
    where = {"group_id": group.id, "seq": group.seq, "key": group.key}
    return Event(event_type, owner, run_id=group.run_id, detail={**where, **detail}, at=at)


def group_served(
    group: Group, *, owner: str, members: int, expires_at: dt.datetime, at: dt.datetime
) -> Event:
    """RUN_GROUP_SERVED: a pending group handed to its owner, with the refreshed lease."""
    return _group_event(
        EventType.RUN_GROUP_SERVED,
        group,
        owner,
        at,
        members=members,
        expires_at=expires_at.isoformat(),
    )


def group_deferred(
    group: Group, *, owner: str, from_status: str, reason: str, at: dt.datetime
) -> Event:
    """RUN_GROUP_DEFERRED: a group put aside for this run."""
    detail = {"from": from_status, "reason": reason}
    return _group_event(EventType.RUN_GROUP_DEFERRED, group, owner, at, **detail)


def member_disposed(
    member: Member,
    *,
    group: Group,
    group_done: bool,
    applied: dict[str, Any],
    owner: str,
    expires_at: dt.datetime,
    at: dt.datetime,
) -> Event:
    """RUN_MEMBER_DISPOSED: the member (its new disposition set), its group and what applying
    the disposition did."""
    return Event(
        EventType.RUN_MEMBER_DISPOSED,
        owner,
        run_id=group.run_id,
        detail={
            "member_id": member.id,
            "item_ref": member.item_ref,
            "disposition": member.disposition,
            "group_id": group.id,
            "seq": group.seq,
            "group_done": group_done,
            "applied": applied,
            "expires_at": expires_at.isoformat(),
        },
        at=at,
    )


def rejected_write(exc: GroupExpired, *, detail: dict[str, Any], at: dt.datetime | None) -> Event:
    """RUN_REJECTED_WRITE: an owner write refused because the caller does not hold the run."""
    return Event(
        EventType.RUN_REJECTED_WRITE,
        exc.caller,
        run_id=exc.run_id,
        result_code=exc.code.upper(),
        detail={
            "stored_status": exc.stored_status,
            "effective_status": exc.effective_status,
            "owner": exc.owner,
            "why": exc.why,
            **detail,
        },
        at=at,
    )
