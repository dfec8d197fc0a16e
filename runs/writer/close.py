"""Closing a run: complete when nothing is left open, or an operator's close.

Both are guarded by ``status = 'active'``: however many callers notice completion at once, one
row changes and one closing event is written. A plan's close of its predecessor lives in
``plan`` (it is part of the plan's transaction).
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q

from core.clock import db_now
from core.db import bounded
from runs.errors import InvalidRunTransition
from runs.models import OPEN_GROUP_STATUSES, Group, GroupStatus, Run, RunStatus
from runs.writer import events
from runs.writer.guard import write
from runs.writer.rows import load_run

# Logged under the public face's name: one logger for every run transition.
log = logging.getLogger("runs.transitions")

# What close_run accepts; taken_over is written only by a plan that displaces a live run.
OPERATOR_CLOSE_STATUSES = (RunStatus.ABANDONED, RunStatus.EXPIRED, RunStatus.COMPLETE)


def group_counts(run_id: str) -> dict[str, int]:
    """Groups of the run per status (every status present, 0 when none)."""
    counts = {status.value: 0 for status in GroupStatus}
    rows = Group.objects.filter(run_id=run_id).order_by().values("status").annotate(n=Count("id"))
    for row in rows:
        counts[row["status"]] = row["n"]
    return counts


def close_if_finished(run_id: str, *, actor: str, now: dt.datetime) -> bool:
    """active → complete when no group is pending or served; the event only if a row changed.

    Runs inside the caller's transaction (the change that finished the run's last group).
    """
    open_groups = Group.objects.filter(run_id=OuterRef("run_id"), status__in=OPEN_GROUP_STATUSES)
    qs = Run.objects.filter(run_id=run_id, status=RunStatus.ACTIVE).filter(~Exists(open_groups))
    values = {
        "status": RunStatus.COMPLETE,
        "closed_at": now,
        "closed_by": actor,
        "close_reason": "no group pending or served",
    }
    changed = write(
        qs,
        values,
        what=f"run {run_id}",
        frm=RunStatus.ACTIVE,
        to=RunStatus.COMPLETE,
        # The counts are read after the write, so the event shows the closing state.
        event=lambda: events.finished(run_id, actor=actor, groups=group_counts(run_id), at=now),
        exactly_one=False,
    )
    return bool(changed)


def _close_guard(run: Run, status: str, now: dt.datetime) -> tuple[Q, str]:
    """The WHERE of an operator's close and why it is refused when it changes no row."""
    guard = Q(run_id=run.run_id, status=RunStatus.ACTIVE)
    why = f"the run is already {run.status}"
    if run.status == RunStatus.ACTIVE and status == RunStatus.EXPIRED:
        guard &= Q(expires_at__lt=now)
        why = f"its lease runs until {run.expires_at.isoformat()}"
    elif run.status == RunStatus.ACTIVE and status == RunStatus.COMPLETE:
        open_groups = Group.objects.filter(run_id=run.run_id, status__in=OPEN_GROUP_STATUSES)
        guard &= ~Q(Exists(open_groups))
        why = "groups are still pending or served"
    return guard, why


def close_run(run_id: str, *, status: str, actor: str, reason: str, at: dt.datetime | None) -> Run:
    """Close an active run as ``status`` for ``actor``; a closed run is refused, nothing written."""
    if status not in OPERATOR_CLOSE_STATUSES:
        allowed = ", ".join(OPERATOR_CLOSE_STATUSES)
        raise InvalidRunTransition(f"run {run_id}", None, status, f"close_run accepts {allowed}")
    if not actor or not reason:
        raise ValueError("close_run needs an actor and a reason")
    with bounded(f"run {run_id!r}"), transaction.atomic():
        run = load_run(run_id, lock=True)
        now = db_now(at)
        guard, why = _close_guard(run, status, now)
        write(
            Run.objects.filter(guard),
            {"status": status, "closed_at": now, "closed_by": actor, "close_reason": reason},
            what=f"run {run_id}",
            frm=run.status,
            to=status,
            why=why,
            event=lambda: events.operator_closed(
                run, status=status, actor=actor, reason=reason, groups=group_counts(run_id), at=now
            ),
        )
    run.status = status
    run.closed_at = now
    run.closed_by = actor
    run.close_reason = reason
    log.info("run %s closed %s by %s: %s", run_id, status, actor, reason)
    return run
