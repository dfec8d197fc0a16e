"""Executor behaviour in-process: handler errors, lost fences, pauses, heartbeats, sweeps and
reconciliation services."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from inbox import reconcile, scopes, transitions, workers
from inbox.errors import ConfigurationError, InboxError
from inbox.executor import Executor
from inbox.jobtypes import registry
from inbox.models import Job, JobState, Worker
from tests.executors.support import sha
from tests.factories import delete_doc, make_job, noop_doc

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def vault_root(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"
    (tmp_path / "vault").mkdir()
    return tmp_path / "vault"


@pytest.fixture
def boom_types(settings):
    settings.INBOX_JOB_TYPES = {
        "BOOM_SAFE": {
            "scope": "boom",
            "idempotent": True,
            "handler": "tests.executors.slow.boom_handler",
        },
        "BOOM_UNSAFE": {
            "scope": "boom",
            "idempotent": False,
            "handler": "tests.executors.slow.boom_handler",
        },
    }
    registry.cache_clear()
    yield
    registry.cache_clear()


def _run(scope: str, **kwargs) -> Executor:
    lines: list[str] = []
    executor = Executor(
        scope=scope, exit_when_idle=True, poll_seconds=0.1, out=lines.append, **kwargs
    )
    executor.run()
    executor.lines = lines
    return executor


def _job(job_id: str) -> Job:
    return Job.objects.get(job_id=job_id)


def test_handler_error_fails_idempotent_job_and_parks_non_idempotent_one(boom_types):
    safe, _ = transitions.create_job(noop_doc(job_type="BOOM_SAFE"), requested_by="p")
    unsafe, _ = transitions.create_job(noop_doc(job_type="BOOM_UNSAFE"), requested_by="p")
    _run("boom")
    assert (_job(safe.job_id).state, _job(safe.job_id).result_code) == (
        JobState.FAILED,
        "HANDLER_ERROR",
    )
    assert "boom on" in _job(safe.job_id).last_error
    assert _job(unsafe.job_id).state == JobState.OUTCOME_UNKNOWN
    executed = AuditEvent.objects.filter(event_type="EXECUTED").values_list("job_id", flat=True)
    assert sorted(executed) == sorted([safe.job_id, unsafe.job_id])


def test_run_executor_noop_scope_settles_every_job_and_stops_worker():
    ids = [transitions.create_job(noop_doc(), requested_by="p")[0].job_id for _ in range(25)]
    executor = _run("noop", batch=7, worker_id="noop-test-1")
    assert {_job(i).state for i in ids} == {JobState.SUCCEEDED}
    worker = Worker.objects.get(worker_id="noop-test-1")
    assert (worker.status, worker.jobs_done, worker.scope) == ("stopped", 25, "noop")
    assert "25 jobs (25 succeeded" in executor.lines[-1]


def test_run_executor_with_max_jobs_stops_after_that_many():
    for _ in range(12):
        transitions.create_job(noop_doc(), requested_by="p")
    _run("noop", batch=5, max_jobs=7)
    assert Job.objects.filter(state=JobState.SUCCEEDED).count() == 7
    assert Job.objects.filter(state=JobState.READY).count() == 5


def test_run_executor_unknown_scope_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="unknown scope"):
        Executor(scope="nope", exit_when_idle=True).run()


def test_run_executor_in_paused_scope_claims_nothing_and_says_so():
    job, _ = transitions.create_job(noop_doc(), requested_by="p")
    scopes.pause_scope("noop", actor="op", reason="maintenance")
    executor = _run("noop")
    assert _job(job.job_id).state == JobState.READY
    assert any("paused by op (maintenance)" in line for line in executor.lines)
    scopes.resume_scope("noop", actor="op")
    _run("noop")
    assert _job(job.job_id).state == JobState.SUCCEEDED
    actions = AuditEvent.objects.filter(event_type="OPERATOR_ACTION")
    assert [e.detail["action"] for e in actions.order_by("event_id")] == [
        "pause_scope",
        "resume_scope",
    ]


def test_pause_unknown_scope_is_refused():
    with pytest.raises(InboxError, match="unknown scope"):
        scopes.pause_scope("nope", actor="op", reason="x")


def test_worker_not_seen_for_three_polls_plus_lease_is_dead():
    workers.register_worker(worker_id="w-old", kind="executor", poll_seconds=1, lease_seconds=10)
    workers.register_worker(worker_id="w-new", kind="executor", poll_seconds=1, lease_seconds=10)
    seen = Worker.objects.get(worker_id="w-old").last_seen_at
    later = seen + dt.timedelta(seconds=14)
    just_within = seen + dt.timedelta(seconds=12)
    assert {w.worker_id: w.alive for w in workers.worker_rows(now=later)}["w-old"] is False
    assert {w.worker_id: w.alive for w in workers.worker_rows(now=just_within)}["w-old"] is True
    workers.mark_stopped(worker_id="w-new")
    assert {w.worker_id: w.alive for w in workers.worker_rows(now=seen)}["w-new"] is False
    out = io.StringIO()
    call_command("workers", stdout=out)
    assert "w-old" in out.getvalue() and "ALIVE" in out.getvalue()


def test_a_sweep_with_nothing_lapsed_is_one_probe_and_one_with_a_lapsed_lease_recovers_it():
    lines: list[str] = []
    executor = Executor(scope="save", out=lines.append)
    job = make_job("save", JobState.CLAIMED, lease_seconds=60)
    with CaptureQueriesContext(connection) as queries:
        executor._sweep()
    assert len(queries) == 2, [q["sql"] for q in queries]  # the clock and the probe
    assert executor.stats.sweeps == 1
    assert _job(job.job_id).state == JobState.CLAIMED
    Job.objects.filter(job_id=job.job_id).update(
        lease_until=transitions.db_now() - dt.timedelta(seconds=1)
    )
    executor._sweep()
    assert executor.stats.sweeps == 2
    assert _job(job.job_id).state == JobState.READY
    assert any("] sweep: requeued 1 SAVE_OBJECT" in line for line in lines), lines


def test_recover_stale_dry_run_reports_and_writes_nothing():
    job = make_job("save", JobState.CLAIMED, lease_seconds=1)
    before = AuditEvent.objects.count()
    out = io.StringIO()
    later = transitions.db_now() + dt.timedelta(seconds=5)
    report = transitions.recover_stale_claims_report(at=later, dry_run=True)
    assert report.requeued == {"SAVE_OBJECT": 1}
    call_command("recover_stale", "--dry-run", stdout=out)
    assert "would have requeued" in out.getvalue()
    assert _job(job.job_id).state == JobState.CLAIMED
    assert AuditEvent.objects.count() == before


def _unknown_delete(vault_root, *, content: str | None) -> Job:
    doc = delete_doc(expected_provenance_hash=sha("# original\n"))
    if content is not None:
        target = vault_root / doc["vault_path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    job = make_job("delete", JobState.OUTCOME_UNKNOWN, **{k: doc[k] for k in doc})
    return job


def test_auto_reconcile_confirms_absent_and_only_annotates_the_rest(vault_root):
    gone = _unknown_delete(vault_root, content=None)
    kept = _unknown_delete(vault_root, content="# original\n")
    other = _unknown_delete(vault_root, content="# rewritten\n")
    preview = reconcile.auto_reconcile(actor="auto", dry_run=True)
    assert preview.confirmed == [gone.job_id]
    assert _job(gone.job_id).state == JobState.OUTCOME_UNKNOWN
    report = reconcile.auto_reconcile(actor="auto")
    assert (report.confirmed, report.not_applied, report.conflict) == (
        [gone.job_id],
        [kept.job_id],
        [other.job_id],
    )
    assert (_job(gone.job_id).state, _job(gone.job_id).result_code) == (
        JobState.RECONCILED,
        "CONFIRMED_DELETED",
    )
    assert (_job(kept.job_id).state, _job(kept.job_id).result_code) == (
        JobState.OUTCOME_UNKNOWN,
        "RECONCILE_NOT_APPLIED",
    )
    assert _job(other.job_id).result_code == "RECONCILE_CONFLICT"
    evidence = AuditEvent.objects.get(job_id=gone.job_id, event_type="RECONCILED").detail
    assert evidence["evidence"]["present"] is False
    assert reconcile.auto_reconcile(actor="auto").unchanged == [kept.job_id, other.job_id]


def test_not_applied_with_fresh_delete_twice_makes_one_new_job(vault_root):
    old = _unknown_delete(vault_root, content="# original\n")
    job, fresh = reconcile.not_applied(
        old.job_id, actor="op", reason="still there", request_fresh_delete=True
    )
    _again, fresh_again = reconcile.not_applied(
        old.job_id, actor="op", reason="double click", request_fresh_delete=True
    )
    assert (job.state, job.result_code) == (JobState.RECONCILED, "NOT_APPLIED")
    assert fresh is not None and fresh_again is not None
    assert fresh.job_id == fresh_again.job_id
    assert (fresh.state, fresh.supersedes) == (JobState.CREATED, old.job_id)
    assert Job.objects.filter(supersedes=old.job_id).count() == 1


def test_confirm_deleted_while_object_present_is_refused(vault_root):
    job = _unknown_delete(vault_root, content="# original\n")
    with pytest.raises(reconcile.ReconcileRefused):
        reconcile.confirm_deleted(job.job_id, actor="op", reason="sure?")
    assert _job(job.job_id).state == JobState.OUTCOME_UNKNOWN


def test_pause_and_resume_commands_toggle_scope_and_refuse_unknown_scope():
    call_command("pause", "save", "--reason", "disk check", "--as", "op", stdout=io.StringIO())
    assert scopes.is_paused("save")
    assert [p.scope for p in scopes.paused_scopes()] == ["save"]
    call_command("resume", "save", "--as", "op", stdout=io.StringIO())
    assert not scopes.is_paused("save")
    with pytest.raises(CommandError, match="unknown scope"):
        call_command("pause", "nope", "--reason", "x", stdout=io.StringIO())
