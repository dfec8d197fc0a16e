"""Cancel: an operator cancels a job that has not begun (CREATED, READY, or CLAIMED before
begin), from its page or in bulk with a preview; reason required, audited, refused with a
clear message once the job began, and nothing written when refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client):
    return login(client, "ops", "operator")


def _cancelled(job_id: str) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(
            job_id=job_id, event_type=EventType.REJECTED, result_code="CANCELLED"
        )
    )


def _row(job_id: str) -> tuple[str, str, str]:
    return Job.objects.filter(job_id=job_id).values_list("state", "result_code", "claim_id").get()


def test_operator_role_may_cancel_and_approver_may_not(client) -> None:
    login(client, "ops", "operator")  # re-creates the roles if a flush emptied them
    # The roles come from the console's migrations (0003 grants cancel_job to operators).
    operator = Group.objects.get(name="operator").permissions.values_list("codename", flat=True)
    approver = Group.objects.get(name="approver").permissions.values_list("codename", flat=True)
    assert "cancel_job" in operator
    assert "cancel_job" not in approver


@pytest.mark.parametrize(
    ("kind", "state"),
    [("save", JobState.READY), ("save", JobState.CLAIMED), ("delete", JobState.CREATED)],
)
def test_cancel_not_begun_job_from_its_page_rejects_it_with_reason(
    client, operator, kind, state
) -> None:
    job = make_job(kind, state=state)
    url = reverse("console:job_cancel", args=[job.job_id])
    response = client.post(url, action_form("customer withdrew it"), headers=hx("job-actions"))
    assert response.status_code == 200
    assert _row(job.job_id)[:2] == (JobState.REJECTED, "CANCELLED")
    [event] = _cancelled(job.job_id)
    assert (event.actor, event.detail["reason"]) == ("ops", "customer withdrew it")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="job-actions"')
    assert "Cancelled: the job is REJECTED (CANCELLED)" in body
    # The other panels come along out of band: the page shows the job as it is now.
    assert 'id="job-summary" class="panel" aria-label="Summary" hx-swap-oob="true"' in body
    assert "state-REJECTED" in body


def test_cancel_executing_job_is_refused_with_409_and_writes_nothing(client, operator) -> None:
    job = make_job("save", state=JobState.EXECUTING)
    before = (_row(job.job_id), AuditEvent.objects.count())
    url = reverse("console:job_cancel", args=[job.job_id])
    response = client.post(url, action_form("too late"), headers=hx("job-actions"))
    assert response.status_code == 409
    assert "EXECUTING" in response.content.decode()
    assert (_row(job.job_id), AuditEvent.objects.count()) == before


def test_cancel_without_reason_is_400_in_place_and_writes_nothing(client, operator) -> None:
    job = make_job("save", state=JobState.READY)
    before = (_row(job.job_id), AuditEvent.objects.count())
    url = reverse("console:job_cancel", args=[job.job_id])
    response = client.post(url, action_form(""), headers=hx("job-actions"))
    assert response.status_code == 400
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="job-actions"')
    assert "Give a reason" in body
    assert (_row(job.job_id), AuditEvent.objects.count()) == before


def test_cancel_as_viewer_is_403_and_writes_nothing(client) -> None:
    login(client, "look", "viewer")
    job = make_job("save", state=JobState.READY)
    url = reverse("console:job_cancel", args=[job.job_id])
    response = client.post(url, action_form("nope"), headers=hx("job-actions"))
    assert response.status_code == 403
    assert _row(job.job_id)[0] == JobState.READY


def test_job_page_shows_cancel_only_when_state_and_permission_allow(client) -> None:
    ready = make_job("save", state=JobState.READY)
    running = make_job("save", state=JobState.EXECUTING)
    login(client, "ops", "operator")
    assert (
        "Cancel job</button>"
        in client.get(reverse("console:job_detail", args=[ready.job_id])).content.decode()
    )
    html = client.get(reverse("console:job_detail", args=[running.job_id])).content.decode()
    assert "Cancel job</button>" not in html
    assert "A job that began cannot be cancelled" in html
    client.logout()
    login(client, "look", "viewer")
    html = client.get(reverse("console:job_detail", args=[ready.job_id])).content.decode()
    assert "Cancel job</button>" not in html
    assert "inbox.cancel_job" in html


def test_bulk_cancel_preview_then_cancel_moves_only_not_begun_rows(client, operator) -> None:
    ready = make_job("save", state=JobState.READY)
    claimed = make_job("save", state=JobState.CLAIMED)
    running = make_job("save", state=JobState.EXECUTING)
    done = make_job("save", state=JobState.SUCCEEDED)
    ids = [ready.job_id, claimed.job_id, running.job_id, done.job_id]
    preview = client.get(
        reverse("console:bulk_preview"),
        {"mode": "selected", "job_ids": ids},
        headers=hx("bulk-preview"),
    ).content.decode()
    cancel_part = preview.split('id="pv-cancel"')[1]
    assert ready.job_id in cancel_part and claimed.job_id in cancel_part
    assert "is EXECUTING, not CLAIMED or CREATED or READY" in cancel_part

    form = action_form("batch withdrawn", mode="selected", job_ids=ids)
    response = client.post(reverse("console:bulk_cancel"), form, headers=hx("bulk-result"))
    assert response.status_code == 200
    assert "Cancelled 2 job(s)" in response.content.decode()
    assert _row(ready.job_id)[:2] == _row(claimed.job_id)[:2] == (JobState.REJECTED, "CANCELLED")
    assert _row(running.job_id)[0] == JobState.EXECUTING
    assert _row(done.job_id)[0] == JobState.SUCCEEDED
    assert "jobs-changed" in response["HX-Trigger"]


def test_bulk_cancel_matching_filter_respects_filter_and_limit(client, operator) -> None:
    inside = [make_job("save", state=JobState.READY, mission_id="m-c") for _ in range(3)]
    make_job("save", state=JobState.READY, mission_id="m-other")
    form = action_form("mission withdrawn", mode="matching", mission="m-c", limit="2")
    client.post(reverse("console:bulk_cancel"), form)
    cancelled = {e.job_id for e in AuditEvent.objects.filter(result_code="CANCELLED")}
    assert len(cancelled) == 2
    assert cancelled <= {job.job_id for job in inside}


def test_bulk_cancel_nothing_eligible_is_409_and_writes_nothing(client, operator) -> None:
    running = make_job("save", state=JobState.EXECUTING)
    before = AuditEvent.objects.count()
    form = action_form("x", mode="selected", job_ids=[running.job_id])
    response = client.post(reverse("console:bulk_cancel"), form, headers=hx("bulk-result"))
    assert response.status_code == 409
    assert AuditEvent.objects.count() == before
