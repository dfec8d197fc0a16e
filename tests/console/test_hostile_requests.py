"""Hostile and unlucky requests get a styled answer, never a 500.

- A NUL byte in the path, the query string, a form field (key or value) or a cookie: a styled
  400 before any database query (PostgreSQL refuses NUL in text and used to answer 500).
- Error pages 400, 403, 404, 500 and 503 are the console's own, in DEBUG and production.
- A database that stays locked (another real process holds the SQLite write lock, or a
  PostgreSQL table lock past the lock timeout): 503 "database busy, try again", nothing
  written.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse

from console.models import ActionRequest
from inbox.models import Job, JobState
from tests.console.pagekit import action_form, hx, login, make_user
from tests.factories import make_job
from tests.support.lockhold import hold_write_lock

NUL_REQUESTS = {
    "path": ("get", "/jobs/ab%00cd/", {}),
    "path of a lease": ("get", "/jobs/lease/%00", {}),
    "query value": ("get", "/jobs/?q=%00", {}),
    "query key": ("get", "/audit/?actor%00=x", {}),
    "filter": ("get", "/audit/?actor=op%00", {}),
}


def _styled(response: HttpResponse, code: int) -> str:
    body = response.content.decode()
    assert f"HTTP {code}" in body
    assert 'class="panel error-panel"' in body
    assert "Job &amp; Run Console" in body
    return body


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(NUL_REQUESTS))
def test_request_with_nul_in_address_is_refused_with_400_before_the_database(
    client: Client, name: str
) -> None:
    login(client, "viewer-1", "viewer")
    method, url, data = NUL_REQUESTS[name]
    with CaptureQueriesContext(connection) as queries:
        response = getattr(client, method)(url, data)
    assert response.status_code == 400
    assert "NUL byte" in _styled(response, 400)
    assert len(queries) == 0


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["reason", "request_id", "key", "job_ids"])
def test_action_with_nul_in_form_is_refused_with_400_and_writes_nothing(
    client: Client, where: str
) -> None:
    login(client, "ops", "operator")
    job = make_job("save", state=JobState.FAILED)
    form = action_form("disk full")
    if where == "key":
        form["re\x00ason"] = "x"
    elif where == "job_ids":
        form["job_ids"] = [job.job_id, "evil\x00id"]
    else:
        form[where] = form[where] + "\x00"
    with CaptureQueriesContext(connection) as queries:
        response = client.post(reverse("console:job_retry", args=[job.job_id]), form)
    assert response.status_code == 400
    assert "NUL byte in the form" in _styled(response, 400)
    assert len(queries) == 0
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert ActionRequest.objects.count() == 0


@pytest.mark.django_db
def test_htmx_action_with_nul_gets_a_fragment_for_its_region(client: Client) -> None:
    login(client, "ops", "operator")
    job = make_job("save", state=JobState.FAILED)
    response = client.post(
        reverse("console:job_retry", args=[job.job_id]),
        action_form("x\x00"),
        headers=hx("job-actions"),
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "<html" not in body
    assert "NUL byte" in body


@pytest.mark.django_db
def test_login_with_nul_in_username_is_refused_with_400(client: Client) -> None:
    response = client.post(reverse("console:login"), {"username": "ad\x00min", "password": "x"})
    assert response.status_code == 400


@pytest.mark.django_db
def test_request_with_nul_in_a_cookie_is_refused_before_the_session_is_read(
    client: Client,
) -> None:
    client.cookies["sessionid"] = "abc\x00def"
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("console:job_list"))
    assert response.status_code == 400
    assert len(queries) == 0


# --- error pages ------------------------------------------------------------------------------


def _boom(request):
    raise RuntimeError("boom")


def _denied(request):
    raise PermissionDenied


def _suspicious(request):
    raise SuspiciousOperation("tampered")


urlpatterns = [
    path("boom/", _boom),
    path("denied/", _denied),
    path("suspicious/", _suspicious),
    path("", include("config.urls")),
]
handler400 = "console.middleware.bad_request"
handler403 = "console.middleware.permission_denied"
handler404 = "console.middleware.page_not_found"
handler500 = "console.middleware.server_error"


@pytest.fixture(params=[False, True], ids=["production", "debug"])
def debug(request, settings) -> bool:
    settings.DEBUG = request.param
    return request.param


@pytest.mark.django_db
def test_unknown_job_id_shows_the_styled_404(client: Client, debug: bool) -> None:
    login(client, "viewer-1", "viewer")
    response = client.get(reverse("console:job_detail", args=["no-such-job"]))
    assert response.status_code == 404
    body = _styled(response, 404)
    assert "no-such-job" in body
    assert "Technical" not in body and "Traceback" not in body


@pytest.mark.django_db
def test_unknown_address_shows_the_styled_404_in_production(client: Client) -> None:
    login(client, "viewer-1", "viewer")
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert "/no/such/page/" in _styled(response, 404)


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_permission_denied_shows_the_styled_403(client: Client, debug: bool) -> None:
    login(client, "viewer-1", "viewer")
    response = client.get("/denied/")
    assert response.status_code == 403
    _styled(response, 403)


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_suspicious_request_shows_the_styled_400(client: Client, debug: bool) -> None:
    login(client, "viewer-1", "viewer")
    response = client.get("/suspicious/")
    assert response.status_code == 400
    _styled(response, 400)


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_server_error_shows_the_styled_500_without_touching_the_request(
    client: Client, settings
) -> None:
    settings.DEBUG = False
    login(client, "viewer-1", "viewer")
    response = Client(raise_request_exception=False).get("/boom/")
    assert response.status_code == 500
    body = _styled(response, 500)
    assert "boom" not in body  # no internals on the page


@pytest.mark.django_db
def test_disallowed_host_shows_the_styled_400(settings) -> None:
    settings.DEBUG = False
    response = Client().get("/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    _styled(response, 400)


# --- a busy database --------------------------------------------------------------------------


def _suite_url() -> str:
    conf = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{conf['NAME']}"
    auth = conf["USER"] + (f":{conf['PASSWORD']}" if conf.get("PASSWORD") else "")
    return f"postgres://{auth}@{conf['HOST'] or '127.0.0.1'}:{conf['PORT'] or 5432}/{conf['NAME']}"


@pytest.fixture
def short_lock_wait():
    """Give up waiting for a lock after half a second (the settings wait 30 s on SQLite)."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    if connection.vendor == "sqlite":
        options["timeout"] = 0.5
        options["init_command"] = options["init_command"].replace(
            "busy_timeout=30000", "busy_timeout=500"
        )
    else:
        options["options"] = "-c lock_timeout=500"
    connection.close()
    yield
    options.clear()
    options.update(saved)
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_action_on_locked_database_answers_503_and_writes_nothing(short_lock_wait) -> None:
    job = make_job("save", state=JobState.FAILED)
    client = Client()
    client.force_login(make_user("ops", "operator"))
    form = action_form("disk full")
    with hold_write_lock(_suite_url(), tables=("inbox_job", "console_actionrequest")):
        response = client.post(reverse("console:job_retry", args=[job.job_id]), form)
        htmx = client.post(
            reverse("console:job_retry", args=[job.job_id]),
            action_form("again"),
            headers=hx("job-actions"),
        )
    assert response.status_code == 503
    body = _styled(response, 503)
    assert "Database busy, try again" in body
    assert response["Retry-After"].isdigit()
    assert htmx.status_code == 503
    assert Job.objects.get(job_id=job.job_id).state == JobState.FAILED
    assert not ActionRequest.objects.filter(request_id=form["request_id"]).exists()
    # Once the lock is gone, the same request acts.
    again = client.post(reverse("console:job_retry", args=[job.job_id]), form)
    assert again.status_code == 200
    assert Job.objects.get(job_id=job.job_id).state == JobState.READY
