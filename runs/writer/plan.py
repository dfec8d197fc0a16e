"""Planning a run: close the store's active run and store a new plan, in one transaction.

The consolidator plans outside the transaction (it may read a whole vault); closing the
predecessor, inserting the run, its groups and members and the events are one transaction, so
a refused INSERT also undoes the close. On PostgreSQL a plan takes a per-store advisory lock and
locks the active row; on SQLite every ``atomic()`` is BEGIN IMMEDIATE. Either way the partial
unique index ``run_one_active_per_store`` is the last word: a second active row cannot be stored.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import uuid
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from audit.events import Event, record_events
from core import faults
from core.clock import db_now
from core.db import bounded
from runs.consolidators import Consolidator, PlannedGroup, get_consolidator
from runs.errors import RunAlreadyActive
from runs.models import Group, GroupStatus, Member, Run, RunStatus
from runs.writer import events
from runs.writer.close import close_if_finished
from runs.writer.guard import write
from runs.writer.lease import check_lease, lease_end
from runs.writer.rows import active_rows, deferred_item_refs, lock_store

# Logged under the public face's name: one logger for every run transition.
log = logging.getLogger("runs.transitions")


@dataclass(frozen=True)
class Claimant:
    """Who asks for a store's run: the owner, the lease a new run gets, where the owner runs
    (its host and pid default to this process's) and what plans for it."""

    store: str
    owner: str
    lease_seconds: int
    host: str | None = None
    pid: int | None = None
    consolidator: Consolidator | None = None


def plan_run(who: Claimant, *, at: dt.datetime | None) -> Run:
    """Plan outside any transaction, then store it; a lost INSERT race is retried once.

    The race is only possible if the store lock is bypassed; the second loss is raised as
    ``RunAlreadyActive``.
    """
    store = who.store
    if not store or not who.owner:
        raise ValueError("plan_run needs a store and an owner")
    check_lease(who.lease_seconds)
    consolidator = who.consolidator or get_consolidator()
    carry_over = deferred_item_refs(store)
    groups = [g for g in consolidator.plan(store=store, carry_over=carry_over) if g.members]
    host = socket.gethostname() if who.host is None else who.host
    pid = os.getpid() if who.pid is None else who.pid
    for attempt in (1, 2):
        try:
            return _store_plan(
                store=store,
                owner=who.owner,
                lease_seconds=who.lease_seconds,
                host=host[:255],
                pid=pid,
                groups=groups,
                carry_over=set(carry_over),
                at=at,
            )
        except RunAlreadyActive:
            if attempt == 2:
                raise
            log.warning("plan for store %s lost an insert race; retrying once", store)
    raise AssertionError("unreachable")  # pragma: no cover


def _store_plan(
    *,
    store: str,
    owner: str,
    lease_seconds: int,
    host: str,
    pid: int,
    groups: list[PlannedGroup],
    carry_over: set[str],
    at: dt.datetime | None,
) -> Run:
    with bounded(f"store {store!r}"), transaction.atomic():
        lock_store(store)
        active = active_rows(store, lock=True)
        now = db_now(at)
        previous = active[0] if active else None
        run = _new_run(store, owner, host=host, pid=pid, lease_seconds=lease_seconds, now=now)
        run.replaced_run_id = previous.run_id if previous else ""
        recorded: list[Event] = []
        closed_as = ""
        if previous is not None:
            closed_as = _displaced_status(previous, owner=owner, now=now)
            recorded.append(_close_predecessor(previous, status=closed_as, new=run))
        members = _insert(run, groups)
        faults.point("plan")
        deferred = sum(1 for m in members if m.item_ref in carry_over)
        recorded.append(
            events.planned(
                run,
                groups=len(groups),
                members=len(members),
                deferred=deferred,
                replaced_status=closed_as,
            )
        )
        record_events(recorded)
        if not groups and close_if_finished(run.run_id, actor=owner, now=now):
            run.status = RunStatus.COMPLETE
            run.closed_at = now
            run.closed_by = owner
    log.info(
        "store %s: planned run %s for %s (%d groups, %d members)%s",
        store,
        run.run_id,
        owner,
        len(groups),
        len(members),
        f"; closed {previous.run_id} as {closed_as}" if previous else "",
    )
    return run


def _new_run(
    store: str, owner: str, *, host: str, pid: int, lease_seconds: int, now: dt.datetime
) -> Run:
    """The new active run (not yet saved), started at ``now``."""
    return Run(
        run_id=uuid.uuid4().hex,
        store=store,
        worker_id=owner,
        host=host,
        pid=pid,
        started_at=now,
        renewed_at=now,
        # One clock reading for both: expires_at - started_at is exactly the lease.
        expires_at=lease_end(now, lease_seconds),
        lease_seconds=lease_seconds,
        status=RunStatus.ACTIVE,
    )


def _displaced_status(previous: Run, *, owner: str, now: dt.datetime) -> str:
    """How a plan closes the store's active run: lapsed, replanned by its owner, or taken."""
    if previous.expires_at < now:
        return RunStatus.EXPIRED
    return RunStatus.ABANDONED if previous.worker_id == owner else RunStatus.TAKEN_OVER


def _close_predecessor(previous: Run, *, status: str, new: Run) -> Event:
    """Close the store's active run as ``status`` for the plan ``new``; returns its event."""
    now = new.started_at
    reason = {
        RunStatus.EXPIRED: f"lease lapsed at {previous.expires_at.isoformat()}",
        RunStatus.ABANDONED: "its owner planned again",
        RunStatus.TAKEN_OVER: f"taken over by {new.worker_id!r}",
    }[status]
    write(
        Run.objects.filter(run_id=previous.run_id, status=RunStatus.ACTIVE),
        {
            "status": status,
            "closed_at": now,
            "closed_by": new.worker_id,
            "close_reason": f"{reason}; replaced by run {new.run_id}",
        },
        what=f"run {previous.run_id}",
        frm=previous.status,
        to=status,
    )
    return events.displaced(
        previous, status=status, owner=new.worker_id, replaced_by=new.run_id, at=now
    )


def _insert(run: Run, groups: list[PlannedGroup]) -> list[Member]:
    """Insert the run, its groups (numbered from 1) and their members; returns the members.

    A second active row for the store is refused by the unique index: ``RunAlreadyActive``,
    raised out of the plan's transaction, so the predecessor's close rolls back too.
    """
    try:
        with transaction.atomic():
            run.save(force_insert=True)
    except IntegrityError as exc:
        raise RunAlreadyActive(run.store, str(exc).splitlines()[0]) from exc
    Group.objects.bulk_create(
        Group(run_id=run.run_id, seq=seq, key=g.key[:200], status=GroupStatus.PENDING)
        for seq, g in enumerate(groups, start=1)
    )
    group_ids = dict(Group.objects.filter(run_id=run.run_id).values_list("seq", "id"))
    members = [
        Member(group_id=group_ids[seq], item_ref=m.item_ref, detail=dict(m.detail))
        for seq, g in enumerate(groups, start=1)
        for m in g.members
    ]
    Member.objects.bulk_create(members)
    return members
