"""Job admin: a changelist that stays fast at millions of rows, read-only immutable and state
fields, no deletes, raw edits recorded as ADMIN_EDIT, and actions that go through transitions."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.models import AuditEvent, EventType
from inbox.models import Job, JobState
from tests.factories import make_job

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:inbox_job_changelist")
READ_ONLY = (
    "job_id",
    "job_type",
    "vault_path",
    "object_id",
    "mission_id",
    "approval_id",
    "idempotency_key",
    "payload",
    "fingerprint",
    "state",
    "worker_id",
    "claim_id",
    "lease_until",
    "attempt_count",
    "result_code",
)


@pytest.fixture
def admin_user():
    return get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def jobs() -> dict[str, Job]:
    return {
        "ready": make_job("save", JobState.READY),
        "noop": make_job("noop", JobState.READY),
        "failed": make_job("save", JobState.FAILED),
        "created": make_job("delete", JobState.CREATED),
        "done": make_job("save", JobState.SUCCEEDED),
    }


def _unbounded_counts(queries: list[dict]) -> list[str]:
    """COUNT queries over inbox_job with no LIMIT anywhere in them (a full scan per page)."""
    return [
        q["sql"]
        for q in queries
        if "inbox_job" in q["sql"]
        and re.search(r"\bCOUNT\(", q["sql"], re.I)
        and not re.search(r"\bLIMIT\b", q["sql"], re.I)
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, {"ready", "noop", "failed", "created", "done"}),
        ({"state__exact": "READY"}, {"ready", "noop"}),
        ({"job_type": "SAVE_OBJECT", "state__exact": "FAILED"}, {"failed"}),
        ({"q": "<failed>"}, {"failed"}),
        ({"_facets": "1"}, {"ready", "noop", "failed", "created", "done"}),  # "Show counts"
        ({"p": "1"}, {"ready", "noop", "failed", "created", "done"}),
    ],
    ids=["all", "state", "type+state", "search", "facets", "page"],
)
def test_admin_changelist_filters_and_search_without_unbounded_count(
    admin_client, jobs, query, expected
):
    query = {k: v.replace("<failed>", jobs["failed"].job_id) for k, v in query.items()}
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(CHANGELIST, query)
    assert response.status_code == 200
    assert _unbounded_counts(captured.captured_queries) == []
    # The job-type filter lists the registry, not SELECT DISTINCT over every job.
    assert not [q for q in captured.captured_queries if "DISTINCT" in q["sql"].upper()]
    shown = {name for name, job in jobs.items() if job.job_id.encode() in response.content}
    assert shown == expected


def test_admin_change_page_shows_only_note_and_max_attempts_as_inputs(admin_client, jobs):
    job = jobs["failed"]
    response = admin_client.get(reverse("admin:inbox_job_change", args=[job.job_id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="note"' in html and 'name="max_attempts"' in html
    for name in READ_ONLY:
        assert f'name="{name}"' not in html, name
    assert job.vault_path in html  # shown, read-only


def test_admin_change_post_edits_note_and_max_attempts_and_records_admin_edit(admin_client, jobs):
    job = jobs["failed"]
    before = Job.objects.filter(job_id=job.job_id).values().get()
    response = admin_client.post(
        reverse("admin:inbox_job_change", args=[job.job_id]),
        {
            "note": "checked the vault",
            "max_attempts": "9",
            # Smuggled values for read-only fields are ignored.
            "state": "READY",
            "vault_path": "elsewhere/x.md",
            "attempt_count": "0",
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    after = Job.objects.filter(job_id=job.job_id).values().get()
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"note", "max_attempts", "updated_at"}
    assert (after["note"], after["max_attempts"], after["state"]) == (
        "checked the vault",
        9,
        JobState.FAILED,
    )
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.actor) == (EventType.ADMIN_EDIT, "root")
    assert event.detail["fields"] == ["max_attempts", "note"]
    assert event.detail["before"] == {"note": "", "max_attempts": before["max_attempts"]}


def test_admin_change_post_without_changes_records_nothing(admin_client, jobs):
    job = jobs["ready"]
    count = AuditEvent.objects.count()
    response = admin_client.post(
        reverse("admin:inbox_job_change", args=[job.job_id]),
        {"note": "", "max_attempts": str(job.max_attempts), "_save": "Save"},
    )
    assert response.status_code == 302
    assert AuditEvent.objects.count() == count


def test_admin_has_no_add_or_delete(admin_client, jobs):
    job = jobs["done"]
    before = list(Job.objects.order_by("job_id").values())
    assert admin_client.get(reverse("admin:inbox_job_add")).status_code == 403
    delete_url = reverse("admin:inbox_job_delete", args=[job.job_id])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    response = admin_client.post(
        CHANGELIST,
        {"action": "delete_selected", "_selected_action": [job.job_id], "post": "yes"},
    )
    assert response.status_code in (200, 302)
    assert b"delete_selected" not in admin_client.get(CHANGELIST).content
    assert list(Job.objects.order_by("job_id").values()) == before


def test_admin_retry_action_moves_only_failed_jobs_through_retry_job(admin_client, jobs):
    selected = [jobs["failed"].job_id, jobs["ready"].job_id, jobs["done"].job_id]
    events_before = AuditEvent.objects.count()
    response = admin_client.post(
        CHANGELIST, {"action": "retry_failed", "_selected_action": selected}, follow=True
    )
    assert response.status_code == 200
    states = dict(Job.objects.values_list("job_id", "state"))
    assert states[jobs["failed"].job_id] == JobState.READY
    assert states[jobs["ready"].job_id] == JobState.READY
    assert states[jobs["done"].job_id] == JobState.SUCCEEDED
    new = list(AuditEvent.objects.order_by("event_id")[events_before:])
    assert [(e.job_id, e.event_type, e.actor) for e in new] == [
        (jobs["failed"].job_id, EventType.RETRIED, "root")
    ]
    assert new[0].detail["from"] == JobState.FAILED


def test_admin_reject_action_rejects_created_job_with_admin_as_actor(admin_client, jobs):
    job = jobs["created"]
    admin_client.post(CHANGELIST, {"action": "reject_created", "_selected_action": [job.job_id]})
    assert Job.objects.get(job_id=job.job_id).state == JobState.REJECTED
    event = AuditEvent.objects.for_job(job.job_id).last()
    assert (event.event_type, event.actor) == (EventType.REJECTED, "root")


def test_admin_retry_action_needs_retry_permission(client, jobs):
    user = get_user_model().objects.create_user("staff", password="pw-123456789", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job"]))
    client.force_login(user)
    assert b"retry_failed" not in client.get(CHANGELIST).content
    client.post(CHANGELIST, {"action": "retry_failed", "_selected_action": [jobs["failed"].job_id]})
    assert Job.objects.get(job_id=jobs["failed"].job_id).state == JobState.FAILED
