"""All writes to Run, Group and Member status, lease and disposition fields (DESIGN §3).

Every change is one guarded UPDATE (``_write``: the allowed from-status and, for owner writes,
"the caller's run is effectively active" in its WHERE clause, exactly one row changed or the
write is refused) plus its audit event, in one transaction. An owner's write runs inside
``_as_owner``, which locks the run, checks that the caller holds it effectively and, if not,
records the rejection once as a RUN_REJECTED_WRITE event (in its own transaction, like the
inbox's stale writes) and raises ``GroupExpired``; no run, group or member row changes. Times
come from the database clock (``core.clock.db_now``); every function takes ``at=`` so tests can
pin it.

Callers: the consolidator worker (``run_consolidator``), the ``close_run`` command, admin
actions and console views. Readers (``effective_status``, ``current_run``) never write.

Concurrency: on PostgreSQL a plan takes a per-store advisory lock and locks the active row
(``FOR UPDATE``); owner writes lock their run row. On SQLite every ``atomic()`` is BEGIN
IMMEDIATE, which serialises writers. Either way the partial unique index
``run_one_active_per_store`` is the last word: a second active row cannot be stored.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, Model, OuterRef, Q, QuerySet

from audit.events import Event, record_event, record_events
from audit.models import EventType
from core import faults
from core.clock import db_now
from core.db import bounded, locked
from runs.consolidators import Consolidator, get_consolidator
from runs.errors import (
    GroupExpired,
    InvalidRunTransition,
    MultipleActiveRuns,
    RunAlreadyActive,
    RunError,
    RunNotFound,
)
from runs.models import OPEN_GROUP_STATUSES, Disposition, Group, GroupStatus, Member, Run, RunStatus

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60
# The phase event each closing status writes.
CLOSE_EVENTS: dict[str, str] = {
    RunStatus.COMPLETE: EventType.RUN_COMPLETE,
    RunStatus.EXPIRED: EventType.RUN_EXPIRED,
    RunStatus.ABANDONED: EventType.RUN_ABANDONED,
    RunStatus.TAKEN_OVER: EventType.RUN_TAKEN_OVER,
}
# What close_run accepts; taken_over is written only by a plan that displaces a live run.
OPERATOR_CLOSE_STATUSES = (RunStatus.ABANDONED, RunStatus.EXPIRED, RunStatus.COMPLETE)


# --- readers (never write) --------------------------------------------------------------------


def effective_status(run: Run, at: dt.datetime | None = None) -> str:
    """The status §3 means: an ``active`` row past its lease reads as ``expired``.

    Reading never writes; ``expired`` is stored only when the next plan is made.
    """
    if run.status != RunStatus.ACTIVE:
        return run.status
    return RunStatus.ACTIVE if run.expires_at >= db_now(at) else RunStatus.EXPIRED


def is_effectively_active(run: Run, at: dt.datetime | None = None) -> bool:
    """``status = active AND expires_at >= now`` — the only test of "is there a run"."""
    return effective_status(run, at) == RunStatus.ACTIVE


def effectively_active_q(now: dt.datetime, prefix: str = "") -> Q:
    """The same test as a filter, for WHERE clauses (``prefix`` like ``"group__run__"``)."""
    return Q(**{f"{prefix}status": RunStatus.ACTIVE, f"{prefix}expires_at__gte": now})


def seconds_left(run: Run, at: dt.datetime | None = None) -> float:
    """Seconds until the lease lapses (0 for a closed or lapsed run)."""
    if run.status != RunStatus.ACTIVE:
        return 0.0
    return max((run.expires_at - db_now(at)).total_seconds(), 0.0)


def _rows[M: Model](qs: QuerySet[M], *, lock: bool) -> list[M]:
    """The runs' one load(-and-lock) helper (``core.db.locked`` when ``lock``)."""
    return list(locked(qs) if lock else qs)


