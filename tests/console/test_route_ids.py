"""Every id reaches its own route, whatever it starts or ends with.

Job and run ids are producer-chosen text and may contain "/". A route with an id followed by a
suffix (``jobs/<id>/lease/``) let ``a/lease`` show job ``a``'s lease fragment instead of its
own page. Now the id is always last and no two routes can match one URL; this test reverses
every id-carrying route for hostile ids and resolves the URL back.
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from django.test import Client
from django.urls import resolve, reverse

from console.templatetags.console_tags import id_url
from inbox.models import JobState
from tests.console.pagekit import login
from tests.console.test_routes import ROUTES
from tests.factories import make_job

HOSTILE_IDS = [
    "plain",
    "a/lease",
    "a/lease/",
    "a/retry",
    "a/retry/",
    "a/",
    "a//b",
    "lease/a",
    "retry/a",
    "bulk/preview",
    "bulk/retry",
    "bulk/reconcile",
    "bulk/preview/",
    "x/confirm-deleted",
    "x/not-applied",
    "x/annotate",
    "confirm-deleted/x",
    "auto",
    "x/approve",
    "approve/x",
    "x/deny",
    "x/close",
    "close/x",
    "/",
    "//",
    "a b?c#d%e",
]

ID_ROUTES = [r for r in ROUTES if {"job_id", "run_id"} & set(r.params)]


def test_routes_with_an_id_are_all_covered() -> None:
    names = {r.name for r in ID_ROUTES}
    assert {
        "console:job_detail",
        "console:job_lease",
        "console:job_retry",
        "console:reconcile_confirm_deleted",
        "console:reconcile_not_applied",
        "console:reconcile_annotate",
        "console:approve_delete",
        "console:deny_delete",
        "console:close_run",
    } <= names


@pytest.mark.parametrize("route", ID_ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize("object_id", HOSTILE_IDS)
def test_route_with_hostile_id_resolves_to_itself(route, object_id: str) -> None:
    (param,) = [p for p in route.params if p in ("job_id", "run_id")]
    url = reverse(route.name, kwargs={param: object_id})
    match = resolve(unquote(url))  # the server decodes the path before resolving it
    assert (match.view_name, match.kwargs) == (route.name, {param: object_id})


@pytest.mark.parametrize(
    "route_name",
    ["console:job_list", "console:bulk_preview", "console:bulk_retry", "console:bulk_reconcile"],
)
def test_fixed_job_routes_are_not_a_job_page(route_name: str) -> None:
    """No job id can be shadowed by a fixed route: their URLs never end as a job page's does."""
    url = reverse(route_name)
    assert resolve(url).view_name == route_name
    for object_id in HOSTILE_IDS:
        assert reverse("console:job_detail", args=[object_id]) != url


@pytest.mark.django_db
@pytest.mark.parametrize("suffix", ["lease", "retry", "lease/", "retry/"])
def test_job_page_of_id_with_action_suffix_shows_that_job(client: Client, suffix: str) -> None:
    login(client, "viewer-1", "viewer")
    base = make_job("save", job_id="j", state=JobState.FAILED)
    hostile = make_job("save", job_id=f"j/{suffix}", state=JobState.SUCCEEDED)
    for job, other in ((hostile, base), (base, hostile)):
        response = client.get(reverse("console:job_detail", args=[job.job_id]))
        assert response.status_code == 200
        assert response.context["job"].job_id == job.job_id
        lease = client.get(reverse("console:job_lease", args=[job.job_id]))
        assert lease.status_code == 200
        assert lease.context["job"].job_id == job.job_id
        assert other.job_id != job.job_id


@pytest.mark.parametrize("route", ID_ROUTES, ids=lambda r: r.name)
@pytest.mark.parametrize("object_id", [*HOSTILE_IDS, "job-00000001", "é ü", "ключ:1", "a@b~c"])
def test_id_url_is_reverse(route, object_id: str) -> None:
    """``{% id_url %}`` (the route reversed once) writes the very URL ``{% url %}`` writes."""
    if len(route.params) != 1:
        pytest.skip("id_url serves routes with one argument")
    assert id_url(route.name, object_id) == reverse(route.name, args=[object_id])
