"""The producer API: every status code, tokens vs sessions and CSRF, the OpenAPI
document, and the route policies of every API route."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventType
from console.api import api
from inbox.models import Job, JobState
from inbox.tokens import create_token, revoke_token
from tests.console.apikit import JOBS, post
from tests.console.test_routes import ROUTES, snapshot
from tests.factories import delete_doc, make_job, noop_doc, save_doc

pytestmark = pytest.mark.django_db


@pytest.fixture
def token() -> str:
    return create_token(producer="acme", actor="test").token


# --- POST: one document -------------------------------------------------------------------------


def test_post_job_with_token_is_created_201_as_the_producer(client: Client, token: str) -> None:
    doc = save_doc()
    response = post(client, doc, token)
    assert response.status_code == 201
    body = response.json()
    assert body["created"] == 1 and body["replayed"] == 0
    assert body["jobs"] == [
        {"index": 0, "job_id": doc["job_id"], "state": "READY", "outcome": "created"}
    ]
    assert response["Location"] == f"/api/v1/jobs/{doc['job_id']}"
    job = Job.objects.get(job_id=doc["job_id"])
    assert job.requested_by == "acme"
    [requested] = AuditEvent.objects.filter(job_id=job.job_id, event_type=EventType.REQUESTED)
    assert requested.actor == "acme"


def test_post_same_job_again_is_replay_200_and_stores_nothing(client: Client, token: str) -> None:
    doc = save_doc()
    assert post(client, doc, token).status_code == 201
    before = snapshot()
    response = post(client, doc, token)
    assert response.status_code == 200
    assert response.json()["jobs"][0]["outcome"] == "replayed"
    assert snapshot() == before


def test_post_same_key_other_content_is_conflict_409(client: Client, token: str) -> None:
    doc = save_doc()
    assert post(client, doc, token).status_code == 201
    before = snapshot()
    response = post(client, {**doc, "content": "other", "provenance_hash": "0" * 64}, token)
    # The changed hash fails validation first (422); a valid variant is the conflict (409).
    assert response.status_code == 422
    variant = save_doc(content="# another body\n")
    variant.update(job_id=doc["job_id"], idempotency_key=doc["idempotency_key"])
    response = post(client, variant, token)
    assert response.status_code == 409
    body = response.json()
    assert "idempotency conflict" in body["detail"]
    assert body["errors"][0]["index"] == 0
    assert doc["job_id"] in body["errors"][0]["problems"][0]
    assert snapshot() == before


def test_post_invalid_job_is_422_with_every_problem(client: Client, token: str) -> None:
    doc = save_doc(vault_path="../etc/passwd", surprise=1)
    del doc["mission_id"]
    response = post(client, doc, token)
    assert response.status_code == 422
    [error] = response.json()["errors"]
    problems = " | ".join(error["problems"])
    assert "mission_id: missing" in problems
    assert "surprise: unknown field" in problems
    assert "vault_path" in problems
    assert not Job.objects.exists()


def test_post_not_json_is_422(client: Client, token: str) -> None:
    response = post(client, b"{not json", token)
    assert response.status_code == 422
    assert "not valid JSON" in response.json()["detail"]
    assert post(client, [], token).status_code == 422
    assert post(client, "12", token).status_code == 422
    assert not Job.objects.exists()


# --- POST: a list -------------------------------------------------------------------------------


def test_post_list_creates_all_in_order_201(client: Client, token: str) -> None:
    docs = [save_doc(), noop_doc(), delete_doc()]
    response = post(client, docs, token)
    assert response.status_code == 201
    body = response.json()
    assert body["created"] == 3
    assert [j["job_id"] for j in body["jobs"]] == [d["job_id"] for d in docs]
    assert [j["state"] for j in body["jobs"]] == ["READY", "READY", "CREATED"]
    assert "Location" not in response


def test_post_list_with_replays_and_new_is_201_all_replays_200(client: Client, token: str) -> None:
    first = save_doc()
    post(client, first, token)
    docs = [first, save_doc()]
    response = post(client, docs, token)
    assert response.status_code == 201
    assert [j["outcome"] for j in response.json()["jobs"]] == ["replayed", "created"]
    assert post(client, docs, token).status_code == 200


def test_post_list_with_one_bad_document_stores_nothing_422(client: Client, token: str) -> None:
    docs = [save_doc(), save_doc(job_version=7), noop_doc(), {"job_id": 3}]
    before = snapshot()
    response = post(client, docs, token)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert [e["index"] for e in errors] == [1, 3]
    assert "job_version: 7 is not supported" in " ".join(errors[0]["problems"])
    assert errors[1]["job_id"] is None
    assert len(errors[1]["problems"]) > 3  # every problem of the document, not the first
    assert snapshot() == before


def test_post_list_with_conflicting_twins_stores_nothing_409(client: Client, token: str) -> None:
    doc = save_doc()
    twin = save_doc(content="# other\n")
    twin.update(job_id=doc["job_id"], idempotency_key=doc["idempotency_key"])
    before = snapshot()
    response = post(client, [save_doc(), doc, twin], token)
    assert response.status_code == 409
    assert [e["index"] for e in response.json()["errors"]] == [2]
    assert snapshot() == before


def test_post_over_the_list_limit_is_413(client: Client, token: str, settings) -> None:
    settings.API_MAX_JOBS_PER_REQUEST = 3
    response = post(client, [noop_doc() for _ in range(4)], token)
    assert response.status_code == 413
    assert "over the limit of 3" in response.json()["detail"]
    assert post(client, [noop_doc() for _ in range(3)], token).status_code == 201


def test_post_over_the_body_limit_is_413_and_stores_nothing(
    client: Client, token: str, settings
) -> None:
    settings.API_MAX_BODY_BYTES = 2_000
    response = post(client, save_doc(content="x" * 3_000), token)
    assert response.status_code == 413
    assert not Job.objects.exists()


def test_post_1000_jobs_in_one_request_stores_all(client: Client, token: str) -> None:
    docs = [noop_doc() for _ in range(1000)]
    response = post(client, docs, token)
    assert response.status_code == 201
    assert response.json()["created"] == 1000
    assert Job.objects.count() == 1000


# --- authentication -----------------------------------------------------------------------------


def test_post_without_token_is_401_and_stores_nothing(client: Client) -> None:
    response = post(client, save_doc())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "header",
    ["Bearer jrc_not-a-real-token", "Bearer ", "Basic YWRtaW46YWRtaW4=", "Bearer " + "x" * 5000],
)
def test_post_with_bad_authorization_is_401(client: Client, header: str) -> None:
    create_token(producer="acme", actor="test")
    response = client.post(
        JOBS,
        data=json.dumps(save_doc()),
        content_type="application/json",
        headers={"Authorization": header},
    )
    assert response.status_code == 401
    assert not Job.objects.exists()


def test_post_with_revoked_token_is_401(client: Client, token: str) -> None:
    assert post(client, noop_doc(), token).status_code == 201
    revoke_token(producer="acme", actor="test")
    assert post(client, noop_doc(), token).status_code == 401


def test_post_with_bad_token_and_a_session_is_still_401(client: Client) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "r@x.test", None))
    assert post(client, noop_doc(), "jrc_wrong").status_code == 401


def test_post_with_token_needs_no_csrf(token: str) -> None:
    client = Client(enforce_csrf_checks=True)
    assert post(client, noop_doc(), token).status_code == 201


def _user_with_add_job(username: str = "producer-person"):
    user = get_user_model().objects.create_user(username, f"{username}@x.test", None)
    user.user_permissions.add(Permission.objects.get(codename="add_job"))
    return user


def test_post_with_session_without_csrf_is_403_and_stores_nothing() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user_with_add_job())
    response = post(client, noop_doc())
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not Job.objects.exists()


def test_post_with_session_and_csrf_token_is_created_as_the_user() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user_with_add_job())
    client.get(reverse("console:home"))  # sets the CSRF cookie
    csrf = client.cookies["csrftoken"].value
    doc = noop_doc()
    response = post(client, doc, **{"X-CSRFToken": csrf})
    assert response.status_code == 201
    assert Job.objects.get(job_id=doc["job_id"]).requested_by == "producer-person"


def test_post_with_session_without_permission_is_403(client: Client) -> None:
    client.force_login(get_user_model().objects.create_user("viewer-x", "v@x.test", None))
    assert post(client, noop_doc()).status_code == 403
    assert not Job.objects.exists()


# --- GET a job ----------------------------------------------------------------------------------


def test_get_job_gives_state_lease_and_trail(client: Client, token: str) -> None:
    doc = save_doc(job_id="nested/id-1")
    post(client, doc, token)
    from inbox import transitions

    transitions.claim_job(doc["job_id"], worker_id="w-1", lease_seconds=60)
    response = client.get(f"{JOBS}/nested/id-1", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "CLAIMED"
    assert body["lease"]["worker_id"] == "w-1"
    assert 0 < body["lease"]["seconds_left"] <= 60
    assert [e["event_type"] for e in body["trail"]] == ["REQUESTED", "READY", "CLAIMED"]
    assert "content" not in json.dumps(body)


def test_get_job_of_another_producer_is_404(client: Client, token: str) -> None:
    job = make_job("save", requested_by="someone-else")
    response = client.get(f"{JOBS}/{job.job_id}", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 404


def test_get_job_finished_has_no_lease(client: Client) -> None:
    job = make_job("save", state=JobState.SUCCEEDED)
    client.force_login(get_user_model().objects.create_user("v", "v@x.test", None))
    body = client.get(f"{JOBS}/{job.job_id}").json()
    assert body["lease"] is None
    assert body["trail"][-1]["event_type"] == "SUCCEEDED"


def test_get_job_without_token_is_401(client: Client) -> None:
    job = make_job("save")
    assert client.get(f"{JOBS}/{job.job_id}").status_code == 401


# --- the OpenAPI document and the docs ----------------------------------------------------------


def test_openapi_document_describes_both_endpoints_and_bearer_auth(client: Client) -> None:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    assert spec["openapi"].startswith("3.")
    assert set(spec["paths"]) == {"/api/v1/jobs", "/api/v1/jobs/{job_id}"}
    post_op = spec["paths"]["/api/v1/jobs"]["post"]
    assert {"200", "201", "401", "409", "413", "422"} <= set(post_op["responses"])
    body = post_op["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert body[1]["maxItems"] == 1000
    assert body[0] == {"$ref": "#/components/schemas/JobDocument"}
    mapping = spec["components"]["schemas"]["JobDocument"]["discriminator"]["mapping"]
    assert {"SAVE_OBJECT", "DELETE_OBJECT", "NOOP", "TASK"} <= set(mapping)
    schemes = spec["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())


def test_docs_page_uses_local_static_files_only(client: Client) -> None:
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui-bundle.js" in html
    assert "https://" not in html  # no CDN: the console runs without the internet
    # django-ninja is not an installed app: its files are found through the project's settings.
    for name in ("ninja/swagger-ui-bundle.js", "ninja/swagger-ui-init.js", "ninja/swagger-ui.css"):
        assert f"/static/{name}" in html
        assert finders.find(name), name
    assert 'data-api-csrf="true"' in html  # a session's POST from the page sends the token


# --- route policies -----------------------------------------------------------------------------

API_ROUTES = [r for r in ROUTES if r.route.startswith("api/v1/")]


def test_every_api_route_declares_a_policy() -> None:
    assert API_ROUTES
    kinds = {r.route: r.policy.kind for r in API_ROUTES}
    assert kinds["api/v1/jobs"] == "api"
    assert kinds["api/v1/jobs/<anyid:job_id>"] == "api"
    assert {kinds["api/v1/openapi.json"], kinds["api/v1/docs"]} == {"public"}


@pytest.mark.parametrize(
    "route", [r for r in API_ROUTES if r.policy.kind == "api"], ids=lambda r: r.route
)
def test_api_route_anonymous_is_401_and_writes_nothing(client: Client, route) -> None:
    job = make_job("save")
    url = "/" + route.route.replace("<anyid:job_id>", job.job_id)
    before = snapshot()
    body = json.dumps(noop_doc())
    responses = [
        client.get(url),
        client.post(url, data=body, content_type="application/json"),
        client.post(url),
    ]
    # 401 where the method exists; 405 where it does not (ninja answers that before auth).
    assert {r.status_code for r in responses} <= {401, 405}
    assert 401 in {r.status_code for r in responses}
    assert snapshot() == before


def test_api_is_one_ninja_api_mounted_under_the_console_namespace() -> None:
    assert api.urls_namespace == "console:api"
    assert reverse("console:api:get_job", kwargs={"job_id": "a/b"}) == "/api/v1/jobs/a/b"
