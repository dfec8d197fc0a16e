"""Approvals: four eyes, permission, expiry and revocation at execution time."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from inbox import approvals, transitions, vault
from inbox.errors import ApprovalError
from inbox.executor import Executor
from inbox.models import Approval, Job, JobState
from tests.executors.support import sha
from tests.factories import delete_doc

pytestmark = pytest.mark.django_db(transaction=True)

CONTENT = "# to be deleted\n"


def _user(name: str, *, can_approve: bool = True) -> User:
    user = User.objects.create_user(name)
    if can_approve:
        user.user_permissions.add(Permission.objects.get(codename="approve_delete"))
    return User.objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def vault_root(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"
    return tmp_path / "vault"


@pytest.fixture
def delete_job(vault_root) -> Job:
    doc = delete_doc(expected_provenance_hash=sha(CONTENT))
    target = vault_root / doc["vault_path"]
    target.parent.mkdir(parents=True)
    target.write_text(CONTENT)
    job, _ = transitions.create_job(doc, requested_by="alice")
    return job


def _run_delete_executor() -> None:
    Executor(scope="delete", exit_when_idle=True, poll_seconds=0.1, out=lambda _line: None).run()


def _events(job: Job) -> list[str]:
    return list(AuditEvent.objects.for_job(job.job_id).values_list("event_type", flat=True))


def test_approve_by_requester_is_refused_and_job_stays_created(delete_job):
    alice = _user("alice")
    with pytest.raises(ApprovalError, match="four eyes"):
        approvals.approve_delete(delete_job.job_id, approver=alice, reason="mine")
    assert Job.objects.get(pk=delete_job.pk).state == JobState.CREATED
    assert not Approval.objects.exists()


def test_approve_without_permission_is_refused(delete_job):
    bob = _user("bob", can_approve=False)
    with pytest.raises(ApprovalError, match="approve_delete"):
        approvals.approve_delete(delete_job.job_id, approver=bob, reason="ok")
    assert Job.objects.get(pk=delete_job.pk).state == JobState.CREATED


def test_approve_by_other_user_attaches_approval_and_readies_job(delete_job):
    approval = approvals.approve_delete(delete_job.job_id, approver=_user("bob"), reason="ok")
    job = Job.objects.get(pk=delete_job.pk)
    assert (job.state, job.approval_id) == (JobState.READY, approval.approval_id)
    assert approval.expires_at > approval.decided_at
    assert _events(job)[-2:] == ["APPROVED", "READY"]


def test_deny_rejects_job_and_keeps_reason(delete_job):
    approvals.deny_delete(delete_job.job_id, approver=_user("bob"), reason="wrong object")
    job = Job.objects.get(pk=delete_job.pk)
    assert (job.state, job.result_code) == (JobState.REJECTED, "DENIED")
    assert "wrong object" in job.last_error


def test_approve_command_as_requester_fails_with_message(delete_job):
    _user("alice")
    with pytest.raises(CommandError, match="cannot decide"):
        call_command("approve", delete_job.job_id, "--as", "alice", "--reason", "mine")


def test_execute_with_approval_runs_delete_once(delete_job, vault_root):
    approvals.approve_delete(delete_job.job_id, approver=_user("bob"), reason="ok")
    _run_delete_executor()
    job = Job.objects.get(pk=delete_job.pk)
    assert (job.state, job.result_code) == (JobState.SUCCEEDED, "DELETED")
    assert not (vault_root / job.vault_path).exists()
    events = _events(job)
    assert events.count("AUTHORIZED") == 1 and events.count("EXECUTED") == 1


def test_execute_with_expired_approval_rejects_and_leaves_vault_untouched(delete_job, vault_root):
    approvals.approve_delete(
        delete_job.job_id, approver=_user("bob"), reason="ok", ttl_seconds=3600
    )
    # Time passes: move the expiry into the past (the approval row is not a job state).
    past = transitions.db_now() - dt.timedelta(seconds=1)
    Approval.objects.filter(job_id=delete_job.job_id).update(expires_at=past)
    _run_delete_executor()
    job = Job.objects.get(pk=delete_job.pk)
    assert (job.state, job.result_code) == (JobState.REJECTED, "APPROVAL_EXPIRED")
    assert (vault_root / job.vault_path).read_text() == CONTENT
    assert "EXECUTED" not in _events(job)
    assert vault.read_oplog() == []


def test_execute_with_revoked_approval_rejects_and_leaves_vault_untouched(delete_job, vault_root):
    bob = _user("bob")
    approval = approvals.approve_delete(delete_job.job_id, approver=bob, reason="ok")
    approvals.revoke_approval(approval.approval_id, actor=bob, reason="second thoughts")
    _run_delete_executor()
    job = Job.objects.get(pk=delete_job.pk)
    assert (job.state, job.result_code) == (JobState.REJECTED, "APPROVAL_REVOKED")
    assert "second thoughts" in job.last_error
    assert (vault_root / job.vault_path).read_text() == CONTENT
    assert "EXECUTED" not in _events(job)
    assert vault.read_oplog() == []


def test_revoke_without_permission_is_refused(delete_job):
    approval = approvals.approve_delete(delete_job.job_id, approver=_user("bob"), reason="ok")
    with pytest.raises(ApprovalError):
        approvals.revoke_approval(
            approval.approval_id, actor=_user("carol", can_approve=False), reason="no"
        )
    assert Approval.objects.get(pk=approval.pk).revoked_at is None
