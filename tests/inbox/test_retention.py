"""Retention for the inbox: prune finished jobs (never events), forget dead workers.

Runs on the suite's database (SQLite by default, PostgreSQL with DATABASE_URL); the last test
runs the command as a real process against a fresh database of the same kind.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from core.clock import db_now
from inbox import approvals, retention, transitions, workers
from inbox.models import Approval, FinishedCount, Job, JobState, Worker
from tests.console.conftest import ensure_roles
from tests.factories import make_job

pytestmark = pytest.mark.django_db

THIRTY_DAYS = dt.timedelta(days=30)


def _approver(name: str = "approver-1"):
    ensure_roles()
    user = get_user_model().objects.create_user(name, f"{name}@x.test", None)
    user.groups.add(Group.objects.get(name="approver"))
    return user


@pytest.fixture
def later() -> dt.datetime:
    """A prune clock 30 days and an hour ahead: everything finished now is past the cut."""
    return db_now() + THIRTY_DAYS + dt.timedelta(hours=1)


def test_parse_duration_accepts_units_and_refuses_the_rest() -> None:
    assert retention.parse_duration("30d") == dt.timedelta(days=30)
    assert retention.parse_duration("12h") == dt.timedelta(hours=12)
    assert retention.parse_duration("90m") == dt.timedelta(minutes=90)
    assert retention.parse_duration("2w") == dt.timedelta(weeks=2)
    assert retention.parse_duration("1.5h") == dt.timedelta(minutes=90)
    for bad in ("30", "d", "-1d", "0d", "30 days", "", "1y"):
        with pytest.raises(ValueError):
            retention.parse_duration(bad)


def test_prune_deletes_old_terminal_jobs_only_and_keeps_every_event(later) -> None:
    old = [
        make_job("save", state=JobState.SUCCEEDED),
        make_job("delete", state=JobState.REJECTED),
        make_job("delete", state=JobState.RECONCILED),
    ]
    kept = [
        make_job("save", state=JobState.FAILED),
        make_job("delete", state=JobState.OUTCOME_UNKNOWN),
        make_job("save", state=JobState.READY),
        make_job("save", state=JobState.EXECUTING),
        make_job("delete", state=JobState.CREATED),
        # Finished after the cut: too young.
        make_job("save", state=JobState.SUCCEEDED, at=later - dt.timedelta(days=1)),
    ]
    events = AuditEvent.objects.count()
    report = retention.prune_jobs(older_than=THIRTY_DAYS, at=later)
    assert report.jobs == 3
    assert not Job.objects.filter(job_id__in=[j.job_id for j in old]).exists()
    assert Job.objects.filter(job_id__in=[j.job_id for j in kept]).count() == len(kept)
    assert AuditEvent.objects.count() == events
    for job in old:  # the trail outlives the job
        assert AuditEvent.objects.filter(job_id=job.job_id).exists()


def test_prune_works_in_batches_until_done(later) -> None:
    for _ in range(7):
        make_job("noop", state=JobState.SUCCEEDED)
    said: list[str] = []
    report = retention.prune_jobs(older_than=THIRTY_DAYS, at=later, batch=2, progress=said.append)
    assert report.jobs == 7
    assert report.batches == 4
    assert not Job.objects.exists()


def test_prune_deletes_the_throughput_counts_of_minutes_before_the_cut(later) -> None:
    make_job("save", state=JobState.SUCCEEDED)  # now: before the cut of ``later``
    young = later - dt.timedelta(days=1)
    make_job("save", state=JobState.FAILED, at=young)
    make_job("save", state=JobState.SUCCEEDED, at=young)
    assert FinishedCount.objects.count() == 3
    dry = retention.prune_jobs(older_than=THIRTY_DAYS, at=later, dry_run=True)
    assert dry.counts == 1 and FinishedCount.objects.count() == 3
    report = retention.prune_jobs(older_than=THIRTY_DAYS, at=later, batch=1)
    assert report.counts == 1
    assert sorted(FinishedCount.objects.values_list("state", "finished")) == [
        ("FAILED", 1),
        ("SUCCEEDED", 1),
    ]


def test_prune_dry_run_counts_and_deletes_nothing(later) -> None:
    make_job("save", state=JobState.SUCCEEDED)
    make_job("save", state=JobState.READY)
    report = retention.prune_jobs(older_than=THIRTY_DAYS, at=later, dry_run=True)
    assert report.jobs == 1
    assert Job.objects.count() == 2


def test_prune_deletes_the_approval_of_a_pruned_job_and_keeps_its_decision_event(later) -> None:
    approver = _approver()
    pending = make_job("delete", state=JobState.CREATED)
    approval = approvals.approve_delete(pending.job_id, approver=approver, reason="dup")
    job = Job.objects.get(job_id=pending.job_id)
    claimed = transitions.claim_job(job.job_id, worker_id="w", lease_seconds=60)
    transitions.begin_job(job.job_id, claim_id=claimed.claim_id, actor="w")
    transitions.complete_job(job.job_id, claim_id=claimed.claim_id, actor="w")
    other = make_job("delete", state=JobState.CREATED)
    other_approval = approvals.approve_delete(other.job_id, approver=approver, reason="keep")
    report = retention.prune_jobs(older_than=THIRTY_DAYS, at=later)
    assert report.jobs == 1 and report.approvals == 1
    assert not Approval.objects.filter(approval_id=approval.approval_id).exists()
    assert Approval.objects.filter(approval_id=other_approval.approval_id).exists()
    decided = AuditEvent.objects.get(job_id=job.job_id, event_type="APPROVED")
    assert decided.actor == approver.username
    assert decided.detail["approval_id"] == approval.approval_id


def test_prune_delete_guards_state_and_age_in_its_where_clause(later) -> None:
    """A job picked while terminal and old, but no longer so when the DELETE runs, stays."""
    done = make_job("save", state=JobState.SUCCEEDED)
    moved = make_job("save", state=JobState.READY)  # as if it left a terminal state meanwhile
    young = make_job("save", state=JobState.SUCCEEDED, at=later)
    cut = later - THIRTY_DAYS
    deleted = retention._delete_jobs([done.job_id, moved.job_id, young.job_id], cut)
    assert deleted == [done.job_id]
    assert Job.objects.filter(job_id__in=[moved.job_id, young.job_id]).count() == 2


def test_prune_command_prints_progress_and_refuses_bad_input(capsys) -> None:
    make_job("save", state=JobState.SUCCEEDED)
    with pytest.raises(CommandError, match="not a duration"):
        call_command("prune", "--finished-older-than", "thirty days")
    with pytest.raises(CommandError, match="--batch"):
        call_command("prune", "--finished-older-than", "1d", "--batch", "0")
    call_command("prune", "--finished-older-than", "30d", "--dry-run")
    out = capsys.readouterr().out
    assert "would delete 0" in out  # finished just now: not 30 days old
    assert "audit events are kept" in out
    assert Job.objects.count() == 1


# --- forget_workers -----------------------------------------------------------------------------


def _worker(worker_id: str, *, seen_ago: dt.timedelta, stopped: bool = False) -> None:
    workers.register_worker(worker_id=worker_id, kind="executor", scope="save")
    if stopped:
        workers.mark_stopped(worker_id=worker_id)
    Worker.objects.filter(worker_id=worker_id).update(last_seen_at=db_now() - seen_ago)


def test_forget_workers_deletes_only_workers_dead_long_enough() -> None:
    day = dt.timedelta(hours=24)
    _worker("alive", seen_ago=dt.timedelta(seconds=1))
    _worker("dead-long", seen_ago=2 * day)
    _worker("stopped-long", seen_ago=2 * day, stopped=True)
    _worker("dead-recently", seen_ago=dt.timedelta(hours=1))
    _worker("stopped-recently", seen_ago=dt.timedelta(hours=1), stopped=True)
    # Last seen 24 h + 30 s ago with a 60 s lease: dead for less than 24 h (dead at seen + 63 s).
    _worker("just-short", seen_ago=day + dt.timedelta(seconds=30))
    dry = retention.forget_workers(dead_for=day, dry_run=True)
    assert {w.worker_id for w in dry} == {"dead-long", "stopped-long"}
    assert Worker.objects.count() == 6
    gone = retention.forget_workers(dead_for=day)
    assert {w.worker_id for w in gone} == {"dead-long", "stopped-long"}
    assert set(Worker.objects.values_list("worker_id", flat=True)) == {
        "alive",
        "dead-recently",
        "stopped-recently",
        "just-short",
    }


def test_forget_workers_never_deletes_a_worker_that_beat_after_it_was_judged(monkeypatch) -> None:
    _worker("comeback", seen_ago=dt.timedelta(days=3))
    judged = retention.dead_workers(dt.timedelta(hours=24))
    assert [w.worker_id for w in judged] == ["comeback"]
    workers.beat(worker_id="comeback")  # it came back between the judgement and the DELETE
    monkeypatch.setattr(retention, "dead_workers", lambda dead_for, at=None: judged)
    assert retention.forget_workers(dead_for=dt.timedelta(hours=24)) == []
    assert Worker.objects.filter(worker_id="comeback").exists()


def test_forget_workers_command_lists_what_it_forgets(capsys) -> None:
    _worker("old-one", seen_ago=dt.timedelta(days=2), stopped=True)
    call_command("forget_workers", "--dead-for", "24h")
    out = capsys.readouterr().out
    assert "forgot old-one (executor)" in out
    assert "forgot 1 worker(s)" in out
    with pytest.raises(CommandError, match="not a duration"):
        call_command("forget_workers", "--dead-for", "yesterday")


# --- the real command against a fresh database --------------------------------------------------


@pytest.mark.slow
def test_prune_command_in_its_own_process_commits_and_keeps_events(proc_db) -> None:
    proc_db.python(
        "from tests.factories import make_job\n"
        "from inbox.models import JobState\n"
        "for _ in range(5): make_job('noop', state=JobState.SUCCEEDED)\n"
        "make_job('noop', state=JobState.FAILED)\n"
    )
    events = proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent")
    time.sleep(1.2)
    done = proc_db.manage("prune", "--finished-older-than", "1s", "--batch", "2")
    assert "jobs: deleted 5" in done.stdout
    assert proc_db.scalar("SELECT COUNT(*) FROM inbox_job") == 1
    assert proc_db.scalar("SELECT state FROM inbox_job") == "FAILED"
    assert proc_db.scalar("SELECT COUNT(*) FROM audit_auditevent") == events