def _active_rows(store: str, *, lock: bool = False) -> list[Run]:
    qs = Run.objects.filter(store=store, status=RunStatus.ACTIVE).order_by("run_id")
    rows = _rows(qs, lock=lock)
    if len(rows) > 1:
        ids = [r.run_id for r in rows]
        log.critical("store %s has %d active runs %s: refusing to act", store, len(rows), ids)
        raise MultipleActiveRuns(store, ids)
    return rows


def current_run(store: str) -> Run | None:
    """The store's ``status = active`` row (maybe lapsed), or None. Two rows → refused."""
    rows = _active_rows(store)
    return rows[0] if rows else None


def deferred_item_refs(store: str) -> list[str]:
    """Items the store's latest run put aside (deferred groups, ``defer`` members).

    They return to the next plan (§3: deferred is terminal for the run only).
    """
    latest = Run.objects.filter(store=store).order_by("-started_at", "-created_at").first()
    if latest is None:
        return []
    return list(
        Member.objects.filter(group__run_id=latest.run_id)
        .filter(
            Q(group__status=GroupStatus.DEFERRED, disposition__isnull=True)
            | Q(disposition=Disposition.DEFER)
        )
        .order_by("id")
        .values_list("item_ref", flat=True)
    )


# --- helpers ----------------------------------------------------------------------------------


def _lease_end(now: dt.datetime, lease_seconds: int) -> dt.datetime:
    return now + dt.timedelta(seconds=lease_seconds)


def _check_lease(lease_seconds: int) -> None:
    if not isinstance(lease_seconds, int) or isinstance(lease_seconds, bool) or lease_seconds < 1:
        raise ValueError(f"lease_seconds must be a positive whole number, got {lease_seconds!r}")


def _lock_store(store: str) -> None:
    """Serialise plans for one store on PostgreSQL (SQLite's IMMEDIATE already does).

    Without it two plans could both find no active row and race to INSERT; the unique index
    would refuse one, but every planner should instead see its predecessor and close it.
    """
    if connection.vendor != "postgresql":
        return
    key = int.from_bytes(hashlib.sha256(f"runs.store:{store}".encode()).digest()[:8], "big")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key - (1 << 63)])


def _load_run(run_id: str, *, lock: bool = False) -> Run:
    rows = _rows(Run.objects.filter(run_id=run_id), lock=lock)
    if not rows:
        raise RunNotFound(f"run {run_id!r}")
    return rows[0]


def _write(
    qs: QuerySet,
    values: dict[str, Any],
    *,
    what: str,
    frm: str | None,
    to: str,
    why: str = "lost a race",
    event: Event | Callable[[], Event] | None = None,
    exactly_one: bool = True,
) -> int:
    """The one guarded UPDATE of a run, group or member row: ``qs`` carries every guard.

    With ``exactly_one`` anything but one changed row is refused (``InvalidRunTransition``,
    nothing written); otherwise 0 changed rows is a no-op (a run that is already complete).
    ``event`` (or what it builds, read after the write) is recorded only when a row changed.
    """
    changed = qs.update(**values)
    if exactly_one and changed != 1:
        raise InvalidRunTransition(what, frm, to, why)
    if changed and event is not None:
        record_events([event() if callable(event) else event])
    return changed


@contextmanager
def _as_owner(
    run_id: str, *, owner: str, what: str, detail: dict[str, Any], at: dt.datetime | None
) -> Iterator[tuple[Run, dt.datetime]]:
    """One transaction in which ``owner`` writes to its run: yields (the locked run, now).

    A caller that does not hold the run effectively gets ``GroupExpired`` and a
    RUN_REJECTED_WRITE event with ``detail``, recorded once here for every owner write.
    """
    rejected: GroupExpired | None = None
    try:
        with bounded(f"run {run_id!r}"), transaction.atomic():
            run = _load_run(run_id, lock=True)
            now = db_now(at)
            try:
                _writable_or_reject(run, owner, now, what)
            except GroupExpired as exc:
                rejected = exc
                raise
            yield run, now
    except GroupExpired as exc:
        if exc is rejected:
            _record_rejection(exc, detail=detail, at=at)
        raise


