"""The approvals queue: the whole queue is reachable by pages; bulk approve / deny
with a preview naming the rows this user may not decide and why; each row says what the delete
keeps (for a consolidation delete, the copy that stays, probed)."""

from __future__ import annotations

import re
import uuid
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from console.htmx import dom_id
from inbox.models import Job, JobState
from tests.console.pagekit import hx, login
from tests.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _vault(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"


@pytest.fixture
def approver(client: Client):
    return login(client, "appr", "approver")


def _rows(html: str) -> list[str]:
    return re.findall(r'name="job_ids" value="([^"]+)" form="approvals-bulk"', html)


def test_queue_longer_than_a_page_is_reachable_and_says_how_much(client, approver, monkeypatch):
    monkeypatch.setattr("console.approvals.QUEUE_LIMIT", 4)
    jobs = [make_job("delete", JobState.CREATED, requested_by="operator") for _ in range(6)]
    first = client.get(reverse("console:approvals")).content.decode()
    assert "Showing 1–4 of 6, oldest first." in first
    assert '<span id="pending-count" ' in first and ">6</span>" in first
    nxt = unescape(re.search(r'rel="next" href="([^"]+)"', first).group(1))
    second = client.get(reverse("console:approvals") + nxt).content.decode()
    assert "Showing 5–6 of 6, oldest first." in second
    assert sorted(_rows(first) + _rows(second)) == sorted(job.job_id for job in jobs)
    assert 'rel="next"' not in second


def test_bulk_preview_names_rows_this_user_may_not_decide_and_why(client, approver):
    others = [make_job("delete", JobState.CREATED, requested_by="operator") for _ in range(2)]
    own = make_job("delete", JobState.CREATED, requested_by="appr")
    done = make_job("delete", JobState.READY)
    save = make_job("save", JobState.READY)
    ids = [*(job.job_id for job in others), own.job_id, done.job_id, save.job_id, "no-such"]
    html = client.get(
        reverse("console:approvals_bulk_preview"),
        {"job_ids": ids},
        headers=hx("approvals-bulk-preview"),
    ).content.decode()
    assert "<strong>2</strong> ticked row(s) you may decide" in html
    assert f'{own.job_id}</span>: <span class="bad">you requested it: someone else must' in html
    assert "already decided: it is READY" in html
    assert "a SAVE_OBJECT needs no approval" in html
    assert "no such job" in html
    assert all(job.state == JobState.CREATED for job in Job.objects.filter(job_id__in=ids[:3]))


def test_bulk_approve_decides_the_others_refuses_own_and_audits_each(client, approver):
    others = [make_job("delete", JobState.CREATED, requested_by="operator") for _ in range(3)]
    own = make_job("delete", JobState.CREATED, requested_by="appr")
    form = {
        "request_id": uuid.uuid4().hex,
        "reason": "duplicates, checked",
        "decision": "approve",
        "job_ids": [job.job_id for job in [*others, own]],
    }
    response = client.post(
        reverse("console:approvals_bulk"), form, headers=hx("approvals-bulk-result")
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "Approved 3 delete(s); 1 not decided." in body
    assert "four eyes" in body
    states = dict(Job.objects.values_list("job_id", "state"))
    assert {states[job.job_id] for job in others} == {JobState.READY}
    assert states[own.job_id] == JobState.CREATED
    events = AuditEvent.objects.filter(event_type=EventType.APPROVED)
    assert sorted(e.job_id for e in events) == sorted(job.job_id for job in others)
    assert {(e.actor, e.detail["reason"]) for e in events} == {("appr", "duplicates, checked")}
    assert "approvals-decided" in response["HX-Trigger"]


def test_bulk_deny_without_reason_is_400_and_decides_nothing(client, approver):
    job = make_job("delete", JobState.CREATED, requested_by="operator")
    form = {
        "request_id": uuid.uuid4().hex,
        "reason": "",
        "decision": "deny",
        "job_ids": [job.job_id],
    }
    response = client.post(
        reverse("console:approvals_bulk"), form, headers=hx("approvals-bulk-result")
    )
    assert response.status_code == 400
    assert "Give a reason" in response.content.decode()
    assert Job.objects.get(job_id=job.job_id).state == JobState.CREATED


def test_bulk_with_only_own_requests_is_409(client, approver):
    own = make_job("delete", JobState.CREATED, requested_by="appr")
    form = {
        "request_id": uuid.uuid4().hex,
        "reason": "x",
        "decision": "approve",
        "job_ids": [own.job_id],
    }
    response = client.post(reverse("console:approvals_bulk"), form)
    assert response.status_code == 409
    assert Job.objects.get(job_id=own.job_id).state == JobState.CREATED


@pytest.mark.django_db(transaction=True)
def test_consolidation_delete_row_shows_the_copy_it_keeps(client, approver, settings):
    from runs.consolidators import seed_duplicate_vault
    from runs.worker import ConsolidatorWorker

    seed_duplicate_vault(settings.VAULT_ROOT, originals=1, copies=1)
    ConsolidatorWorker(store="vault", worker_id="c-keep", once=True, say=lambda _t: None).run()
    delete = Job.objects.get(job_type="DELETE_OBJECT")
    html = client.get(reverse("console:approvals")).content.decode()
    row = html.split(f'id="{dom_id("approval", delete.job_id)}"')[1].split("</tr>")[0]
    assert 'keeps</span> <span class="mono">notes/dup-1.md</span>' in row
    assert "(present, same hash" in row
    # The kept copy goes missing: the row says so before anyone approves the last copy away.
    (settings.VAULT_ROOT / "notes" / "dup-1.md").unlink()
    html = client.get(reverse("console:approvals")).content.decode()
    assert "the kept copy is missing" in html


def test_plain_delete_row_says_it_keeps_nothing(client, approver):
    make_job("delete", JobState.CREATED, requested_by="operator")
    html = client.get(reverse("console:approvals")).content.decode()
    assert "keeps nothing: a plain delete, requested by operator" in html


def test_approval_rows_poll_is_204_until_a_row_changes(client, approver):
    job = make_job("delete", JobState.CREATED, requested_by="operator")
    html = client.get(reverse("console:approvals")).content.decode()
    tag = re.search(r'<tbody id="approval-rows"[^>]*>', html).group(0)
    url = unescape(re.search(r'hx-get="([^"]*)"', tag).group(1))
    version = re.search(r'data-v="([^"]*)"', tag).group(1)
    poll = reverse("console:approvals") + url + f"&v={version}"
    assert client.get(poll, headers=hx("approval-rows")).status_code == 204
    from django.contrib.auth import get_user_model

    from inbox import approvals

    approvals.deny_delete(
        job.job_id, approver=get_user_model().objects.get(username="appr"), reason="not needed"
    )
    response = client.get(poll, headers=hx("approval-rows"))
    assert response.status_code == 200
    assert job.job_id not in response.content.decode()
