"""Every id the inbox accepts can be read back, linked and acted on; every id it refuses is
refused at the door (422 from the API, a refusal from ``enqueue``) before anything is stored,
and a request whose answer fails to build stores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from inbox import transitions
from inbox.ids import ID_PATTERN, MAX_ID_LENGTH
from inbox.models import Job, JobState
from inbox.tokens import create_token
from tests.console.apikit import post
from tests.console.pagekit import action_form, hx, login
from tests.factories import noop_doc

pytestmark = pytest.mark.django_db


ACCEPTED = [
    "plain",
    "with space",
    "a/b",
    "a/b/",
    "a%2Fb",
    "100%",
    "%",
    "a?b#c&d=e",
    "é ü/ключ:1",
    "日本語-ジョブ",
    "emoji-🚀",
    ".hidden",
    "a..b",
    "x" * MAX_ID_LENGTH,
]
REFUSED = [
    "nl-1\n",
    "cr\r",
    "tab\tid",
    "nul\x00id",
    "del\x7f",
    "c1\x85",
    "line\u2028sep",
    "rtl\u202eoverride",
    "",
    "   ",
    ".",
    "..",
    "../escape",
    "a/../b",
    "a/./b",
    "a/..",
    "x" * (MAX_ID_LENGTH + 1),
]


@pytest.fixture
def token() -> str:
    return create_token(producer="acme", actor="test").token


@pytest.mark.parametrize("job_id", ACCEPTED)
def test_api_accepted_id_is_created_and_read_back_at_its_location(
    client: Client, token: str, job_id: str
) -> None:
    response = post(client, noop_doc(job_id=job_id), token)
    assert response.status_code == 201, response.content
    location = response["Location"]
    assert location == reverse("console:api:get_job", kwargs={"job_id": job_id})
    got = client.get(location, headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200
    assert got.json()["job_id"] == job_id


@pytest.mark.parametrize("job_id", REFUSED)
def test_api_refused_id_is_422_and_stores_nothing(client: Client, token: str, job_id: str) -> None:
    events = AuditEvent.objects.count()
    response = post(client, noop_doc(job_id=job_id), token)
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert any(p.startswith("job_id: ") for p in error["problems"])
    assert not Job.objects.exists()
    assert AuditEvent.objects.count() == events


@pytest.mark.parametrize("job_id", ["nl-1\n", "a\x85"])
def test_api_get_of_a_refused_id_is_a_json_404(client: Client, token: str, job_id: str) -> None:
    url = reverse("console:api:get_job", kwargs={"job_id": job_id})
    response = client.get(url, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 404


def test_the_schema_pattern_says_the_same_as_the_rule() -> None:
    import re

    for job_id in ACCEPTED:
        assert re.match(ID_PATTERN, job_id), job_id
    for job_id in REFUSED:
        # Python's "$" also matches before a final newline; JSON Schema's does not.
        if not job_id.endswith(("\n", "\r")):
            assert not re.match(ID_PATTERN, job_id), job_id


def test_a_failure_building_the_answer_stores_nothing(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import console.api

    def broken(job_id: str) -> str:
        raise RuntimeError("the Location could not be built")

    monkeypatch.setattr(console.api, "_job_url", broken)
    events = AuditEvent.objects.count()
    client.raise_request_exception = False
    response = post(client, noop_doc(), token)
    assert response.status_code == 500
    assert not Job.objects.exists()
    assert AuditEvent.objects.count() == events


@pytest.mark.parametrize("job_id", ACCEPTED)
def test_console_page_and_retry_of_an_accepted_id(client: Client, job_id: str) -> None:
    transitions.create_job(noop_doc(job_id=job_id), requested_by="acme")
    Job.objects.filter(job_id=job_id).update(state=JobState.FAILED)
    login(client, "ops", "operator")
    page = client.get(reverse("console:job_detail", args=[job_id]))
    assert page.status_code == 200
    assert page.context["job"].job_id == job_id
    retry = reverse("console:job_retry", args=[job_id])
    assert retry in page.content.decode().replace("&amp;", "&")
    response = client.post(retry, action_form("try again"), headers=hx("job-actions"))
    assert response.status_code == 200
    assert Job.objects.get(job_id=job_id).state == JobState.READY


def test_enqueue_stores_accepted_ids_and_refuses_the_others(tmp_path: Path) -> None:
    lines = [json.dumps(noop_doc(job_id=job_id)) for job_id in ACCEPTED + REFUSED]
    source = tmp_path / "jobs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as exit_:
        call_command("enqueue", str(source), "--quiet")
    assert exit_.value.code == 1
    assert set(Job.objects.values_list("job_id", flat=True)) == set(ACCEPTED)
