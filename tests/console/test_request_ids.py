"""A request id belongs to its user: another user's id is a new request of their
own, never "Already done" with someone else's outcome; a repeat by the same user still acts
once. The database holds it: request ids are unique per (user, request id)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from console.models import ActionRequest
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, make_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Client:
    client = Client()
    client.force_login(make_user("alice", "operator"))
    return client


@pytest.fixture
def bob() -> Client:
    client = Client()
    client.force_login(make_user("bob", "operator"))
    return client


def _retry(client: Client, job: Job, form: dict):
    return client.post(
        reverse("console:job_retry", args=[job.job_id]), form, headers=hx("job-actions")
    )


def test_retry_with_another_users_request_id_is_a_new_request(alice, bob) -> None:
    first, second = (make_job("save", state=JobState.FAILED) for _ in range(2))
    form = action_form("alice's reason")
    assert _retry(alice, first, form).status_code == 200
    response = _retry(bob, second, {**form, "reason": "bob's reason"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "Already done" not in body
    assert "Retried" in body
    assert Job.objects.get(job_id=second.job_id).state == JobState.READY
    [event] = AuditEvent.objects.filter(job_id=second.job_id, event_type=EventType.RETRIED)
    assert (event.actor, event.detail["reason"]) == ("bob", "bob's reason")
    rows = ActionRequest.objects.filter(request_id=form["request_id"]).order_by("id")
    assert [(r.username, r.outcome) for r in rows] == [
        ("alice", "Retried: the job is READY again."),
        ("bob", "Retried: the job is READY again."),
    ]


def test_another_users_request_id_for_another_action_is_not_refused(alice, bob) -> None:
    job = make_job("save", state=JobState.FAILED)
    form = action_form(job_ids=[job.job_id], mode="selected")
    alice.post(reverse("console:bulk_reconcile"), form)  # refused (nothing to do), recorded
    response = _retry(bob, job, form)
    assert response.status_code == 200
    assert "another action" not in response.content.decode()
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY


def test_same_users_repeat_still_acts_once(alice, bob) -> None:
    job = make_job("save", state=JobState.FAILED)
    form = action_form("double click")
    _retry(alice, job, form)
    again = _retry(alice, job, form)
    assert "Already done: Retried" in again.content.decode()
    assert AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.RETRIED).count() == 1


def test_request_id_is_unique_per_user_in_the_database() -> None:
    alice, bob = make_user("alice"), make_user("bob")
    ActionRequest.objects.create(request_id="r-12345678", user=alice, username="alice", action="a")
    ActionRequest.objects.create(request_id="r-12345678", user=bob, username="bob", action="a")
    with pytest.raises(IntegrityError), transaction.atomic():
        ActionRequest.objects.create(
            request_id="r-12345678", user=alice, username="alice", action="b"
        )
    assert ActionRequest.objects.filter(request_id="r-12345678").count() == 2
