"""Every error under ``/api/`` is a JSON problem (``application/problem+json`` with title,
status, detail and errors), whichever layer answered it: the API's views, Django's URL
resolver, the NUL guard, a failing view, a busy database, a wrong method. The console's own
pages keep their HTML error pages."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.test import Client

from inbox.models import Job
from inbox.tokens import create_token
from tests.console.apikit import JOBS, post
from tests.factories import make_job, noop_doc

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


@pytest.fixture
def token() -> str:
    return create_token(producer="acme", actor="test").token


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"]
    assert isinstance(body["errors"], list)
    return body


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nope", "/api/v1/jobs/", "/api/v1/jobs/nl-1%0A", "/api/v2/jobs", "/api/"],
    ids=["unknown route", "empty id", "id with a newline", "other version", "api root"],
)
def test_not_found_under_the_api_is_a_problem(client: Client, token: str, path: str) -> None:
    assert_problem(client.get(path, headers=_bearer(token)), 404)


def test_unknown_job_is_a_problem(client: Client, token: str) -> None:
    body = assert_problem(client.get(f"{JOBS}/missing", headers=_bearer(token)), 404)
    assert "missing" in body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("get", JOBS, "POST"), ("put", JOBS, "POST"), ("post", f"{JOBS}/x", "GET")],
)
def test_wrong_method_is_a_problem_with_allow(
    client: Client, token: str, method: str, path: str, allowed: str
) -> None:
    response = getattr(client, method)(path, headers=_bearer(token))
    body = assert_problem(response, 405)
    assert response["Allow"] == allowed
    assert allowed in body["detail"]


@pytest.mark.parametrize("path", [f"{JOBS}/a%00b", f"{JOBS}/x?q=%00"])
def test_nul_in_the_address_is_a_problem(client: Client, token: str, path: str) -> None:
    body = assert_problem(client.get(path, headers=_bearer(token)), 400)
    assert "NUL" in body["detail"]


def test_without_token_is_a_problem_with_www_authenticate(client: Client) -> None:
    response = post(client, noop_doc())
    assert_problem(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_refused_document_is_a_problem_listing_its_errors(client: Client, token: str) -> None:
    body = assert_problem(post(client, noop_doc(job_version=9), token), 422)
    assert body["errors"][0]["index"] == 0


def test_conflict_and_too_large_are_problems(client: Client, token: str, settings) -> None:
    doc = noop_doc()
    post(client, doc, token)
    assert_problem(post(client, {**doc, "mission_id": "other"}, token), 409)
    settings.API_MAX_JOBS_PER_REQUEST = 1
    assert_problem(post(client, [noop_doc(), noop_doc()], token), 413)


def test_a_failing_view_is_a_500_problem_and_stores_nothing(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import console.api

    def broken(*args, **kwargs):
        raise RuntimeError("boom: a secret detail")

    monkeypatch.setattr(console.api, "create_jobs", broken)
    client.raise_request_exception = False
    body = assert_problem(post(client, noop_doc(), token), 500)
    assert "secret" not in body["detail"]
    assert not Job.objects.exists()


def test_a_busy_database_is_a_503_problem_with_retry_after(
    client: Client, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import console.api

    def busy(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(console.api, "create_jobs", busy)
    response = post(client, noop_doc(), token)
    assert_problem(response, 503)
    assert response["Retry-After"]


def test_the_console_pages_keep_their_html_errors(client: Client) -> None:
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    job = make_job("noop")
    assert client.get(f"/jobs/{job.job_id}%00/").status_code == 400
    assert client.get(f"/jobs/{job.job_id}%00/")["Content-Type"].startswith("text/html")


def test_the_schema_declares_every_error_as_a_problem(client: Client) -> None:
    spec = client.get("/api/v1/openapi.json").json()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
            assert errors, (path, method)
            for status, response in errors.items():
                assert list(response["content"]) == [PROBLEM], (path, method, status)
    post_statuses = set(spec["paths"][JOBS]["post"]["responses"])
    assert {"400", "401", "403", "409", "411", "413", "415", "422", "503"} <= post_statuses


def test_with_debug_on_errors_are_still_problems_without_the_traceback(
    client: Client, token: str, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import console.api

    def broken(*args, **kwargs):
        raise RuntimeError("boom: a secret detail")

    settings.DEBUG = True
    monkeypatch.setattr(console.api, "create_jobs", broken)
    client.raise_request_exception = False
    body = assert_problem(post(client, noop_doc(), token), 500)
    assert "secret" not in body["detail"] and "Traceback" not in body["detail"]
    assert_problem(client.get("/api/v1/nope", headers=_bearer(token)), 404)
