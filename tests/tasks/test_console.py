"""Task jobs in the console: the job page shows when a retry is due; the reconcile page shows a
non-idempotent task with no vault probe and lets an operator decide it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from inbox import transitions
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login
from tests.factories import make_job
from tests.tasks import sample
from tests.tasks.support import WORKER, unknown_task

pytestmark = pytest.mark.django_db

S = JobState


@pytest.fixture
def operator(client: Client):
    return login(client, "ops", "operator")


def test_job_page_of_a_retried_task_shows_when_the_next_attempt_is_due(client, operator):
    result = sample.flaky.enqueue("page", 5)
    job = transitions.claim_job(result.id, worker_id=WORKER, lease_seconds=30)
    transitions.begin_job(job.job_id, claim_id=job.claim_id, actor=WORKER)
    job = transitions.schedule_retry(
        job.job_id,
        claim_id=job.claim_id,
        actor=WORKER,
        retry_in=3600,
        result_code="TASK_ERROR",
        error="builtins.RuntimeError: flaky page run 1",
    )
    body = client.get(f"/jobs/{job.job_id}/").content.decode()
    assert "Next attempt" in body
    assert f"not before {job.run_after:%Y-%m-%d %H:%M:%S} UTC" in body
    assert "RETRY_SCHEDULED" in body
    assert "flaky page run 1" in body  # the attempt's error, in the trail


def test_job_page_of_a_task_without_deferral_shows_no_next_attempt(client, operator):
    result = sample.add.enqueue(1, 2)
    body = client.get(f"/jobs/{result.id}/").content.decode()
    assert "Next attempt" not in body
    assert "tests.tasks.sample.add" in body


def test_job_page_hides_task_arguments_without_the_payload_permission(client):
    login(client, "v", "viewer")
    result = sample.echo.enqueue("secret@example.test", card="4111")
    body = client.get(f"/jobs/{result.id}/").content.decode()
    assert "secret@example.test" not in body
    assert "4111" not in body
    assert "redacted" in body


def test_reconcile_page_shows_task_case_without_probe_with_decision_buttons(client, operator):
    job = unknown_task()
    body = client.get("/reconcile/").content.decode()
    assert job.job_id in body
    assert "No vault probe" in body
    assert "It ran (applied)" in body
    assert "It did not run (not applied)" in body
    assert reverse("console:reconcile_confirm_deleted", args=[job.job_id]) not in body


def test_reconcile_page_as_viewer_shows_task_case_without_buttons(client):
    login(client, "v", "viewer")
    job = unknown_task()
    body = client.get("/reconcile/").content.decode()
    assert job.job_id in body
    assert "It ran (applied)" not in body


@pytest.mark.parametrize(
    ("outcome", "code"), [("applied", "APPLIED"), ("not_applied", "NOT_APPLIED")]
)
def test_post_decide_task_case_reconciles_with_operator_and_reason(client, operator, outcome, code):
    job = unknown_task()
    response = client.post(
        reverse("console:reconcile_decide", args=[job.job_id]),
        action_form("checked the ledger", outcome=outcome),
        headers=hx("unknown-case"),
    )
    assert response.status_code == 200
    stored = Job.objects.get(job_id=job.job_id)
    assert (stored.state, stored.result_code) == (S.RECONCILED, code)
    event = AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.RECONCILED).get()
    assert (event.actor, event.detail["reason"]) == ("ops", "checked the ledger")
    assert event.detail["evidence"]["probe"] is None


@pytest.mark.parametrize("outcome", ["", "maybe"])
def test_post_decide_without_a_valid_outcome_is_400_and_writes_nothing(client, operator, outcome):
    job = unknown_task()
    events = AuditEvent.objects.count()
    response = client.post(
        reverse("console:reconcile_decide", args=[job.job_id]),
        action_form("x", outcome=outcome),
        headers=hx("unknown-case"),
    )
    assert response.status_code == 400
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN
    assert AuditEvent.objects.count() == events


def test_post_confirm_deleted_on_a_task_is_refused(client, operator):
    job = unknown_task()
    response = client.post(
        reverse("console:reconcile_confirm_deleted", args=[job.job_id]),
        action_form("x"),
        headers=hx("unknown-case"),
    )
    assert response.status_code == 409
    assert "no vault probe" in response.content.decode()
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN


def test_post_decide_on_a_delete_is_refused(client, operator):
    job = make_job("delete", S.OUTCOME_UNKNOWN)
    response = client.post(
        reverse("console:reconcile_decide", args=[job.job_id]),
        action_form("x", outcome="applied"),
        headers=hx("unknown-case"),
    )
    assert response.status_code == 409
    assert Job.objects.get(job_id=job.job_id).state == S.OUTCOME_UNKNOWN
