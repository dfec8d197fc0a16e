"""Console actions: request-id dedupe, reasons, refusals, atomicity and the bulk actions."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from console.models import ActionRequest
from inbox import transitions, vault
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client):
    return login(client, "ops", "operator")


def _retried(job_id: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(job_id=job_id, event_type=EventType.RETRIED))


def test_retry_failed_job_becomes_ready_with_actor_and_reason(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    url = reverse("console:job_retry", args=[job.job_id])
    response = client.post(url, action_form("disk was full"), headers=hx("job-actions"))
    assert response.status_code == 200
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY
    [event] = _retried(job.job_id)
    assert event.actor == "ops"
    assert event.detail["reason"] == "disk was full"
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="job-actions"')
    assert "Retried" in body
    assert "job-changed" in response["HX-Trigger"]


def test_retry_same_request_id_twice_acts_once(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    url = reverse("console:job_retry", args=[job.job_id])
    form = action_form("double click")
    first = client.post(url, form, headers=hx("job-actions"))
    second = client.post(url, form, headers=hx("job-actions"))
    assert first.status_code == second.status_code == 200
    assert len(_retried(job.job_id)) == 1
    assert ActionRequest.objects.filter(request_id=form["request_id"]).count() == 1
    assert "Already done" in second.content.decode()
    assert "HX-Trigger" not in second


def test_retry_request_id_of_other_action_is_refused(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    form = action_form(job_ids=[job.job_id], mode="selected")
    client.post(reverse("console:bulk_reconcile"), form)  # nothing to reconcile: refused, stored
    response = client.post(reverse("console:job_retry", args=[job.job_id]), form)
    assert response.status_code == 409
    assert _retried(job.job_id) == []


def test_retry_without_reason_is_400_and_writes_nothing(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    events = AuditEvent.objects.count()
    url = reverse("console:job_retry", args=[job.job_id])
    response = client.post(url, action_form("   "), headers=hx("job-actions"))
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="job-actions"' in body
    assert "Give a reason" in body
    assert 'name="reason"' in body  # the form is re-rendered
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert AuditEvent.objects.count() == events
    assert ActionRequest.objects.count() == 0


def test_retry_without_request_id_is_400_and_writes_nothing(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    url = reverse("console:job_retry", args=[job.job_id])
    response = client.post(url, {"reason": "no id"})
    assert response.status_code == 400
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert _retried(job.job_id) == []


def test_retry_ready_job_is_refused_with_409_and_state_unchanged(client, operator) -> None:
    job = make_job("save", state=JobState.READY)
    url = reverse("console:job_retry", args=[job.job_id])
    response = client.post(url, action_form(), headers=hx("job-actions"))
    assert response.status_code == 409
    assert "READY" in response.content.decode()
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY
    assert _retried(job.job_id) == []
    assert ActionRequest.objects.get().outcome.startswith("refused")


def test_retry_crash_inside_action_rolls_back_request_id_and_writes(
    client, operator, monkeypatch
) -> None:
    """The ActionRequest row commits only with the action's own writes."""
    job = make_job("save", state=JobState.FAILED)
    real_retry = transitions.retry_job

    def retry_then_crash(job_id: str, **kwargs):
        real_retry(job_id, **kwargs)
        raise RuntimeError("crash after the write")

    monkeypatch.setattr(transitions, "retry_job", retry_then_crash)
    client.raise_request_exception = True
    with pytest.raises(RuntimeError):
        client.post(reverse("console:job_retry", args=[job.job_id]), action_form())
    assert ActionRequest.objects.count() == 0
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert _retried(job.job_id) == []


def test_job_detail_shows_retry_form_only_when_state_and_permission_allow(client) -> None:
    failed = make_job("save", state=JobState.FAILED)
    done = make_job("save", state=JobState.SUCCEEDED)
    login(client, "ops", "operator")
    assert (
        'name="reason"'
        in client.get(reverse("console:job_detail", args=[failed.job_id])).content.decode()
    )
    assert (
        'name="reason"'
        not in client.get(reverse("console:job_detail", args=[done.job_id])).content.decode()
    )
    client.logout()
    login(client, "look", "viewer")
    body = client.get(reverse("console:job_detail", args=[failed.job_id])).content.decode()
    assert 'name="reason"' not in body
    assert "inbox.retry_job" in body


# --- bulk --------------------------------------------------------------------------------------


def test_bulk_retry_selected_retries_only_failed_rows(client, operator) -> None:
    a = make_job("save", state=JobState.FAILED)
    b = make_job("save", state=JobState.FAILED)
    ready = make_job("save", state=JobState.READY)
    form = action_form(mode="selected", job_ids=[a.job_id, b.job_id, ready.job_id])
    response = client.post(reverse("console:bulk_retry"), form, headers=hx("bulk-result"))
    assert response.status_code == 200
    assert "Retried 2 job(s)" in response.content.decode()
    states = dict(Job.objects.values_list("job_id", "state"))
    assert states[a.job_id] == states[b.job_id] == JobState.READY
    assert states[ready.job_id] == JobState.READY
    assert _retried(ready.job_id) == []
    assert "jobs-changed" in response["HX-Trigger"]


