"""Retention for consolidation runs: delete closed runs with their groups and members.

A run goes when it is closed (any status but ``active``) and was closed (``closed_at``) before
the cut. Every DELETE — members, then groups, then the run — repeats that test in its own WHERE
clause through the run it belongs to, so a run that is still active, or that was closed after
the cut, loses nothing. Members go in batches of ``batch`` rows, each its own short transaction
(a run can hold many members), then the groups, then the run row. A crash half-way leaves a
closed, old run with fewer members: the next prune finishes it. Audit events of runs are never
deleted: the audit trail is append-only and outlives the rows it describes.

Deleting rows is not a run transition (``runs.transitions`` stays the only writer of status
fields). Callers: the ``prune`` command.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q, QuerySet

from core.batches import Pace, prune_cut
from runs.models import Group, Member, Run, RunStatus

DEFAULT_BATCH = 500


@dataclass
class RunPruneReport:
    runs: int = 0
    groups: int = 0
    members: int = 0
    seconds: float = 0.0


def _closed_before(cut: dt.datetime, prefix: str = "") -> Q:
    """The guard every DELETE here carries: closed, and closed before ``cut``."""
    return ~Q(**{f"{prefix}status": RunStatus.ACTIVE}) & Q(
        **{f"{prefix}closed_at__isnull": False, f"{prefix}closed_at__lt": cut}
    )


def prunable_runs(cut: dt.datetime) -> QuerySet[Run]:
    return Run.objects.filter(_closed_before(cut))


def prune_runs(
    *,
    older_than: dt.timedelta,
    batch: int = DEFAULT_BATCH,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda line: None,
    at: dt.datetime | None = None,
) -> RunPruneReport:
    """Delete closed runs older than ``older_than`` with their groups and members."""
    cut = prune_cut(older_than, batch, at)
    report = RunPruneReport()
    pace = Pace()
    if dry_run:
        report.runs = prunable_runs(cut).count()
        report.groups = Group.objects.filter(_closed_before(cut, "run__")).count()
        report.members = Member.objects.filter(_closed_before(cut, "group__run__")).count()
        report.seconds = pace.elapsed()
        return report
    while True:
        run_ids = list(
            prunable_runs(cut)
            .order_by("closed_at", "run_id")
            .values_list("run_id", flat=True)[:batch]
        )
        if not run_ids:
            break
        deleted_now = 0
        for run_id in run_ids:
            members, groups, runs = _prune_run(run_id, cut, batch)
            report.members += members
            report.groups += groups
            deleted_now += runs
        report.runs += deleted_now
        if pace.due():
            progress(
                f"runs: {report.runs:,} deleted so far ({report.groups:,} groups, "
                f"{report.members:,} members)"
            )
        if not deleted_now:
            break  # none of the picked runs could go (they changed meanwhile): stop here
    report.seconds = pace.elapsed()
    return report


def _prune_run(run_id: str, cut: dt.datetime, batch: int) -> tuple[int, int, int]:
    """One run: its members in batches, then its groups, then the run; each step guarded."""
    members = 0
    guard = _closed_before(cut, "group__run__")
    while True:
        with transaction.atomic():
            ids = list(
                Member.objects.filter(guard, group__run_id=run_id).values_list("id", flat=True)[
                    :batch
                ]
            )
            if not ids:
                break
            members += Member.objects.filter(guard, id__in=ids).delete()[0]
    with transaction.atomic():
        groups = Group.objects.filter(_closed_before(cut, "run__"), run_id=run_id).delete()[0]
        runs = 0
        if not Group.objects.filter(run_id=run_id).exists():
            runs = Run.objects.filter(_closed_before(cut), run_id=run_id).delete()[0]
    return members, groups, runs
