"""The one writer of Run, Group and Member status, lease and disposition fields.

Every run status change goes through an operation here. Each is one guarded UPDATE per row
(the allowed from-status and, for an owner's write, "the caller's run is effectively active" in
its WHERE clause; exactly one row changed or the write is refused) plus its audit event, in one
transaction. An owner whose run is not effectively active, or not theirs, gets ``GroupExpired``
and one RUN_REJECTED_WRITE event; no run, group or member row changes. Times come from the
database clock; every operation takes ``at=`` so tests can pin it.

Callers: the consolidator worker (``run_consolidator``), the ``close_run`` command, admin
actions and console views. Readers (``effective_status``, ``current_run``, ...) never write.

The engine lives in ``runs/writer/``, one module per subject: ``guard`` (the guarded UPDATE and
the owner's write scope), ``rows``, ``lease``, ``events`` (each event's shape), ``plan``,
``groups`` (serve, defer), ``members`` (dispose) and ``close``.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from core.clock import db_now
from runs.consolidators import Consolidator
from runs.models import Run
from runs.writer import close, groups, members, plan
from runs.writer.close import OPERATOR_CLOSE_STATUSES
from runs.writer.events import CLOSE_EVENTS
from runs.writer.groups import Deferred, Served
from runs.writer.lease import (
    DEFAULT_LEASE_SECONDS,
    effective_status,
    effectively_active_q,
    is_effectively_active,
    seconds_left,
)
from runs.writer.members import Disposed
from runs.writer.plan import Claimant
from runs.writer.rows import current_run, deferred_item_refs

__all__ = [
    "CLOSE_EVENTS",
    "DEFAULT_LEASE_SECONDS",
    "OPERATOR_CLOSE_STATUSES",
    "Deferred",
    "Disposed",
    "Served",
    "close_if_finished",
    "close_run",
    "current_run",
    "defer_group",
    "deferred_item_refs",
    "dispose_member",
    "effective_status",
    "effectively_active_q",
    "is_effectively_active",
    "next_group",
    "plan_run",
    "seconds_left",
]


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

    The close and the new plan commit together or not at all; a second active run for the
    store is refused by the database (``RunAlreadyActive``).
    """
    return plan.plan_run(
        Claimant(store, owner, lease_seconds, host, pid, consolidator),
        at=at,
    )


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
    return groups.next_group(
        Claimant(store, owner, lease_seconds, host, pid, consolidator),
        at=at,
    )


def dispose_member(
    *,
    member_id: int,
    owner: str,
    disposition: str,
    consolidator: Consolidator | None = None,
    at: dt.datetime | None = None,
) -> Disposed:
    """Give a served group's member its disposition and apply it, refreshing the lease.

    The disposition and its effect (for the bundled consolidator: requesting a DELETE job)
    commit together or not at all. Disposing a member again the same way is a replay: nothing
    is written.
    """
    return members.dispose_member(
        member_id=member_id, owner=owner, disposition=disposition, consolidator=consolidator, at=at
    )


def defer_group(
    *, group_id: int, owner: str, reason: str, at: dt.datetime | None = None
) -> Deferred:
    """Put a pending or served group aside for this run; its members return to the next plan.

    Deferring is not progress: the lease is not refreshed. Rejected like ``dispose_member``.
    """
    return groups.defer_group(group_id=group_id, owner=owner, reason=reason, at=at)


def close_if_finished(run_id: str, *, actor: str = "runs", at: dt.datetime | None = None) -> bool:
    """Close the run complete if no group is pending or served; True only for the closing call.

    Guarded by ``status = 'active'``: however many callers notice completion at once, one row
    changes and one RUN_COMPLETE event is written.
    """
    with transaction.atomic():
        return close.close_if_finished(run_id, actor=actor, now=db_now(at))


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
    return close.close_run(run_id, status=status, actor=actor, reason=reason, at=at)
