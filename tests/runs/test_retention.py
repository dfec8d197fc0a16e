"""Retention for runs: closed runs go with their groups and members; active runs,
runs closed after the cut and every audit event stay."""

from __future__ import annotations

import datetime as dt

import pytest

from audit.models import AuditEvent
from core.clock import db_now
from runs import retention
from runs.models import Group, Member, Run, RunStatus
from runs.transitions import close_run, plan_run
from tests.runs.support import StaticConsolidator

pytestmark = pytest.mark.django_db

THIRTY_DAYS = dt.timedelta(days=30)


def _run(store: str, *, closed: bool, at: dt.datetime | None = None) -> Run:
    run = plan_run(
        store=store,
        owner="w-1",
        lease_seconds=600,
        consolidator=StaticConsolidator(groups=3, members=4),
        at=at,
    )
    if closed:
        run = close_run(run.run_id, status=RunStatus.ABANDONED, actor="ops", reason="test", at=at)
    return run


def _left(run: Run) -> tuple[int, int, int]:
    return (
        Run.objects.filter(run_id=run.run_id).count(),
        Group.objects.filter(run_id=run.run_id).count(),
        Member.objects.filter(group__run_id=run.run_id).count(),
    )


def test_prune_runs_deletes_closed_old_runs_with_groups_and_members() -> None:
    later = db_now() + THIRTY_DAYS + dt.timedelta(hours=1)
    old = _run("a", closed=True)
    active = _run("b", closed=False)
    young = _run("c", closed=True, at=later - dt.timedelta(days=1))
    events = AuditEvent.objects.count()
    report = retention.prune_runs(older_than=THIRTY_DAYS, at=later, batch=5)
    assert (report.runs, report.groups, report.members) == (1, 3, 12)
    assert _left(old) == (0, 0, 0)
    assert _left(active) == (1, 3, 12)
    assert _left(young) == (1, 3, 12)
    assert AuditEvent.objects.count() == events
    assert AuditEvent.objects.filter(run_id=old.run_id).exists()


def test_prune_runs_dry_run_counts_and_deletes_nothing() -> None:
    later = db_now() + THIRTY_DAYS + dt.timedelta(hours=1)
    old = _run("a", closed=True)
    report = retention.prune_runs(older_than=THIRTY_DAYS, at=later, dry_run=True)
    assert (report.runs, report.groups, report.members) == (1, 3, 12)
    assert _left(old) == (1, 3, 12)


def test_prune_run_guard_keeps_an_active_run_whole() -> None:
    """Asked to prune an active run directly (as if it were picked by mistake), nothing goes:
    every DELETE carries the closed-and-old test itself."""
    active = _run("b", closed=False)
    cut = db_now() + dt.timedelta(days=1)
    assert retention._prune_run(active.run_id, cut, batch=2) == (0, 0, 0)
    assert _left(active) == (1, 3, 12)


def test_prune_command_deletes_runs_too(capsys) -> None:
    from django.core.management import call_command

    old = _run("a", closed=True)
    Run.objects.filter(run_id=old.run_id).update(closed_at=db_now() - dt.timedelta(days=40))
    call_command("prune", "--finished-older-than", "30d")
    out = capsys.readouterr().out
    assert "runs: deleted 1 with 3 groups and 12 members" in out
    assert _left(old) == (0, 0, 0)
