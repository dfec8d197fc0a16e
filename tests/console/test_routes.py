"""The route matrix: every console route declares a policy, and every POST action refuses.

Routes come from the URL resolver, not from a hand-kept list, so a new route is checked the
moment it is added: without a ``console.policy`` decorator it fails
``test_routes_every_route_declares_policy``; as an action it is put through anonymous, no
permission, missing CSRF and GET, each of which must be refused with nothing written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.http import HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse

from console.policy import Policy
from inbox.models import Job, JobState
from tests.factories import make_job

# Apps whose tables must not change when a request is refused.
WATCHED_APPS = ("inbox", "audit", "runs", "console")


@dataclass(frozen=True)
class Route:
    route: str
    name: str
    callback: Any
    params: tuple[str, ...]

    @property
    def policy(self) -> Policy | None:
        return getattr(self.callback, "console_policy", None)


def collect_routes(
    patterns: Iterable[URLPattern | URLResolver] | None = None,
    prefix: str = "",
    namespace: str = "",
    params: tuple[str, ...] = (),
) -> list[Route]:
    """Every URL pattern reachable from ``patterns`` (the root URLconf by default) except the
    Django admin, which has its own permission system."""
    if patterns is None:
        patterns = get_resolver().url_patterns
    routes: list[Route] = []
    for entry in patterns:
        converters = tuple(getattr(entry.pattern, "converters", {}) or {})
        text = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin" or entry.namespace == "admin":
                continue
            ns = namespace
            if entry.namespace:
                ns = f"{namespace}{entry.namespace}:"
            routes += collect_routes(entry.url_patterns, text, ns, params + converters)
        else:
            name = f"{namespace}{entry.name}" if entry.name else ""
            routes.append(Route(text, name, entry.callback, params + converters))
    return routes


def undeclared(routes: Iterable[Route]) -> list[str]:
    return [route.route for route in routes if route.policy is None]


ROUTES = collect_routes()
ACTIONS = [r for r in ROUTES if r.policy is not None and r.policy.kind == "action"]
PAGES = [r for r in ROUTES if r.policy is not None and r.policy.kind == "page"]


def test_routes_every_route_declares_policy() -> None:
    assert ROUTES, "the resolver returned no route"
    assert undeclared(ROUTES) == []


def test_routes_undecorated_view_is_reported() -> None:
    def bare(request):  # a new view someone forgot to declare
        return HttpResponse("ok")

    routes = collect_routes([path("new-thing/", bare, name="new_thing")])
    assert undeclared(routes) == ["new-thing/"]


def test_routes_matrix_covers_known_actions_and_pages() -> None:
    names = {r.name for r in ACTIONS}
    assert {"console:job_retry", "console:bulk_retry", "console:bulk_reconcile"} <= names
    assert {"console:home", "console:job_list", "console:job_detail", "console:event_list"} <= {
        r.name for r in PAGES
    }
    assert all(r.policy.permission for r in ACTIONS)


# --- refusals ---------------------------------------------------------------------------------


def snapshot() -> dict[str, Any]:
    """Row counts of every watched table plus each job's mutable columns."""
    counts = {
        model._meta.label: model.objects.count()
        for app in WATCHED_APPS
        for model in apps.get_app_config(app).get_models()
    }
    jobs = list(
        Job.objects.order_by("job_id").values_list(
            "job_id", "state", "updated_at", "result_code", "approval_id", "lease_until"
        )
    )
    return {"counts": counts, "jobs": jobs}


@pytest.fixture
def failed_job(db) -> Job:
    return make_job("save", state=JobState.FAILED)


def _url(route: Route, job: Job) -> str:
    samples = {"job_id": job.job_id, "run_id": "run-none", "scope": "save"}
    return reverse(route.name, kwargs={p: samples.get(p, "x") for p in route.params})