def test_bulk_retry_matching_filter_respects_filter_and_limit(client, operator) -> None:
    inside = [make_job("save", state=JobState.FAILED, mission_id="m-a") for _ in range(3)]
    outside = make_job("save", state=JobState.FAILED, mission_id="m-b")
    form = action_form(mode="matching", mission="m-a", limit="2")
    response = client.post(reverse("console:bulk_retry"), form)
    assert response.status_code == 200
    retried = set(
        AuditEvent.objects.filter(event_type=EventType.RETRIED).values_list("job_id", flat=True)
    )
    assert len(retried) == 2
    assert retried <= {j.job_id for j in inside}
    assert Job.objects.get(job_id=outside.job_id).state == JobState.FAILED


def test_bulk_retry_nothing_eligible_is_409(client, operator) -> None:
    ready = make_job("save", state=JobState.READY)
    form = action_form(mode="selected", job_ids=[ready.job_id])
    response = client.post(reverse("console:bulk_retry"), form, headers=hx("bulk-result"))
    assert response.status_code == 409
    assert "Nothing to do" in response.content.decode()


def test_bulk_retry_same_request_id_twice_acts_once(client, operator) -> None:
    job = make_job("save", state=JobState.FAILED)
    form = action_form(mode="selected", job_ids=[job.job_id])
    client.post(reverse("console:bulk_retry"), form)
    second = client.post(reverse("console:bulk_retry"), form, headers=hx("bulk-result"))
    assert "Already done" in second.content.decode()
    assert len(_retried(job.job_id)) == 1


def test_bulk_preview_lists_eligible_and_skipped_rows(client, operator) -> None:
    failed = make_job("save", state=JobState.FAILED)
    ready = make_job("save", state=JobState.READY)
    params = {"mode": "selected", "job_ids": [failed.job_id, ready.job_id]}
    response = client.get(reverse("console:bulk_preview"), params, headers=hx("bulk-preview"))
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="bulk-preview"')
    assert failed.job_id in body
    assert "is READY, not FAILED" in body
    assert Job.objects.get(job_id=failed.job_id).state == JobState.FAILED  # read only


def test_bulk_reconcile_confirms_absent_objects_and_skips_present(
    client, operator, settings, tmp_path
) -> None:
    settings.VAULT_ROOT = tmp_path / "vault"
    (tmp_path / "vault").mkdir()
    gone = make_job("delete", state=JobState.OUTCOME_UNKNOWN)
    kept = make_job("delete", state=JobState.OUTCOME_UNKNOWN)
    content = f"# Note {kept.object_id.removeprefix('note-')}\n"
    vault.save(
        kept.vault_path, content=content, provenance_hash=vault.sha256_bytes(content.encode())
    )
    form = action_form("vault checked", mode="selected", job_ids=[gone.job_id, kept.job_id])
    response = client.post(reverse("console:bulk_reconcile"), form, headers=hx("bulk-result"))
    assert response.status_code == 200, response.content
    assert "Reconciled 1 job(s)" in response.content.decode()
    gone = Job.objects.get(job_id=gone.job_id)
    assert (gone.state, gone.result_code) == (JobState.RECONCILED, "CONFIRMED_DELETED")
    event = AuditEvent.objects.get(job_id=gone.job_id, event_type=EventType.RECONCILED)
    assert (event.actor, event.detail["reason"]) == ("ops", "vault checked")
    assert Job.objects.get(job_id=kept.job_id).state == JobState.OUTCOME_UNKNOWN


@pytest.mark.django_db(transaction=True)
def test_retry_concurrent_double_submit_acts_once() -> None:
    """Two requests with one request id at the same moment (a double click on two
    connections): the unique request id lets exactly one act; the other re-renders."""
    import threading

    from django.db import connections

    from tests.console.pagekit import make_user

    job = make_job("save", state=JobState.FAILED)
    user = make_user("ops", "operator")
    url = reverse("console:job_retry", args=[job.job_id])
    form = action_form("double click")
    barrier = threading.Barrier(2)
    bodies: list[str] = []

    def submit() -> None:
        client = Client()
        client.force_login(user)
        barrier.wait()
        try:
            bodies.append(client.post(url, form, headers=hx("job-actions")).content.decode())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(bodies) == 2
    assert len(_retried(job.job_id)) == 1
    assert sum("Already done" in body for body in bodies) == 1


def test_retry_in_minutes_defers_the_job_on_the_database_clock(client, operator) -> None:
    from core.clock import db_now

    job = make_job("save", state=JobState.FAILED)
    url = reverse("console:job_retry", args=[job.job_id])
    before = db_now()
    form = {**action_form("after the maintenance window"), "delay_minutes": "15"}
    response = client.post(url, form, headers=hx("job-actions"))
    assert response.status_code == 200
    row = Job.objects.get(job_id=job.job_id)
    assert row.state == JobState.READY
    assert 14 * 60 <= (row.run_after - before).total_seconds() <= 16 * 60
    assert "will not be claimed before" in response.content.decode()
    assert transitions.claim_next_jobs(scope="save", worker_id="w", lease_seconds=30, limit=5) == []


@pytest.mark.parametrize("delay", ["-1", "1.5", "soon", "10081", "9" * 40])
def test_retry_in_minutes_out_of_range_is_400_and_writes_nothing(client, operator, delay) -> None:
    job = make_job("save", state=JobState.FAILED)
    events = AuditEvent.objects.count()
    url = reverse("console:job_retry", args=[job.job_id])
    form = {**action_form("later"), "delay_minutes": delay}
    response = client.post(url, form, headers=hx("job-actions"))
    assert response.status_code == 400
    assert "whole number of minutes" in response.content.decode()
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert AuditEvent.objects.count() == events
