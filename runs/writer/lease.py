"""What "the run holds its store" means, and the lease that decides it.

A run is effectively active while ``status = active AND expires_at >= now``; an ``active`` row
past its lease reads as ``expired`` (reading never writes: ``expired`` is stored only when the
next plan is made). Only progress (serving a group, disposing a member) extends the lease.
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from core.clock import db_now
from runs.models import Run, RunStatus
from runs.writer.guard import write

DEFAULT_LEASE_SECONDS = 60


def effective_status(run: Run, at: dt.datetime | None = None) -> str:
    """The status a reader means: an ``active`` row past its lease reads as ``expired``.

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


def lease_end(now: dt.datetime, lease_seconds: int) -> dt.datetime:
    return now + dt.timedelta(seconds=lease_seconds)


def check_lease(lease_seconds: int) -> None:
    """Refuse a lease that is not a positive whole number of seconds."""
    if not isinstance(lease_seconds, int) or isinstance(lease_seconds, bool) or lease_seconds < 1:
        raise ValueError(f"lease_seconds must be a positive whole number, got {lease_seconds!r}")


def refresh_lease(run: Run, owner: str, now: dt.datetime) -> dt.datetime:
    """Extend the owner's lease from ``now`` — called only on progress, inside its transaction."""
    expires_at = lease_end(now, run.lease_seconds)
    write(
        Run.objects.filter(effectively_active_q(now), run_id=run.run_id, worker_id=owner),
        {"expires_at": expires_at, "renewed_at": now},
        what=f"run {run.run_id}",
        frm=run.status,
        to="lease refresh",
    )
    run.expires_at = expires_at
    run.renewed_at = now
    return expires_at