def _writable_or_reject(run: Run, caller: str, now: dt.datetime, what: str) -> None:
    """Raise ``GroupExpired`` unless ``run`` is effectively active and owned by ``caller``."""
    stored = run.status
    effective = stored
    if stored == RunStatus.ACTIVE and run.expires_at < now:
        effective = RunStatus.EXPIRED
    if effective == RunStatus.ACTIVE and run.worker_id == caller:
        return
    if effective != RunStatus.ACTIVE:
        why = f"the run is {effective}"
        if stored == RunStatus.ACTIVE:
            why += f" (lease lapsed at {run.expires_at.isoformat()})"
    else:
        why = f"the run belongs to {run.worker_id!r}"
    raise GroupExpired(
        run_id=run.run_id,
        stored_status=stored,
        effective_status=effective,
        owner=run.worker_id,
        caller=caller,
        why=f"{what}: {why}",
    )


def _record_rejection(exc: GroupExpired, *, detail: dict[str, Any], at: dt.datetime | None) -> None:
    """Record a rejected owner write in its own transaction; no run/group/member row changes."""
    with transaction.atomic():
        record_event(
            event_type=EventType.RUN_REJECTED_WRITE,
            actor=exc.caller,
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
    log.warning("%s", exc)


def _refresh_lease(run: Run, owner: str, now: dt.datetime) -> dt.datetime:
    """Extend the owner's lease from ``now`` — called only on progress, inside its transaction."""
    expires_at = _lease_end(now, run.lease_seconds)
    _write(
        Run.objects.filter(effectively_active_q(now), run_id=run.run_id, worker_id=owner),
        {"expires_at": expires_at, "renewed_at": now},
        what=f"run {run.run_id}",
        frm=run.status,
        to="lease refresh",
    )
    run.expires_at = expires_at
    run.renewed_at = now
    return expires_at


def _group_counts(run_id: str) -> dict[str, int]:
    counts = {status.value: 0 for status in GroupStatus}
    rows = Group.objects.filter(run_id=run_id).order_by().values("status").annotate(n=Count("id"))
    for row in rows:
        counts[row["status"]] = row["n"]
    return counts


def _close_if_finished(run_id: str, *, actor: str, now: dt.datetime) -> bool:
    """active → complete when no group is pending or served; the event only if a row changed."""
    open_groups = Group.objects.filter(run_id=OuterRef("run_id"), status__in=OPEN_GROUP_STATUSES)
    qs = Run.objects.filter(run_id=run_id, status=RunStatus.ACTIVE).filter(~Exists(open_groups))
    values = {
        "status": RunStatus.COMPLETE,
        "closed_at": now,
        "closed_by": actor,
        "close_reason": "no group pending or served",
    }
    changed = _write(
        qs,
        values,
        what=f"run {run_id}",
        frm=RunStatus.ACTIVE,
        to=RunStatus.COMPLETE,
        # The counts are read after the write, so the event shows the closing state.
        event=lambda: Event(
            EventType.RUN_COMPLETE,
            actor,
            run_id=run_id,
            result_code="COMPLETE",
            detail={
                "from": RunStatus.ACTIVE,
                "to": RunStatus.COMPLETE,
                "groups": _group_counts(run_id),
            },
            at=now,
        ),
        exactly_one=False,
    )
    return bool(changed)


# --- plan -------------------------------------------------------------------------------------


def _displaced_status(previous: Run, *, owner: str, now: dt.datetime) -> str:
    if previous.expires_at < now:
        return RunStatus.EXPIRED
    return RunStatus.ABANDONED if previous.worker_id == owner else RunStatus.TAKEN_OVER


def plan_run(
    *,
    store: str,
    owner: str,
    lease_seconds: int,
    host: str | None = None,
    pid: int | None = None,
    consolidator: Consolidator | None = None,
    at: dt.datetime | None = None,
) -> Run:
    """Close the store's active run (expired / abandoned / taken_over) and plan a new one.

    The consolidator plans outside the transaction (it may read a whole vault); closing the
    predecessor, inserting the run, its groups and members and the events are one transaction,
    so a refused INSERT also undoes the close. A lost INSERT race (only possible if the store
    lock is bypassed) is retried once, then raised as ``RunAlreadyActive``.
    """
    if not store or not owner:
        raise ValueError("plan_run needs a store and an owner")
    _check_lease(lease_seconds)
    consolidator = consolidator or get_consolidator()
    carry_over = deferred_item_refs(store)
    groups = [g for g in consolidator.plan(store=store, carry_over=carry_over) if g.members]
    host = socket.gethostname() if host is None else host
    pid = os.getpid() if pid is None else pid
    for attempt in (1, 2):
        try:
            return _store_plan(
                store=store,
                owner=owner,
                lease_seconds=lease_seconds,
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
    groups: list,
    carry_over: set[str],
    at: dt.datetime | None,
) -> Run:
    with bounded(f"store {store!r}"), transaction.atomic():
        _lock_store(store)
        active = _active_rows(store, lock=True)
        now = db_now(at)
        run_id = uuid.uuid4().hex
        events: list[Event] = []
        previous = active[0] if active else None
        closed_as = ""
        if previous is not None:
            closed_as = _displaced_status(previous, owner=owner, now=now)
            reason = {
                RunStatus.EXPIRED: f"lease lapsed at {previous.expires_at.isoformat()}",
                RunStatus.ABANDONED: "its owner planned again",
                RunStatus.TAKEN_OVER: f"taken over by {owner!r}",
            }[closed_as]
            _write(
                Run.objects.filter(run_id=previous.run_id, status=RunStatus.ACTIVE),
                {
                    "status": closed_as,
                    "closed_at": now,
                    "closed_by": owner,
                    "close_reason": f"{reason}; replaced by run {run_id}",
                },
                what=f"run {previous.run_id}",
                frm=previous.status,
                to=closed_as,
            )
            events.append(
                Event(
                    CLOSE_EVENTS[closed_as],
                    owner,
                    run_id=previous.run_id,
                    result_code=closed_as.upper(),
                    detail={
                        "from": RunStatus.ACTIVE,
                        "to": closed_as,
                        "store": store,
                        "owner": previous.worker_id,
                        "replaced_by": run_id,
                        "new_owner": owner,
                        "expires_at": previous.expires_at.isoformat(),
                        "lapsed_seconds": max((now - previous.expires_at).total_seconds(), 0.0),
                    },
                    at=now,
                )
            )
        run = Run(
            run_id=run_id,
            store=store,
            worker_id=owner,
            host=host,
            pid=pid,
            started_at=now,
            renewed_at=now,
            # One clock reading for both: expires_at - started_at is exactly the lease.
            expires_at=_lease_end(now, lease_seconds),
            lease_seconds=lease_seconds,
            status=RunStatus.ACTIVE,
            replaced_run_id=previous.run_id if previous else "",
        )
        try:
            with transaction.atomic():
                run.save(force_insert=True)
        except IntegrityError as exc:
            # Raising here leaves the outer atomic() too: the predecessor's close rolls back.
            raise RunAlreadyActive(store, str(exc).splitlines()[0]) from exc
        Group.objects.bulk_create(
            Group(run_id=run_id, seq=seq, key=g.key[:200], status=GroupStatus.PENDING)
            for seq, g in enumerate(groups, start=1)
        )
        group_ids = dict(Group.objects.filter(run_id=run_id).values_list("seq", "id"))
        members = [
            Member(group_id=group_ids[seq], item_ref=m.item_ref, detail=dict(m.detail))
            for seq, g in enumerate(groups, start=1)
            for m in g.members
        ]
        Member.objects.bulk_create(members)
        faults.point("plan")
        deferred = sum(1 for m in members if m.item_ref in carry_over)
        events.append(
            Event(
                EventType.RUN_PLANNED,
                owner,
                run_id=run_id,
                detail={
                    "store": store,
                    "groups": len(groups),
                    "members": len(members),
                    "deferred": deferred,
                    "lease_seconds": lease_seconds,
                    "started_at": now.isoformat(),
                    "expires_at": run.expires_at.isoformat(),
                    "host": host,
                    "pid": pid,
                    "replaced_run_id": run.replaced_run_id,
                    "replaced_status": closed_as,
                },
                at=now,
            )
        )
        record_events(events)
        if not groups and _close_if_finished(run_id, actor=owner, now=now):
            run.status = RunStatus.COMPLETE
            run.closed_at = now
            run.closed_by = owner
    log.info(
        "store %s: planned run %s for %s (%d groups, %d members)%s",
        store,
        run_id,
        owner,
        len(groups),
        len(members),
        f"; closed {previous.run_id} as {closed_as}" if previous else "",
    )
    return run


# --- serve, dispose, defer --------------------------------------------------------------------


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


def next_group(
    *,
    store: str,
    owner: str,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    host: str | None = None,
    pid: int | None = None,
    consolidator: Consolidator | None = None,
    at: dt.datetime | None = None,
) -> Served:
    """Serve the owner's next group, planning a new run first if it has no effectively active one.

    An unfinished served group is handed back before a pending one is served (no write). Serving
    refreshes the lease; when nothing is pending or served the run closes complete.
    ``lease_seconds`` applies only to a run planned by this call.
    """
    planned = False
    for _attempt in range(3):
        now = db_now(at)
        run = current_run(store)
        if run is None or run.worker_id != owner or run.expires_at < now:
            run = plan_run(
                store=store,
                owner=owner,
                lease_seconds=lease_seconds,
                host=host,
                pid=pid,
                consolidator=consolidator,
                at=at,
            )
            planned = True
            if run.status != RunStatus.ACTIVE:
                return Served(run=run, planned=True, completed=True)
        try:
            served = _serve(run.run_id, owner=owner, at=at)
        except GroupExpired:
            # Lost the run between reading and serving (taken over or lapsed): look again.
            continue
        served.planned = planned
        return served
    raise RunError(f"store {store!r} changed hands three times while {owner!r} asked for a group")


def _serve(run_id: str, *, owner: str, at: dt.datetime | None) -> Served:
    # Not recorded when refused: ``next_group`` looks again (the run changed hands meanwhile).
    with bounded(f"run {run_id!r}"), transaction.atomic():
        run = _load_run(run_id, lock=True)
        now = db_now(at)
        _writable_or_reject(run, owner, now, "serve")
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
            completed = _close_if_finished(run_id, actor=owner, now=now)
            run.refresh_from_db()
            return Served(run=run, completed=completed or run.status == RunStatus.COMPLETE)
        _write(
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
        expires_at = _refresh_lease(run, owner, now)
        members = list(pending.members.all())
        record_event(
            event_type=EventType.RUN_GROUP_SERVED,
            actor=owner,
            run_id=run_id,
            detail={
                "group_id": pending.id,
                "seq": pending.seq,
                "key": pending.key,
                "members": len(members),
                "expires_at": expires_at.isoformat(),
            },
            at=now,
        )
        pending.status = GroupStatus.SERVED
        pending.served_at = now
    return Served(run=run, group=pending, members=members)


@dataclass
class Disposed:
    """What ``dispose_member`` did."""

    member: Member
    # False when the member already had this very disposition (a replay; nothing written).
    changed: bool = True
    # The member was its group's last undisposed one: the group is done.
    group_done: bool = False
    # ... and with it nothing was left open: the run closed complete.
    run_closed: bool = False
    applied: dict[str, Any] = field(default_factory=dict)


def dispose_member(
    *,
    member_id: int,
    owner: str,
    disposition: str,
    consolidator: Consolidator | None = None,
    at: dt.datetime | None = None,
) -> Disposed:
    """Give a served group's member its disposition and apply it, refreshing the lease.

    The consolidator's ``apply`` (for the bundled one: requesting a DELETE job) runs inside the
    same transaction, so a disposition and its effect commit together or not at all. A caller
    whose run is not effectively active, or not theirs, gets ``GroupExpired`` and nothing changes.
    """
    if disposition not in Disposition.values:
        raise ValueError(f"unknown disposition {disposition!r} ({', '.join(Disposition.values)})")
    consolidator = consolidator or get_consolidator()
    found = Member.objects.filter(id=member_id).values_list("group__run_id", flat=True).first()
    if found is None:
        raise RunNotFound(f"member {member_id}")
    with _as_owner(
        found,
        owner=owner,
        what=f"dispose member {member_id}",
        detail={"member_id": member_id, "disposition": disposition},
        at=at,
    ) as (run, now):
        # Read under the run lock: an earlier read may predate a concurrent write.
        member = Member.objects.select_related("group").get(id=member_id)
        group = member.group
        if member.disposition is not None:
            if member.disposition == disposition:
                return Disposed(member=member, changed=False)  # a replay: no write, no lease
            raise InvalidRunTransition(
                f"member {member_id}", member.disposition, disposition, "already disposed"
            )
        if group.status != GroupStatus.SERVED:
            raise InvalidRunTransition(
                f"member {member_id}",
                None,
                disposition,
                f"its group {group.seq} is {group.status}; only a served group's members "
                "can be disposed",
            )
        _write(
            Member.objects.filter(
                effectively_active_q(now, "group__run__"),
                id=member_id,
                disposition__isnull=True,
                group__status=GroupStatus.SERVED,
                group__run__worker_id=owner,
            ),
            {"disposition": disposition, "disposed_at": now},
            what=f"member {member_id}",
            frm=None,
            to=disposition,
        )
        faults.point("dispose")
        applied = consolidator.apply(run=run, group=group, member=member, disposition=disposition)
        if applied:
            member.detail = {**member.detail, "applied": applied}
            _write(
                Member.objects.filter(id=member_id, disposition=disposition),
                {"detail": member.detail},
                what=f"member {member_id}",
                frm=disposition,
                to=disposition,
            )
        undisposed = Member.objects.filter(group_id=OuterRef("id"), disposition__isnull=True)
        group_done = bool(
            _write(
                Group.objects.filter(id=group.id, status=GroupStatus.SERVED).filter(
                    ~Exists(undisposed)
                ),
                {"status": GroupStatus.DONE},
                what=f"group {group.id}",
                frm=GroupStatus.SERVED,
                to=GroupStatus.DONE,
                exactly_one=False,
            )
        )
        expires_at = _refresh_lease(run, owner, now)
        record_event(
            event_type=EventType.RUN_MEMBER_DISPOSED,
            actor=owner,
            run_id=run.run_id,
            detail={
                "member_id": member_id,
                "item_ref": member.item_ref,
                "disposition": disposition,
                "group_id": group.id,
                "seq": group.seq,
                "group_done": group_done,
                "applied": applied or {},
                "expires_at": expires_at.isoformat(),
            },
            at=now,
        )
        run_closed = group_done and _close_if_finished(run.run_id, actor=owner, now=now)
    member.disposition = disposition
    member.disposed_at = now
    if group_done:
        group.status = GroupStatus.DONE
    return Disposed(
        member=member,
        group_done=group_done,
        run_closed=run_closed,
        applied=applied or {},
    )


@dataclass
class Deferred:
    group: Group
    run_closed: bool = False


def defer_group(
    *, group_id: int, owner: str, reason: str, at: dt.datetime | None = None
) -> Deferred:
    """Put a pending or served group aside for this run; its members return to the next plan.

    Deferring is not progress: the lease is not refreshed. Rejected like ``dispose_member``.
    """
    if not reason:
        raise ValueError("defer_group needs a reason")
    found = Group.objects.filter(id=group_id).values_list("run_id", flat=True).first()
    if found is None:
        raise RunNotFound(f"group {group_id}")
    with _as_owner(
        found,
        owner=owner,
        what=f"defer group {group_id}",
        detail={"group_id": group_id, "reason": reason},
        at=at,
    ) as (run, now):
        group = Group.objects.get(id=group_id)
        allowed = (GroupStatus.PENDING, GroupStatus.SERVED)
        if group.status not in allowed:
            raise InvalidRunTransition(
                f"group {group_id}", group.status, GroupStatus.DEFERRED, "only pending or served"
            )
        _write(
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
            event=Event(
                EventType.RUN_GROUP_DEFERRED,
                owner,
                run_id=run.run_id,
                detail={
                    "group_id": group_id,
                    "seq": group.seq,
                    "key": group.key,
                    "from": group.status,
                    "reason": reason,
                },
                at=now,
            ),
        )
        run_closed = _close_if_finished(run.run_id, actor=owner, now=now)
    group.status = GroupStatus.DEFERRED
    return Deferred(group=group, run_closed=run_closed)


# --- closing ----------------------------------------------------------------------------------


def close_if_finished(run_id: str, *, actor: str = "runs", at: dt.datetime | None = None) -> bool:
    """Close the run complete if no group is pending or served; True only for the closing call.

    Guarded by ``status = 'active'``: however many callers notice completion at once, one row
    changes and one RUN_COMPLETE event is written.
    """
    with transaction.atomic():
        return _close_if_finished(run_id, actor=actor, now=db_now(at))


def close_run(
    run_id: str,
    *,
    status: str,
    actor: str,
    reason: str,
    at: dt.datetime | None = None,
) -> Run:
    """Close an active run as ``abandoned`` (an operator's stop), ``expired`` (its lease has
    lapsed) or ``complete`` (nothing pending or served), recorded as ``actor``'s action.

    Guarded by ``status = 'active'`` (plus the lapse or completion condition); a run that is
    already closed is refused and nothing is written.
    """
    if status not in OPERATOR_CLOSE_STATUSES:
        allowed = ", ".join(OPERATOR_CLOSE_STATUSES)
        raise InvalidRunTransition(f"run {run_id}", None, status, f"close_run accepts {allowed}")
    if not actor or not reason:
        raise ValueError("close_run needs an actor and a reason")
    with bounded(f"run {run_id!r}"), transaction.atomic():
        run = _load_run(run_id, lock=True)
        now = db_now(at)
        guard = Q(run_id=run_id, status=RunStatus.ACTIVE)
        why = f"the run is already {run.status}"
        if run.status == RunStatus.ACTIVE and status == RunStatus.EXPIRED:
            guard &= Q(expires_at__lt=now)
            why = f"its lease runs until {run.expires_at.isoformat()}"
        elif run.status == RunStatus.ACTIVE and status == RunStatus.COMPLETE:
            open_groups = Group.objects.filter(run_id=run_id, status__in=OPEN_GROUP_STATUSES)
            guard &= ~Q(Exists(open_groups))
            why = "groups are still pending or served"
        before = RunStatus.EXPIRED if run.expires_at < now else RunStatus.ACTIVE
        _write(
            Run.objects.filter(guard),
            {"status": status, "closed_at": now, "closed_by": actor, "close_reason": reason},
            what=f"run {run_id}",
            frm=run.status,
            to=status,
            why=why,
            event=lambda: Event(
                CLOSE_EVENTS[status],
                actor,
                run_id=run_id,
                result_code=status.upper(),
                detail={
                    "from": RunStatus.ACTIVE,
                    "to": status,
                    "reason": reason,
                    "owner": run.worker_id,
                    "effective_status_before": before,
                    "seconds_left": max((run.expires_at - now).total_seconds(), 0.0),
                    "groups": _group_counts(run_id),
                },
                at=now,
            ),
        )
    run.status = status
    run.closed_at = now
    run.closed_by = actor
    run.close_reason = reason
    log.info("run %s closed %s by %s: %s", run_id, status, actor, reason)
    return run
