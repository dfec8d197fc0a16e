"""Producers are isolated: one sees, replays and conflicts only with its own jobs, and no
answer names another producer's job (its id, state or owner)."""

from __future__ import annotations

import pytest
from django.test import Client

from inbox.models import Job
from inbox.tokens import create_token
from tests.console.apikit import JOBS, post
from tests.console.test_routes import snapshot
from tests.factories import noop_doc, save_doc

pytestmark = pytest.mark.django_db


@pytest.fixture
def tokens() -> dict[str, str]:
    return {name: create_token(producer=name, actor="test").token for name in ("acme", "umbrella")}


def _says_nothing_of(response, job: Job) -> None:
    text = response.content.decode()
    assert job.requested_by not in text
    assert job.state not in text


def test_another_producers_document_is_not_replayed_but_a_409(client: Client, tokens) -> None:
    doc = save_doc(job_id="shared-id-1", idempotency_key="shared-key-1")
    assert post(client, doc, tokens["acme"]).status_code == 201
    before = snapshot()
    response = post(client, doc, tokens["umbrella"])
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert error["problems"] == ["job_id: 'shared-id-1' is already in use; choose another"]
    _says_nothing_of(response, Job.objects.get(job_id="shared-id-1"))
    assert snapshot() == before
    got = client.get(
        f"{JOBS}/shared-id-1", headers={"Authorization": f"Bearer {tokens['umbrella']}"}
    )
    assert got.status_code == 404


def test_another_producers_key_is_a_409_that_names_no_job(client: Client, tokens) -> None:
    theirs = noop_doc(job_id="acme-secret-job", idempotency_key="common-key")
    assert post(client, theirs, tokens["acme"]).status_code == 201
    mine = noop_doc(job_id="umbrella-1", idempotency_key="common-key")
    before = snapshot()
    response = post(client, mine, tokens["umbrella"])
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert error["problems"] == ["idempotency_key: 'common-key' is already in use; choose another"]
    assert "acme-secret-job" not in response.content.decode()
    _says_nothing_of(response, Job.objects.get(job_id="acme-secret-job"))
    assert snapshot() == before


def test_another_producers_id_with_other_content_names_no_job(client: Client, tokens) -> None:
    assert (
        post(client, noop_doc(job_id="taken", idempotency_key="k-acme"), tokens["acme"]).status_code
        == 201
    )
    response = post(client, noop_doc(job_id="taken", idempotency_key="k-umb"), tokens["umbrella"])
    assert response.status_code == 409
    assert "k-acme" not in response.content.decode()
    assert response.json()["errors"][0]["problems"] == [
        "job_id: 'taken' is already in use; choose another"
    ]


def test_a_list_touching_another_producers_job_stores_nothing(client: Client, tokens) -> None:
    theirs = noop_doc()
    assert post(client, theirs, tokens["acme"]).status_code == 201
    fresh = noop_doc()
    before = snapshot()
    response = post(client, [fresh, theirs], tokens["umbrella"])
    assert response.status_code == 409
    assert [e["index"] for e in response.json()["errors"]] == [1]
    assert snapshot() == before
    assert not Job.objects.filter(job_id=fresh["job_id"]).exists()


def test_own_replay_and_own_conflict_still_name_the_producers_own_job(
    client: Client, tokens
) -> None:
    doc = noop_doc(job_id="mine-1", idempotency_key="mine-key")
    assert post(client, doc, tokens["acme"]).status_code == 201
    replay = post(client, doc, tokens["acme"])
    assert replay.status_code == 200
    assert replay.json()["jobs"][0]["outcome"] == "replayed"
    conflict = post(client, noop_doc(job_id="mine-2", idempotency_key="mine-key"), tokens["acme"])
    assert conflict.status_code == 409
    assert "mine-1" in conflict.json()["errors"][0]["problems"][0]
