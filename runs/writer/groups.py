"""Handing groups to a run's owner: serve the next one, or put one aside (defer).

Serving is progress and refreshes the lease; deferring is not and does not. Either closes the
run complete when it leaves nothing pending or served.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Exists, OuterRef

from core.clock import db_now
from core.db import bounded
from runs.errors import GroupExpired, InvalidRunTransition, RunError
from runs.models import Group, GroupStatus, Member, Run, RunStatus
from runs.writer import events
from runs.writer.close import close_if_finished
from runs.writer.guard import as_owner, writable_or_reject, write
from runs.writer.lease import effectively_active_q, refresh_lease
from runs.writer.plan import Claimant, plan_run
from runs.writer.rows import current_run, load_run, run_id_of


@dataclass
class Served:
    """What ``next_group`` handed the owner."""

    run: Run
    group: Group | None = None
    # All members of the group, in order (dispose those whose disposition is still None).
    members: list[Member] = field(default_factory=list)
    # A new run was planned by this call.
    planned: bool = False
    # An already-served, unfinished group was handed back (nothing written).
    resumed: bool = False
    # The run has closed complete: nothing is pending or served.
    completed: bool = False


@dataclass
class Deferred:
    """What ``defer_group`` did."""

    group: Group
    run_closed: bool = False


def next_group(who: Claimant, *, at: dt.datetime | None) -> Served:
    """Serve the owner's next group, planning first if it holds no effectively active run.

    A run lost between reading and serving (taken over or lapsed) is looked at again, up to
    three times.
    """
    planned = False
    for _attempt in range(3):
        now = db_now(at)
        run = current_run(who.store)
        if run is None or run.worker_id != who.owner or run.expires_at < now:
            run = plan_run(who, at=at)
            planned = True
            if run.status != RunStatus.ACTIVE:
                return Served(run=run, planned=True, completed=True)
        try:
            served = _serve(run.run_id, owner=who.owner, at=at)
        except GroupExpired:
            continue
        served.planned = planned
        return served
    raise RunError(
        f"store {who.store!r} changed hands three times while {who.owner!r} asked for a group"
    )


def _serve(run_id: str, *, owner: str, at: dt.datetime | None) -> Served:
    # Not recorded when refused: ``next_group`` looks again (the run changed hands meanwhile).
    with bounded(f"run {run_id!r}"), transaction.atomic():
        run = load_run(run_id, lock=True)
        now = db_now(at)
        writable_or_reject(run, owner, now, "serve")
        undisposed = Member.objects.filter(group_id=OuterRef("id"), disposition__isnull=True)
        unfinished = (
            Group.objects.filter(run_id=run_id, status=GroupStatus.SERVED)
            .filter(Exists(undisposed))
            .order_by("seq")
            .first()
        )
        if unfinished is not None:
            return Served(
                run=run, group=unfinished, members=list(unfinished.members.all()), resumed=True
            )
        pending = (
            Group.objects.filter(run_id=run_id, status=GroupStatus.PENDING).order_by("seq").first()
        )
        if pending is None:
            completed = close_if_finished(run_id, actor=owner, now=now)
            run.refresh_from_db()
            return Served(run=run, completed=completed or run.status == RunStatus.COMPLETE)
        return _serve_pending(run, pending, owner=owner, now=now)


def _serve_pending(run: Run, pending: Group, *, owner: str, now: dt.datetime) -> Served:
    """pending → served for the owner, refreshing its lease (inside the serve's transaction)."""
    write(
        Group.objects.filter(
            effectively_active_q(now, "run__"),
            id=pending.id,
            status=GroupStatus.PENDING,
            run__worker_id=owner,
        ),
        {"status": GroupStatus.SERVED, "served_at": now},
        what=f"group {pending.id}",
        frm=pending.status,
        to=GroupStatus.SERVED,
    )
    expires_at = refresh_lease(run, owner, now)
    members = list(pending.members.all())
    events.record_one(
        events.group_served(
            pending, owner=owner, members=len(members), expires_at=expires_at, at=now
        )
    )
    pending.status = GroupStatus.SERVED
    pending.served_at = now
    return Served(run=run, group=pending, members=members)


def defer_group(*, group_id: int, owner: str, reason: str, at: dt.datetime | None) -> Deferred:
    """pending or served → deferred for the owner; rejected like any owner write."""
    if not reason:
        raise ValueError("defer_group needs a reason")
    run_id = run_id_of(Group.objects.filter(id=group_id), "run_id", f"group {group_id}")
    what, detail = f"defer group {group_id}", {"group_id": group_id, "reason": reason}
    with as_owner(run_id, owner=owner, what=what, detail=detail, at=at) as (run, now):
        group = Group.objects.get(id=group_id)
        allowed = (GroupStatus.PENDING, GroupStatus.SERVED)
        if group.status not in allowed:
            raise InvalidRunTransition(
                f"group {group_id}", group.status, GroupStatus.DEFERRED, "only pending or served"
            )
        write(
            Group.objects.filter(
                effectively_active_q(now, "run__"),
                id=group_id,
                status__in=allowed,
                run__worker_id=owner,
            ),
            {"status": GroupStatus.DEFERRED},
            what=f"group {group_id}",
            frm=group.status,
            to=GroupStatus.DEFERRED,
            event=events.group_deferred(
                group, owner=owner, from_status=group.status, reason=reason, at=now
            ),
        )
        run_closed = close_if_finished(run.run_id, actor=owner, now=now)
    group.status = GroupStatus.DEFERRED
    return Deferred(group=group, run_closed=run_closed)