def _form(job: Job) -> dict[str, Any]:
    return {
        "request_id": uuid.uuid4().hex,
        "reason": "matrix",
        "job_ids": [job.job_id],
        "mode": "selected",
        "decision": "approve",
    }


def _user(username: str, role: str | None = None, *, superuser: bool = False):
    User = get_user_model()
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.test", None)
    user = User.objects.create_user(username, f"{username}@example.test", None)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.mark.django_db
@pytest.mark.parametrize("route", ACTIONS, ids=lambda r: r.name)
def test_action_anonymous_redirects_to_login_and_writes_nothing(
    client: Client, failed_job: Job, route: Route
) -> None:
    before = snapshot()
    response = client.post(_url(route, failed_job), _form(failed_job))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    hx = client.post(
        _url(route, failed_job),
        _form(failed_job),
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/jobs/"},
    )
    assert hx["HX-Redirect"].startswith("/login/?next=/jobs/")
    assert snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("route", ACTIONS, ids=lambda r: r.name)
def test_action_without_permission_is_forbidden_and_writes_nothing(
    client: Client, failed_job: Job, route: Route
) -> None:
    client.force_login(_user("nobody"))
    before = snapshot()
    response = client.post(_url(route, failed_job), _form(failed_job))
    assert response.status_code == 403
    hx = client.post(_url(route, failed_job), _form(failed_job), headers={"HX-Request": "true"})
    assert hx.status_code == 403
    # Rendered into the action's region, not as a whole page.
    assert f'id="{route.policy.region}"' in hx.content.decode()
    assert b"<html" not in hx.content
    assert snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("route", ACTIONS, ids=lambda r: r.name)
def test_action_viewer_role_is_forbidden_and_writes_nothing(
    client: Client, failed_job: Job, route: Route
) -> None:
    client.force_login(_user("viewer-1", "viewer"))
    before = snapshot()
    assert client.post(_url(route, failed_job), _form(failed_job)).status_code == 403
    assert snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("route", ACTIONS, ids=lambda r: r.name)
def test_action_missing_csrf_is_forbidden_and_writes_nothing(failed_job: Job, route: Route) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user("root", superuser=True))
    before = snapshot()
    response = client.post(_url(route, failed_job), _form(failed_job))
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("route", ACTIONS, ids=lambda r: r.name)
def test_action_get_is_not_allowed_and_writes_nothing(
    client: Client, failed_job: Job, route: Route
) -> None:
    client.force_login(_user("root", superuser=True))
    before = snapshot()
    response = client.get(_url(route, failed_job), _form(failed_job))
    assert response.status_code == 405
    assert snapshot() == before


@pytest.mark.django_db
def test_action_with_csrf_token_and_permission_writes(failed_job: Job) -> None:
    """The positive control: the same request with a token does act (the matrix can fail)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user("root", superuser=True))
    page = client.get(reverse("console:job_detail", args=[failed_job.job_id]))
    token = page.cookies["csrftoken"].value
    url = reverse("console:job_retry", args=[failed_job.job_id])
    response = client.post(url, _form(failed_job), headers={"X-CSRFToken": token})
    assert response.status_code == 200
    assert Job.objects.get(job_id=failed_job.job_id).state == JobState.READY


@pytest.mark.django_db
@pytest.mark.parametrize("route", PAGES, ids=lambda r: r.name)
def test_page_anonymous_redirects_to_login(client: Client, failed_job: Job, route: Route) -> None:
    response = client.get(_url(route, failed_job))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("route", PAGES, ids=lambda r: r.name)
def test_page_post_is_not_allowed_and_writes_nothing(
    client: Client, failed_job: Job, route: Route
) -> None:
    client.force_login(_user("root", superuser=True))
    before = snapshot()
    response = client.post(_url(route, failed_job), _form(failed_job))
    assert response.status_code == 405
    assert snapshot() == before


@pytest.mark.django_db
def test_health_routes_are_public(client: Client) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
